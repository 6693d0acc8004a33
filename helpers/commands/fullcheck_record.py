"""`make fullcheck`'s last pass, kept in docs/bench/fullcheck-last.json: its date, commit and what ran.

`make test` leaves out the fullcheck runs (an hour and more), so nothing in CI says whether they still
pass. `make fullcheck` ends by writing this record, and only when every notebook run of its table
(build/fullcheck/fullcheck.md) is `ok` and its pytest part (the tests marked fullcheck, as JUnit XML)
ran with no failure, error or skip; the suite prints the record's date and commit in every summary
(tests/test_fullcheck_record.py).

Usage: `python -m helpers.commands.fullcheck_record BUILD_DIR RECORD` (BUILD_DIR holds fullcheck.md and
tests.xml).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from ..errors import CourseError

FIELDS = ("date", "commit", "clean", "result", "notebook_runs", "tests_passed")


def notebook_runs(table: Path) -> int:
    """The number of runs in fullcheck's table, every one `ok`; a CourseError naming those that were not."""
    rows = [line.split("|")[1:-1] for line in table.read_text().splitlines()
            if line.startswith("| ") and not line.startswith(("| notebook ", "|---"))]
    bad = [" ".join(cell.strip() for cell in row[:4]) for row in rows if len(row) < 4 or row[3].strip() != "ok"]
    if not rows or bad:
        raise CourseError(f"{table}: not a pass: {bad[:5] if bad else 'no runs'}")
    return len(rows)


def tests_passed(junit: Path) -> int:
    """Tests that passed in the JUnit XML `junit`; a CourseError when any failed, erred or was skipped."""
    root = ElementTree.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}
    if not counts["tests"] or counts["failures"] or counts["errors"] or counts["skipped"]:
        raise CourseError(f"{junit}: not a pass: {counts}")
    return counts["tests"]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=60).stdout


def record(build: Path, out: Path, root: Path) -> dict:
    """Write the record of a pass whose files are in `build` to `out` (checkout `root`); return it."""
    from ..atomic import write_text

    entry = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "commit": _git(root, "rev-parse", "HEAD").strip(),
             "clean": _git(root, "status", "--porcelain", "--untracked-files=no") == "",
             "result": "passed", "notebook_runs": notebook_runs(build / "fullcheck.md"),
             "tests_passed": tests_passed(build / "tests.xml")}
    write_text(out, json.dumps(entry, indent=1) + "\n")
    return entry


def problems(entry: object) -> list[str]:
    """What makes `entry` not a well-formed record (empty when it is one)."""
    if not isinstance(entry, dict):
        return ["not a JSON object"]
    found = [f"fields {sorted(entry)} are not {sorted(FIELDS)}"] if sorted(entry) != sorted(FIELDS) else []
    checks = {"date": lambda v: isinstance(v, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", v),
              "commit": lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{40}", v),
              "clean": lambda v: isinstance(v, bool), "result": lambda v: v == "passed",
              "notebook_runs": lambda v: type(v) is int and v > 0, "tests_passed": lambda v: type(v) is int and v > 0}
    return found + [f"{name}={entry[name]!r}" for name, ok in checks.items() if name in entry and not ok(entry[name])]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m helpers.commands.fullcheck_record BUILD_DIR RECORD", file=sys.stderr)
        return 2
    try:
        entry = record(Path(args[0]), Path(args[1]), Path(__file__).resolve().parents[2])
    except (CourseError, OSError, ElementTree.ParseError) as exc:
        print(f"error: make fullcheck's pass not recorded: {exc}", file=sys.stderr)
        return 1
    print(f"make fullcheck passed: recorded in {args[1]} ({entry['commit'][:10]}, {entry['date']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
