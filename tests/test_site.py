"""The course's site (`make site`), built from executed lessons and read in Chromium.

The notebooks are the ones the nbval pass executed in this run (`make test` keeps them:
COURSE_NBVAL_KEEP), so the test runs after the notebooks and fails, naming them, when the pass left a
lesson incomplete (executing the course again would only repeat its failure); run alone, it executes
the lessons first with `make course`'s runner (about 5 minutes). Every link and image of the built site must
lead somewhere; in Chromium every lesson page shows its figures (loaded) and its proof's output,
the search finds a lesson, and a screenshot of a lesson page is read back.
"""

from __future__ import annotations

import functools
import http.server
import re
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

from helpers.commands.course_run import executed_whole, lessons
from helpers.commands.site import build, drop_hidden_results, lesson_notebooks
from tests.conftest import ROOT
from tests.support.browser import CHROMIUM_ARGS, SCREENSHOTS, ensure_chromium

pytestmark = pytest.mark.after_notebooks
LESSONS = [p.name for p in lessons()]


@pytest.fixture(scope="module")
def executed(tmp_path_factory, report, nbval_kept) -> Path:
    if nbval_kept:  # under make test (COURSE_NBVAL_KEEP): the nbval pass ran (or failed) every lesson already
        kept = nbval_kept
        incomplete = [name for name in LESSONS if not (kept / name).exists() or not executed_whole(kept / name)]
        assert not incomplete, (f"the nbval pass did not execute these lessons whole (failed above, or deselected), "
                                f"so the site cannot be built from them: {', '.join(incomplete)}")
        report(f"{Path(__file__).stem}: the site is built from the {len(LESSONS)} executed lessons in {kept} "
               "(COURSE_NBVAL_KEEP: the nbval pass's, under make test)")
        return kept
    out = tmp_path_factory.mktemp("course")
    print("run alone (no COURSE_NBVAL_KEEP): executing the lessons with make course's runner")
    done = subprocess.run([sys.executable, "-m", "helpers.commands.course_run", "--out", str(out)],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return out / "notebooks"


@pytest.fixture(scope="module")
def site(executed, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    build(executed, out)
    return out


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for name in ("href", "src"):
            if attrs.get(name) and not (tag == "link" and attrs.get("rel") in ("preconnect", "dns-prefetch")):
                self.links.append(attrs[name])


@functools.cache
def _parsed(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(errors="replace"))
    return parser


def pages(site: Path) -> list[Path]:
    """The site's pages (the theme's `_static/*.html` are templates, not pages)."""
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)


def broken_links(site: Path) -> list[str]:
    """Every relative href and src of every page leads to a file, and its #fragment to an id there."""
    broken = []
    for page in pages(site):
        for link in _parsed(page).links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith(("//", "mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link}")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _parsed(target).ids:
                broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    return broken


def proof_output(notebook: Path) -> str:
    """The first line the proof cell printed: the first code cell with an assert after the
    '## Proof' heading, which every lesson has."""
    nb = nbformat.read(notebook, as_version=4)
    heading = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and
                   re.match(r"#+ Proof", c.source.strip()))
    for cell in nb.cells[heading:]:
        if cell.cell_type == "code" and "assert" in cell.source:
            text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            assert lines, f"{notebook.name}: its proof cell printed nothing"
            return lines[-1]
    raise AssertionError(f"{notebook.name}: no proof cell after the Proof heading")


def test_every_lesson_is_executed_and_has_a_proof(executed):
    lessons = lesson_notebooks(executed)
    assert [p.name for p in lessons] == LESSONS
    for path in lessons:
        assert proof_output(path)


def test_the_site_has_a_page_per_lesson_and_no_dead_links(site, report):
    lesson_pages = sorted(p.name for p in (site / "notebooks").glob("*.html"))
    assert lesson_pages == [name.replace(".ipynb", ".html") for name in LESSONS]
    for guide in (ROOT / "docs").glob("*.md"):
        assert (site / "docs" / f"{guide.stem}.html").exists(), guide.name
    assert (site / "helpers" / "README.html").exists() and (site / "search.html").exists()
    broken = broken_links(site)
    count = sum(len(_parsed(p).links) for p in pages(site))
    report(f"{Path(__file__).stem}: {len(pages(site))} pages, {count} links and images checked, "
           f"{len(broken)} broken")
    assert not broken, broken[:20]


def test_a_dead_link_is_found(tmp_path):
    """The link check itself: a page with a missing file and a missing anchor."""
    (tmp_path / "a.html").write_text('<p id="here"><a href="b.html">b</a> <a href="a.html#here">ok</a>'
                                     ' <a href="#nowhere">x</a> <img src="_images/none.png"></p>')
    _parsed.cache_clear()
    assert sorted(broken_links(tmp_path)) == ["a.html: #nowhere (no such anchor)", "a.html: _images/none.png",
                                              "a.html: b.html"]


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_every_lesson_page_shows_its_figures_and_proof_in_chromium(site, served, executed, report):
    executable = ensure_chromium()
    from playwright.sync_api import sync_playwright

    seen = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            for name in LESSONS:
                notebook = site.parent / "site-src" / "notebooks" / name  # the scrubbed copy the page shows
                figures = sum(1 for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"
                              for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
                page.goto(f"{served}/notebooks/{name.replace('.ipynb', '.html')}", wait_until="load")
                images = page.eval_on_selector_all(
                    "article img", "els => els.map(e => [e.getAttribute('src'), e.complete && e.naturalWidth > 0])")
                text = page.inner_text("article")
                assert len(images) >= figures, f"{name}: {len(images)} images on the page, {figures} figures in the notebook"
                assert all(ok for _, ok in images), f"{name}: images that did not load: {[s for s, ok in images if not ok]}"
                proof = proof_output(notebook)
                assert proof in text, f"{name}: the proof's output {proof!r} is not on the page"
                seen.append(f"{name[:2]}: {figures} figure(s)")
            page.goto(f"{served}/search.html?q=MultiWorkerMirroredStrategy", wait_until="load")
            page.wait_for_selector("#search-results li", timeout=30_000)
            found = page.eval_on_selector_all("#search-results li a", "els => els.map(e => e.getAttribute('href'))")
            page.goto(f"{served}/notebooks/03_multiworker_ipyparallel.html", wait_until="load")
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shot = SCREENSHOTS / "site-03_multiworker_ipyparallel.png"
            page.screenshot(path=str(shot), full_page=True)
            title = page.title()
        finally:
            browser.close()
    report(f"{Path(__file__).stem}: lesson pages in Chromium, figures loaded and proof shown: {', '.join(seen)}; "
           f"screenshot {shot}")
    assert any("03_multiworker_ipyparallel" in (href or "") for href in found), found
    assert "Multi" in title or "multi" in title.lower(), title
    from PIL import Image

    with Image.open(shot) as image:
        width, height = image.size
        colours = image.convert("RGB").resize((200, 200)).getcolors(40_000) or []
    assert width == 1400 and height > 3000, (width, height)  # a whole lesson, not an error page
    assert len(colours) > 200, f"the screenshot has {len(colours)} colours: a blank page?"


def test_make_site_without_make_course_says_what_to_run(tmp_path):
    done = subprocess.run([sys.executable, "-m", "helpers.commands.site", "--notebooks", str(tmp_path / "none"),
                           "--out", str(tmp_path / "site")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and "run `make course` first" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# what an executed lesson prints about who ran it and where: none of it may reach the site
PLANTED = {
    "doctor": "TF HPC course doctor: zq7learner@login3q.hpc.example, 2026-11-26 04:00 UTC, "
              "course /home/zq7learner/tf-hpc-course\nhome: /home/zq7learner, output /home/zq7learner/out",
    "placement": "2 engines ready: rank 0 on nid004711 (GPU 0), rank 1 on nid004712 (GPU 0)",
    "tf_config": 'TF_CONFIG={"cluster": {"worker": ["nid004711:45678", "nid004712:45679"]}, '
                 '"task": {"type": "worker", "index": 0}}',
    "controller": "controller listening on tcp://10.77.0.191:56789; engines job 987654 "
                  "(Submitted batch job 987654, SLURM_JOB_ID=987654, step 987654.0, NodeList=nid[004711-004712])",
}
SECRETS = ("zq7learner", "login3q", "nid004711", "nid004712", "nid[004711", "10.77.0.191", "45678", "45679",
           "56789", "987654", "/home/")
KEPT = ("/job:worker/replica:0/task:1/device:CPU:0", "MultiWorkerMirroredStrategy")


def _plant(notebook: Path, png: str) -> None:
    import nbformat
    from nbformat.v4 import new_output

    nb = nbformat.read(notebook, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    code[0].outputs = [new_output("stream", name="stdout", text=PLANTED["doctor"] + "\n"),
                       new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})]
    code[1].outputs = [new_output("stream", name="stdout", text="\n".join(
        [PLANTED["placement"], PLANTED["tf_config"], f"{KEPT[0]} {KEPT[1]}"]) + "\n")]
    code[2].outputs = [new_output("execute_result", execution_count=3, data={
        "text/plain": PLANTED["controller"],
        "text/html": f"<table><tr><td>{PLANTED['placement']}</td><td>{PLANTED['controller']}</td></tr></table>"})]
    code[3].outputs = [new_output("error", ename="CourseError", evalue=PLANTED["controller"],
                                  traceback=['File "/home/zq7learner/tf-hpc-course/helpers/x.py", line 1'])]
    nbformat.write(nb, notebook)


def test_the_site_publishes_no_user_host_address_job_or_home_path(tmp_path, monkeypatch, report):
    """The site built from lessons whose outputs print a user, hosts, addresses, ports, job ids and
    home paths: no page, search index or downloadable notebook shows one; placeholders show instead,
    figures are untouched and what the lesson teaches (device names) stays."""
    import base64
    import io
    import time

    from PIL import Image

    from helpers.commands import site as site_tool

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buffer, format="PNG")
    png = base64.b64encode(buffer.getvalue()).decode()
    executed = tmp_path / "executed"
    executed.mkdir()
    for path in lessons():
        (executed / path.name).write_bytes(path.read_bytes())
    for name in (LESSONS[0], "03_multiworker_ipyparallel.ipynb"):
        _plant(executed / name, png)
    monkeypatch.setattr(site_tool, "executed_whole", lambda path: True)  # outputs planted, not executed
    started = time.monotonic()
    out = tmp_path / "site"
    build(executed, out)
    took = time.monotonic() - started
    published = [p for p in out.rglob("*") if p.is_file() and p.suffix in (".html", ".ipynb", ".js", ".txt", ".md")
                 and "_static" not in p.relative_to(out).parts]  # the theme's own files hold no output
    leaks = sorted({f"{p.relative_to(out)}: {secret}" for p in published for secret in SECRETS
                    if secret in p.read_text(errors="replace")})
    assert not leaks, leaks[:20]
    downloads = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.ipynb"))
    assert "_sources/notebooks/03_multiworker_ipyparallel.ipynb" in downloads, downloads
    page = (out / "notebooks" / "03_multiworker_ipyparallel.html").read_text()
    for shown in ("&lt;user&gt;@&lt;host&gt;", "rank 0 on &lt;host&gt;", "&lt;address&gt;", "&lt;job&gt;",
                  "~/tf-hpc-course" if "~/tf-hpc-course" in page else "&lt;course&gt;", *KEPT):
        assert shown in page, shown
    images = [p.read_bytes() for p in (out / "_images").glob("*.png")]
    assert base64.b64decode(png) in images, "the planted figure was changed"
    report(f"{Path(__file__).stem}: site with planted outputs built in {took:.0f} s: {len(published)} published "
           f"files, {len(SECRETS)} planted identities, 0 found; {len(downloads)} downloadable notebooks, scrubbed")


# a %%writefile cell whose shell script Python's tokenizer refuses (lesson 16's staging script: an unindent to no
# outer level); IPython reads the cell as a magic call, and the site must too
SCRIPT = "%%writefile stage.sh\nif true; then\n    for f in a; do\n      echo $f\n   done\nfi\n"


def test_a_value_a_cell_hides_with_a_semicolon_is_not_published(tmp_path):
    """nbval's copies keep the value of a last line ending in `;` (lesson 17's `stopwatch.report();` showed its
    seconds; `engines.view.push(...);` shows `[None, None]`), which JupyterLab hides: the site drops it, and only it."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in
                                         ("push(x);  # hidden", "total", "print(1);", SCRIPT)])
    value = nbformat.v4.new_output("execute_result", {"text/plain": "[None, None]"}, execution_count=1)
    printed = nbformat.v4.new_output("stream", name="stdout", text="1\n")
    nb.cells[0].outputs, nb.cells[1].outputs, nb.cells[2].outputs = [value], [value], [printed]
    nb.cells[3].outputs = [nbformat.v4.new_output("stream", name="stdout", text="Writing stage.sh\n")]
    page = tmp_path / "lesson.ipynb"
    nbformat.write(nb, page)
    assert drop_hidden_results(page) == 1
    kept = nbformat.read(page, as_version=4)
    assert [len(c.outputs) for c in kept.cells] == [0, 1, 1, 1]
