"""`make course`'s seconds per lesson: written by every run, kept from a whole quick-mode run that passed,
and written into the three tables that show them (README.md, docs/modes-and-data.md, docs/instructor.md)."""

from __future__ import annotations

import json
import shutil

import nbformat
import pytest

from helpers.commands import course_run
from helpers.commands.course_times import main, problems, record, rewrite_tables, run_entry, seconds
from helpers.errors import CourseError
from tests.conftest import ROOT

NAMES = [p.stem for p in course_run.lessons()]


def _run(status: dict[str, str] | None = None, mode: str = "quick", names: list[str] = NAMES) -> dict:
    rows = [(f"{name}.ipynb", (status or {}).get(name, "ok"), 10.0 + i + 0.4, "") for i, name in enumerate(names)]
    return run_entry(rows, mode, (0.3, 1.2), 999.0)


def _tables(tmp_path):
    for page in ("README.md", "docs/modes-and-data.md", "docs/instructor.md"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, tmp_path / page)
    return tmp_path


def test_a_whole_quick_run_is_kept_and_its_seconds_reach_every_table(tmp_path):
    run = tmp_path / "course-times.json"
    run.write_text(json.dumps(_run()))
    entry = record(run, tmp_path / "kept.json", NAMES)
    assert json.loads((tmp_path / "kept.json").read_text()) == entry and problems(entry, NAMES) == []
    root = _tables(tmp_path)
    changed = rewrite_tables(entry, root)
    assert len(changed) == 3, changed
    modes = (root / "docs" / "modes-and-data.md").read_text()
    quick = next(l for l in modes.splitlines() if l.startswith("| quick, measured here (s) |"))
    assert quick.split("|")[2:-1] == [f" {10 + i} " for i in range(len(NAMES))], quick
    assert "on " + entry["date"][:10] in modes and "load average 0.3 before and 1.2 after" in modes
    readme = (root / "README.md").read_text()
    assert f"| [`{NAMES[-1]}`](notebooks/{NAMES[-1]}.ipynb) | {10 + len(NAMES) - 1} |" in readme
    kit = [l for l in (root / "docs" / "instructor.md").read_text().splitlines() if l.startswith("| 01 ")]
    assert kit and kit[0].split("|")[5].strip() == "11", kit
    assert rewrite_tables(entry, root) == [], "a second rewrite changes nothing"


@pytest.mark.parametrize("broken, said", [
    ({"status": {"03_multiworker_ipyparallel": "FAILED"}}, "03_multiworker_ipyparallel FAILED"),
    ({"mode": "workshop"}, "mode workshop, not quick"),
    ({"names": NAMES[:-1]}, f"{NAMES[-1]} not run"),
])
def test_a_failed_partial_or_workshop_run_is_not_kept(tmp_path, broken, said):
    run, out = tmp_path / "course-times.json", tmp_path / "kept.json"
    run.write_text(json.dumps(_run(**broken)))
    with pytest.raises(CourseError, match="not kept") as raised:
        record(run, out, NAMES)
    assert said in str(raised.value) and not out.exists()
    assert main(["record", str(run), str(out)]) == 1 and not out.exists()


def test_make_course_writes_each_runs_seconds_beside_its_notebooks(tmp_path, monkeypatch):
    """A real run of the runner on a one-cell notebook: the times file names it, its status and seconds."""
    notebook = tmp_path / "99_tiny.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")]), notebook)
    monkeypatch.setenv("COURSE_MODE", "quick")
    assert course_run.main(["--out", str(tmp_path / "build"), str(notebook)]) == 0
    entry = json.loads((tmp_path / "build" / "course-times.json").read_text())
    got = entry["lessons"]["99_tiny"]
    assert (entry["mode"], got["status"]) == ("quick", "ok") and 0 < got["seconds"] < 120, entry
    assert problems(entry, ["99_tiny"]) == [] and problems(entry, NAMES)[0].endswith("not run")


def test_the_tables_show_the_kept_runs_seconds(tmp_path):
    """The seconds in README.md, docs/modes-and-data.md and docs/instructor.md are the kept run's: none typed."""
    entry = json.loads((ROOT / "docs" / "bench" / "course-times.json").read_text())
    assert problems(entry, NAMES) == []
    assert sorted(seconds(entry)) == sorted(n[:2] for n in NAMES)
    assert rewrite_tables(entry, _tables(tmp_path)) == [], \
        "run `python -m helpers.commands.course_times tables docs/bench/course-times.json`"
