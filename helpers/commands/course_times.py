"""`make course`'s seconds per lesson: each run's in build/course-times.json, one kept run in docs/bench/.

The quick-mode times in README.md, docs/modes-and-data.md and docs/instructor.md were typed in from
runs made at different dates and loads, and drifted from the lessons as reviews changed them. Now
`make course` writes every run's times with its date, commit, mode and the machine's load before and
after; `make course-record` keeps a quick-mode run in which every lesson passed as
docs/bench/course-times.json and writes its seconds into the three tables, which tests/test_docs.py
checks against it. A run under load is kept as such: its load is printed beside the times.

Usage: `python -m helpers.commands.course_times record RUN RECORD` (keep a run, rewrite the tables);
`python -m helpers.commands.course_times tables RECORD` (rewrite the tables from the kept run).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from ..errors import CourseError

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "tf-hpc-course/course-times/1"
QUICK_ROW = "| quick, measured here (s) |"
BLOCK = re.compile(r"(<!-- course-times -->\n)(.*?)(<!-- end course-times -->)", re.S)


def _commit() -> tuple[str | None, bool | None]:
    """The checkout's commit and whether its tracked files are unchanged (None outside a git checkout)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head, dirty == ""


def run_entry(rows: list[tuple[str, str, float, str]], mode: str, load: tuple[float, float], total_s: float) -> dict:
    """What one `make course` run took: `rows` are (notebook, status, seconds, detail) as it printed them."""
    commit, clean = _commit()
    return {"schema": SCHEMA, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
            "clean": clean, "mode": mode, "cpus": len(os.sched_getaffinity(0)),
            "load_before": round(load[0], 1), "load_after": round(load[1], 1), "total_s": round(total_s, 1),
            "lessons": {Path(name).stem: {"status": status, "seconds": round(seconds, 1)}
                        for name, status, seconds, _ in rows}}


def problems(entry: dict, lessons: list[str]) -> list[str]:
    """Why `entry` cannot stand for the course's quick-mode times (empty when it can)."""
    if entry.get("schema") != SCHEMA:
        return [f"schema {entry.get('schema')!r}, not {SCHEMA}"]
    found = [f"mode {entry['mode']}, not quick"] if entry["mode"] != "quick" else []
    ran = entry["lessons"]
    found += [f"{name} not run" for name in lessons if name not in ran]
    found += [f"{name} {got['status']}" for name, got in ran.items() if got["status"] != "ok"]
    return found


def record(run: Path, out: Path, lessons: list[str]) -> dict:
    """Keep the run in `run` as the record `out` when every lesson passed in quick mode; return it."""
    from ..atomic import write_text

    entry = json.loads(run.read_text())
    if bad := problems(entry, lessons):
        raise CourseError(f"{run}: not kept: {'; '.join(bad)}")
    write_text(out, json.dumps(entry, indent=1) + "\n")
    return entry


def seconds(entry: dict) -> dict[str, str]:
    """Each lesson's time as the tables show it, by its two-digit number: whole seconds."""
    return {name[:2]: f"{got['seconds']:.0f}" for name, got in sorted(entry["lessons"].items())}


def sentence(entry: dict) -> str:
    """Where the tables' quick-mode seconds come from, for docs/modes-and-data.md."""
    commit = (entry["commit"] or "no git checkout")[:10] + ("" if entry["clean"] in (True, None) else ", with changes")
    return (f"Generated from `bench/course-times.json`: `make course` in quick mode on {entry['date'][:10]} "
            f"({commit}), {entry['cpus']} CPUs, load average {entry['load_before']} before and "
            f"{entry['load_after']} after, {entry['total_s']:.0f} s for all {len(entry['lessons'])} lessons. "
            f"`make course` then `make course-record` on an idle machine renews it.\n")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def rewrite_modes(text: str, entry: dict) -> str:
    """docs/modes-and-data.md with the record's seconds in its quick row and its sentence in the block."""
    times = seconds(entry)
    lines = text.splitlines(keepends=True)
    lessons = next(_cells(l)[1:] for l in lines if l.startswith("| lesson |"))
    at = next(i for i, l in enumerate(lines) if l.startswith(QUICK_ROW))
    lines[at] = _row([QUICK_ROW.strip("| ").strip(), *(times[n] for n in lessons)]) + "\n"
    text = "".join(lines)
    if not BLOCK.search(text):
        raise CourseError("docs/modes-and-data.md has no <!-- course-times --> block")
    return BLOCK.sub(lambda m: m.group(1) + sentence(entry) + m.group(3), text)


def rewrite_column(text: str, entry: dict, row: re.Pattern[str], column: int) -> str:
    """`text` with the record's seconds in `column` of each table row matching `row` (its group 1 the lesson)."""
    times = seconds(entry)

    def one(line: str) -> str:
        found = row.match(line)
        if not found:
            return line
        cells = _cells(line)
        cells[column] = times[found.group(1)]
        return _row(cells) + "\n"

    return "".join(one(line) for line in text.splitlines(keepends=True))


README_ROW = re.compile(r"\| \[`(\d\d)_\w+`\]")
INSTRUCTOR_ROW = re.compile(r"\| (\d\d) ")


def rewrite_tables(entry: dict, root: Path = ROOT) -> list[Path]:
    """Write the record's seconds into the three tables under `root`; the files that changed."""
    changed = []
    for path, rewrite in ((root / "docs" / "modes-and-data.md", lambda t: rewrite_modes(t, entry)),
                          (root / "README.md", lambda t: rewrite_column(t, entry, README_ROW, 1)),
                          (root / "docs" / "instructor.md", lambda t: rewrite_column(t, entry, INSTRUCTOR_ROW, 4))):
        old = path.read_text()
        if (new := rewrite(old)) != old:
            path.write_text(new)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from .course_run import lessons

    names = [p.stem for p in lessons()]
    try:
        if len(args) == 3 and args[0] == "record":
            entry = record(Path(args[1]), Path(args[2]), names)
        elif len(args) == 2 and args[0] == "tables":
            entry = json.loads(Path(args[1]).read_text())
            if bad := problems(entry, names):
                raise CourseError(f"{args[1]}: {'; '.join(bad)}")
        else:
            print(__doc__.split("Usage: ")[1].strip(), file=sys.stderr)
            return 2
        changed = rewrite_tables(entry)
    except (CourseError, OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"quick-mode times of {entry['date'][:10]} (load {entry['load_before']} / {entry['load_after']}): "
          f"{', '.join(str(p.relative_to(ROOT)) for p in changed) or 'every table already had them'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
