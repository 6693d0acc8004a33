"""`make site`: the course as a static site in build/site, every lesson with its outputs.

The notebooks are committed without outputs (the tests execute them), so someone browsing the
repository sees no results, figures or proofs. The site shows the copies `make course` executed
(build/notebooks), in course order after the README, then the guides and the package map. What
the lessons printed about who ran them and where (user and host names, addresses and ports, job
ids, home paths) is scrubbed first (`scrub`), and the notebooks a reader downloads are those
scrubbed copies.

The sources are laid out as in the repository (README as the front page, docs/, notebooks/,
helpers/README.md), so a link that works on the repository works on the site; Sphinx with
MyST-NB builds them (docs/conf.py says why not Jupyter Book 2). Sphinx's warnings about links
that lead nowhere fail the build.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import CourseError
from .course_run import executed_whole, lessons
from .scrub import scrub_notebooks

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ("modes-and-data", "slurm", "offering", "gpu-class", "instructor", "troubleshooting", "security", "measured",
          "from-horovod-or-pytorch", "keras3-fit", "settings", "check-your-script", "reviewing-a-lesson")
# Sphinx warnings that mean a reader would meet a dead end
BROKEN = re.compile(r"(reference target not found|cross-reference target not found|document isn't included in any "
                    r"toctree|toctree contains reference to nonexisting document|image file not readable|"
                    r"local id not found|Unknown target|undefined label)", re.I)


def lesson_notebooks(notebooks: Path) -> list[Path]:
    """The executed lessons, in course order; every lesson of the repository must be there, run whole."""
    wanted = [p.name for p in lessons()]
    missing = [name for name in wanted if not (notebooks / name).exists()]
    if missing:
        raise CourseError(f"{notebooks} lacks the executed {', '.join(missing)}: run `make course` first "
                          "(the site shows the notebooks it executed)")
    unrun = [name for name in wanted if not executed_whole(notebooks / name)]
    if unrun:
        raise CourseError(f"{', '.join(unrun)} in {notebooks} did not run whole (a cell not run, or an error): "
                          "run `make course` first")
    return [notebooks / name for name in wanted]


def front_page(lessons: list[Path]) -> str:
    """The README, followed by the site's navigation (hidden: the theme draws it in the sidebar)."""
    readme = (ROOT / "README.md").read_text()
    toc = ["", "```{toctree}", ":hidden:", ":caption: Lessons", ""]
    toc += [f"notebooks/{p.stem}" for p in lessons]
    toc += ["```", "", "```{toctree}", ":hidden:", ":caption: Guides", ""]
    toc += [f"docs/{name}" for name in GUIDES]
    toc += ["helpers/README", "```", ""]
    return readme + "\n".join(toc)


def lay_out(notebooks: Path, source: Path) -> list[Path]:
    """Copy what the site shows into `source`, laid out as in the repository."""
    lessons = lesson_notebooks(notebooks)
    guides = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    if sorted(GUIDES) != guides:
        raise CourseError(f"docs/ holds {guides}, the site's navigation lists {sorted(GUIDES)}: add the new guide "
                          "to GUIDES in helpers/commands/site.py")
    shutil.rmtree(source, ignore_errors=True)
    (source / "notebooks").mkdir(parents=True)
    (source / "helpers").mkdir()
    shutil.copytree(ROOT / "docs", source / "docs")
    shutil.move(source / "docs" / "conf.py", source / "conf.py")
    for page in scrub_notebooks(lessons, source / "notebooks"):  # no user, host, address, job id or home path
        drop_hidden_results(page)
    shutil.copy2(ROOT / "helpers" / "README.md", source / "helpers" / "README.md")
    (source / "index.md").write_text(front_page(lessons))
    return lessons


def drop_hidden_results(page: Path) -> int:
    """Drop the value a cell ending in `;` shows: JupyterLab hides it, but a copy nbval executed keeps it (IPython
    reads the `;` from its input history, which nbval does not keep). Returns how many were dropped.

    The `;` is read as IPython reads it, from the cell as parsed: a `%%writefile` cell is a magic call there,
    not the shell script it holds (which Python's tokenizer refuses)."""
    import nbformat
    from IPython.core.displayhook import DisplayHook
    from IPython.core.inputtransformer2 import TransformerManager

    nb, dropped, parse = nbformat.read(page, as_version=4), 0, TransformerManager().transform_cell
    for cell in nb.cells:
        if cell.cell_type == "code" and DisplayHook.semicolon_at_end_of_expression(parse(cell.source)):
            kept = [o for o in cell.outputs if o.output_type != "execute_result"]
            dropped, cell.outputs = dropped + len(cell.outputs) - len(kept), kept
    nbformat.write(nb, page)
    return dropped


def build(notebooks: Path, out: Path, source: Path | None = None) -> list[str]:
    """Build the site into `out`; returns Sphinx's warnings (none of them a dead end)."""
    source = source or out.parent / "site-src"
    lessons = lay_out(notebooks, source)
    print(f"site: {len(lessons)} lessons from {notebooks}, the guides and the package map -> {out}", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    log = out.parent / "site-warnings.txt"
    done = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "2", "-w", str(log),
                           str(source), str(out)], capture_output=True, text=True)
    warnings = [line for line in (log.read_text() if log.exists() else "").splitlines() if "WARNING" in line]
    if done.returncode != 0:
        raise CourseError(f"sphinx failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-1500:]}")
    broken = [line for line in warnings if BROKEN.search(line)]
    if broken:
        raise CourseError("the site has links that lead nowhere:\n  " + "\n  ".join(broken[:20]))
    print(f"site: built {out / 'index.html'} ({len(warnings)} warning(s) in {log})", flush=True)
    return warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", default="build/notebooks", help="the executed notebooks (make course's)")
    parser.add_argument("--out", default="build/site")
    args = parser.parse_args(argv)
    try:
        build(Path(args.notebooks).resolve(), Path(args.out).resolve())
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
