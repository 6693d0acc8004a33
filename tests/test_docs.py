"""The README and the guides: every relative link and anchor resolves (a moved section breaks no link)."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "helpers" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to dashes."""
    return {re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_link_resolves(page):
    broken = []
    for match in re.finditer(r"\]\(([^)#\s]+)?(#[^)\s]*)?\)", page.read_text()):
        target, anchor = match.group(1), match.group(2)
        if target and re.match(r"[a-z]+://", target):
            continue
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(match.group(0))
        elif anchor and path.suffix == ".md" and anchor[1:] not in _anchors(path):
            broken.append(match.group(0))
    assert not broken, f"{page.name}: {broken}"


def test_the_readme_stays_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 220, f"README.md has {len(lines)} lines: long guides belong in docs/"
    linked = set(re.findall(r"\]\(docs/([^)#]+)", "\n".join(lines)))
    assert linked == {p.name for p in (ROOT / "docs").glob("*.md")}, "every guide is linked from the README"


def _table_row(text: str, label: str) -> list[str]:
    line = next(l for l in text.splitlines() if l.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")[1:]]


def test_the_instructor_kit_covers_every_lesson_with_the_measured_and_predicted_times():
    """Every lesson has a row and a section; its quick and workshop times are the ones measured and
    predicted in docs/modes-and-data.md (no time typed in twice that could drift apart)."""
    kit = (ROOT / "docs" / "instructor.md").read_text()
    modes = (ROOT / "docs" / "modes-and-data.md").read_text()
    lessons = sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert _table_row(modes, "lesson") == lessons
    quick = dict(zip(lessons, _table_row(modes, "quick, measured here (s)")))
    workshop = dict(zip(lessons, _table_row(modes, "workshop, 4 A100, predicted training (min)")))
    rows = {line.split("|")[1].strip()[:2]: [c.strip() for c in line.strip("|").split("|")]
            for line in kit.splitlines() if re.match(r"\| \d\d ", line)}
    assert sorted(rows) == lessons, "a lesson without a row in the instructor kit"
    for lesson, row in rows.items():
        assert row[1] in ("core", "optional") and row[3].isdigit(), row
        assert (row[4], row[5]) == (quick[lesson], workshop[lesson]), f"lesson {lesson}: {row} vs the modes table"
        assert re.search(rf"^### {lesson} ", kit, re.M), f"lesson {lesson} has no section"


def test_the_modes_tables_predictions_are_what_training_time_predicts():
    """The predicted rows of docs/modes-and-data.md are `python -m helpers.training_time --table`'s figures
    (a change to a lesson's sizes or to the model must reach the page the trainer plans from)."""
    from helpers.training_time import table

    modes = (ROOT / "docs" / "modes-and-data.md").read_text()
    lessons = _table_row(modes, "lesson")
    predicted = {cells[0]: cells[1:] for cells in
                 ([c.strip() for c in line.strip("|").split("|")] for line in table().splitlines()[2:])}
    assert sorted(predicted) == lessons
    for column, label in enumerate(("workshop, 4 A100, predicted training (min)", "workshop, 4 A100, predicted start-up (min)",
                                    "full, 4 A100, predicted training (min)")):
        documented = [float(x) for x in _table_row(modes, label)]
        assert documented == [float(predicted[n][column]) for n in lessons], f"{label}: run helpers.training_time --table"


def test_the_readme_lessons_table_links_every_lesson_with_the_modes_tables_times():
    readme = (ROOT / "README.md").read_text()
    modes = (ROOT / "docs" / "modes-and-data.md").read_text()
    lessons = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    rows = re.findall(r"^\| \[`(\d\d_\w+)`\]\(notebooks/(\d\d_\w+)\.ipynb\) \| ([^|]+) \| ([^|]+) \|", readme, re.M)
    assert [r[0] for r in rows] == lessons and all(r[0] == r[1] for r in rows), rows
    quick = _table_row(modes, "quick, measured here (s)")
    workshop = _table_row(modes, "workshop, 4 A100, predicted training (min)")
    assert [r[2].strip() for r in rows] == quick and [r[3].strip() for r in rows] == workshop


def test_the_measured_tables_are_generated_from_their_bench_json(tmp_path):
    from helpers.commands.bench_report import BLOCK, update

    pages = sorted((ROOT / "docs").glob("*.md"))
    assert any("<!-- bench: " in page.read_text() for page in pages), "no table is generated from a bench JSON"
    for page in pages:
        assert update(page, check=True) == [], f"{page.name}: run python -m helpers.commands.bench_report {page}"
    # a figure changed in the JSON is caught
    page = ROOT / "docs" / "measured.md"
    blocks = {m.group("how"): m.group("body") for m in BLOCK.finditer(page.read_text())}
    assert "measured / model" in blocks["only"] and "measured / model" not in blocks["except"], blocks
    source = BLOCK.search(page.read_text()).group("source")
    (tmp_path / source).parent.mkdir(parents=True)
    bench = json.loads((page.parent / source).read_text())
    bench["rows"][0]["ours"] += 1
    (tmp_path / source).write_text(json.dumps(bench))
    copy = tmp_path / "measured.md"
    copy.write_text(page.read_text())
    runs = sorted((ROOT / "docs" / "bench").glob("gpucheck-*.json"))
    assert runs, "the Verified on table has no smoke run to show"
    for run in runs:
        (tmp_path / "bench" / run.name).write_text(run.read_text())
    assert update(copy, check=True) == [source]
    # and so is a smoke run sent back that the Verified on table does not show yet
    (tmp_path / source).write_text((page.parent / source).read_text())
    (tmp_path / "bench" / "gpucheck-new.json").write_text(runs[0].read_text().replace('"date": "', '"date": "1'))
    assert update(copy, check=True) == ["bench/gpucheck-*.json"]


def _tests_defined() -> dict[str, set[str]]:
    """Test module name -> the test functions (and classes) it defines, read from the source."""
    import ast

    found = {}
    for path in (ROOT / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text())
        found[path.stem] = {node.name for node in ast.walk(tree)
                            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.startswith(("test_", "Test"))}
    return found


def named_tests(text: str) -> set[str]:
    """Every `test_module`, `test_module::test_name` or `test_module::test_name[id]` a page names (the
    course's names for tests; an id is one parametrized case)."""
    return set(re.findall(r"\b(test_\w+(?:::(?:test_\w+(?:\[[^\]\s`|]+\])?|\*))?)", text))


def _missing_ids(named: set[str]) -> list[str]:
    """The `module::function[id]` names among `named` that pytest does not collect: the ids come from
    the parametrize lists, which only collection resolves (a case taken out of the list leaves the
    function, and a guide's claim that this case is checked, behind)."""
    import subprocess
    import sys

    with_ids = sorted(name for name in named if name.endswith("]"))
    if not with_ids:
        return []
    functions = sorted({f"tests/{name.partition('::')[0]}.py::{name.partition('::')[2].split('[')[0]}"
                        for name in with_ids})
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *functions],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    collected = {line.strip().removeprefix("tests/").replace(".py::", "::", 1) for line in done.stdout.splitlines()}
    return [name for name in with_ids if name not in collected]


GUIDES_NAMING_TESTS = ["troubleshooting.md", "security.md", "slurm.md", "offering.md", "measured.md"]


@pytest.mark.parametrize("guide", GUIDES_NAMING_TESTS)
def test_every_test_a_guide_names_exists(guide):
    """A guide that says "checked by test X" must name a test that is there: a removed or renamed test
    would otherwise leave a claim of proof behind."""
    defined, missing, named = _tests_defined(), [], named_tests((ROOT / "docs" / guide).read_text())
    for name in sorted(named):
        module, _, function = name.split("[")[0].partition("::")
        if module not in defined and not any(module in funcs for funcs in defined.values()):
            missing.append(name)
        elif function and function != "*" and function not in defined.get(module, set()):
            missing.append(name)
    missing += _missing_ids({name for name in named if "::" in name and name not in missing})
    assert not missing, f"docs/{guide} names tests that do not exist: {missing}"


def test_the_check_of_named_tests_catches_a_test_that_is_not_there():
    defined = _tests_defined()
    assert "test_the_readme_stays_a_front_door" in defined["test_docs"]
    assert named_tests("see `test_docs::test_no_such_test` and `test_nothing_here`") == \
        {"test_docs::test_no_such_test", "test_nothing_here"}
    assert "test_no_such_test" not in defined["test_docs"]
    cases = named_tests("| `test_docs::test_every_test_a_guide_names_exists[slurm.md]` and "
                        "`test_docs::test_every_test_a_guide_names_exists[no_such_guide.md]` |")
    assert _missing_ids(cases) == ["test_docs::test_every_test_a_guide_names_exists[no_such_guide.md]"], cases


def test_every_row_of_the_failure_table_names_its_test():
    """docs/troubleshooting.md's table of failures: each row's test column names a test (a row saying
    "same" once stood for a test that did not check that row), and each named test exists (above)."""
    lines = (ROOT / "docs" / "troubleshooting.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| what went wrong |"))
    rows = [line for line in lines[start + 2:] if line.startswith("|")]
    rows = rows[:next((i for i, line in enumerate(rows) if not line.strip()), len(rows))]
    assert len(rows) >= 20, f"the failure table shrank to {len(rows)} rows"
    untested = [row.split("|")[1].strip() for row in rows if not named_tests(row.rstrip("|").rsplit("|", 1)[-1])]
    assert not untested, f"rows of the failure table that name no test: {untested}"


