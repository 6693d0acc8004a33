"""`make fullcheck`'s last pass is recorded (docs/bench/fullcheck-last.json: date, commit, what ran) and
said in every test run's summary: `make test` leaves the fullcheck runs out, so nothing else tells
when they last passed."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers.errors import CourseError
from helpers.commands.fullcheck_record import main, problems, record
from tests.conftest import ROOT

RECORD = ROOT / "docs" / "bench" / "fullcheck-last.json"
TABLE = """| notebook | mode | shape | status | minutes |
|---|---|---|---|---|
| 00_setup.ipynb | workshop | default | ok | 0.4 |
| 01_mirrored.ipynb | workshop | CPU_REPLICAS=4 | {status} | 1.2 |

COURSE_EPOCHS=1, COURSE_MAX_STEPS=4, SYNTHETIC data at 50000 / 10000 images, 2 CPUs, 2026-11-29
"""
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="{failures}"
 skipped="{skipped}" tests="5" time="1020.5"></testsuite></testsuites>"""


def _build(tmp_path, status="ok", failures=0, skipped=0):
    build = tmp_path / "fullcheck"
    build.mkdir(exist_ok=True)
    (build / "fullcheck.md").write_text(TABLE.format(status=status))
    (build / "tests.xml").write_text(JUNIT.format(failures=failures, skipped=skipped))
    return build


def test_a_pass_is_recorded_with_its_date_and_commit(tmp_path):
    out = tmp_path / "bench" / "fullcheck-last.json"
    entry = record(_build(tmp_path), out, ROOT)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert json.loads(out.read_text()) == entry and problems(entry) == [], entry
    assert (entry["commit"], entry["result"], entry["notebook_runs"], entry["tests_passed"]) == (head, "passed", 2, 5)


@pytest.mark.parametrize("broken", [{"status": "failed (cell 3)"}, {"failures": 1}, {"skipped": 1}])
def test_no_pass_is_recorded_for_a_failed_or_skipped_part(tmp_path, broken):
    out = tmp_path / "fullcheck-last.json"
    with pytest.raises(CourseError, match="not a pass"):
        record(_build(tmp_path, **broken), out, ROOT)
    assert not out.exists()
    assert main([str(tmp_path / "fullcheck"), str(out)]) == 1 and not out.exists()


def test_the_well_formed_check_finds_what_is_off(tmp_path):
    entry = record(_build(tmp_path), tmp_path / "r.json", ROOT)
    assert problems({**entry, "commit": "HEAD"}) == ["commit='HEAD'"]
    assert problems({**entry, "result": "failed", "tests_passed": 0}) == ["result='failed'", "tests_passed=0"]
    assert problems({k: v for k, v in entry.items() if k != "date"})[0].startswith("fields ")
    assert problems([entry]) == ["not a JSON object"]


def test_the_last_fullcheck_pass_is_said_in_the_summary(report):
    """The committed record, when there is one, is well formed and names a commit of this repository;
    the summary says when make fullcheck last passed, or that no pass is recorded yet."""
    if not RECORD.exists():
        report(f"make fullcheck: no pass recorded yet ({RECORD.relative_to(ROOT)} is written by a passing make fullcheck)")
        return
    entry = json.loads(RECORD.read_text())
    assert problems(entry) == [], f"{RECORD.relative_to(ROOT)}: {problems(entry)}"
    known = subprocess.run(["git", "cat-file", "-e", f"{entry['commit']}^{{commit}}"], cwd=ROOT, capture_output=True)
    assert known.returncode == 0, f"{RECORD.relative_to(ROOT)} names a commit this repository does not have: {entry['commit']}"
    behind = subprocess.run(["git", "rev-list", "--count", f"{entry['commit']}..HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    report(f"make fullcheck last passed {entry['date']} at {entry['commit'][:10]} ({behind} commits before HEAD"
           f"{'' if entry['clean'] else ', with changes not committed'}): {entry['notebook_runs']} notebook runs, "
           f"{entry['tests_passed']} tests")