def _course_map(cells: list[dict]) -> list[tuple[str, str]]:
    """(number, title) of every row of lesson 00's course map."""
    text = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("## Map of the course"))
    return re.findall(r"^\| (\d\d) \| ([^|]+?) \|", text, re.M)


def _lesson_titles() -> list[tuple[str, str]]:
    """(number, title) of every lesson, from the heading of its first cell: '# 07 · Scaling and performance'."""
    titles = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        heading = "".join(json.loads(path.read_text())["cells"][0]["source"]).splitlines()[0]
        number, title = re.match(r"# (\d\d) · (.+)$", heading).groups()
        assert number == path.name[:2], f"{path.name}: its heading says lesson {number}"
        titles.append((number, title.strip()))
    return titles


def test_lesson_00_maps_every_lesson_by_its_notebook_title():
    """The course map lists each lesson once, in order, with the title its notebook gives it: a lesson
    added (18, say) or renamed without its row fails here."""
    cells = json.loads((ROOT / "notebooks" / "00_environment.ipynb").read_text())["cells"]
    assert _course_map(cells) == _lesson_titles()


@pytest.mark.parametrize("change", ["missing row", "renamed lesson"])
def test_lesson_00_map_check_fails_on_a_stale_map(change):
    cells = json.loads((ROOT / "notebooks" / "00_environment.ipynb").read_text())["cells"]
    for cell in cells:
        text = "".join(cell["source"])
        if text.startswith("## Map of the course"):
            if change == "missing row":
                text = "\n".join(l for l in text.splitlines() if not l.startswith("| 17 |"))
            else:
                text = text.replace("| 07 | Scaling and performance |", "| 07 | Scaling |")
            cell["source"] = text
    assert _course_map(cells) != _lesson_titles()
