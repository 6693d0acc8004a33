"""Where a test run's time goes, kept: a pytest plugin that writes every test's duration to a file and
prints the total, the ten slowest and the change against the run before.

`make test` sets `COURSE_DURATIONS=build/test-durations.json`; the run before is the file named by
`COURSE_DURATIONS_BEFORE` (default: the one recorded in the repository,
`docs/bench/test-durations.json`, which `make durations-record` replaces after a full run here).
The budget (warn above 25 minutes, fail above 60) is checked on the recorded run by
`tests/test_ci_budget.py`, so a slow suite is seen in review, not only in CI's log, and on each whole
`make test` run as it ends (tests/streams.py: a run over the limit fails).
"""

from __future__ import annotations

import datetime
import json
import os
import resource
import subprocess
import time
from pathlib import Path

import pytest

SCHEMA = "tf-hpc-course/test-durations/1"
RECORDED = Path(__file__).resolve().parents[1] / "docs" / "bench" / "test-durations.json"
WARN_MINUTES = 25
# CI must end within 90 minutes (the brief); a run over 60 fails here, leaving a slower CI machine a margin. It was
# 40 until CI's run of 2026-11-30 took 45.4 min with every test passing (a cold Horovod build, 359 s, never timed
# before; ~760 tests added by reviews): the aim is still the warning's.
FAIL_MINUTES = 60

_per_test: dict[str, float] = {}
_cpu: dict[str, float] = {}  # CPU seconds: this pytest and the children it reaped (not what runs under Slurm's daemons)
_outcomes: dict[str, str] = {}
_reasons: dict[str, str] = {}  # a failed test's one-line reason: CI shows the log's tail only
_restored: dict[str, list[str]] = {}  # what a test left in the environment, put back by conftest
_started = time.monotonic()


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test's CPU time, for where the suite's CPU goes: the machine has two cores, so CPU, not waiting,
    bounds a run of streams side by side. A notebook's kernel is counted at its last cell (when it ends);
    jobs, engines and servers started through Slurm are not counted at all."""
    began = _cpu_seconds()
    yield
    _cpu[item.nodeid] = _cpu.get(item.nodeid, 0.0) + _cpu_seconds() - began


def pytest_runtest_logreport(report) -> None:
    _per_test[report.nodeid] = _per_test.get(report.nodeid, 0.0) + report.duration
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.nodeid] = report.outcome
    if report.outcome == "failed" and report.nodeid not in _reasons:
        _reasons[report.nodeid] = reason(report)


def reason(report) -> str:
    """The failure's own line (pytest's crash message), on one line and short enough for a log's tail."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = crash.message if crash is not None else str(getattr(report, "longrepr", "") or "")
    line = " ".join(text.split())
    where = f"{report.when}: " if report.when != "call" else ""
    return where + (line if len(line) <= 400 else line[:400] + " ...")


def environment_restored(nodeid: str, names: list[str]) -> None:
    _restored.setdefault(nodeid, []).extend(names)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def record() -> dict:
    """This run, as the file keeps it: wall time from the first test's collection, and each test's
    setup + call + teardown."""
    return {
        "schema": SCHEMA,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(),
        "wall_s": round(time.monotonic() - _started, 1),
        "tests_s": round(sum(_per_test.values()), 1),
        "outcomes": {k: sum(1 for v in _outcomes.values() if v == k) for k in sorted(set(_outcomes.values()))},
        "failed": sorted(nodeid for nodeid, outcome in _outcomes.items() if outcome == "failed"),
        "reasons": dict(sorted(_reasons.items())),
        "tests": {nodeid: round(seconds, 2) for nodeid, seconds in sorted(_per_test.items())},
        "environment_restored": dict(sorted(_restored.items())),
        "cpu": {nodeid: round(seconds, 1) for nodeid, seconds in sorted(_cpu.items()) if seconds >= 0.05},
    }


def load(path: Path) -> dict | None:
    """A durations file, or None when there is none or it is not one of ours."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def slowest(run: dict, n: int = 10) -> list[tuple[str, float]]:
    return sorted(run["tests"].items(), key=lambda kv: -kv[1])[:n]


def budget(run: dict) -> tuple[str, str]:
    """('ok' | 'warn' | 'fail', a line saying why) for a run's wall time."""
    minutes = run["wall_s"] / 60
    if minutes > FAIL_MINUTES:
        return "fail", f"{minutes:.1f} min is over the {FAIL_MINUTES}-minute limit"
    if minutes > WARN_MINUTES:
        return "warn", f"{minutes:.1f} min is over the {WARN_MINUTES}-minute aim"
    return "ok", f"{minutes:.1f} min, within the {WARN_MINUTES}-minute aim"


def summary(run: dict, before: dict | None) -> list[str]:
    lines = [f"total {run['wall_s'] / 60:.1f} min wall, {run['tests_s'] / 60:.1f} min in {len(run['tests'])} tests"
             f" ({budget(run)[1]})"]
    if before:
        change = run["wall_s"] - before["wall_s"]
        lines.append(f"the run before ({before.get('commit') or '?'}, {before.get('date', '?')}): "
                     f"{before['wall_s'] / 60:.1f} min; change {change / 60:+.1f} min")
    if run.get("cpu"):
        by_file: dict[str, float] = {}
        for nodeid, seconds in run["cpu"].items():
            path = nodeid.split("::")[0]
            by_file[path] = by_file.get(path, 0.0) + seconds
        lines.append(f"CPU {sum(by_file.values()) / 60:.1f} core-min counted (pytest and the processes it reaped; "
                     "not what ran under Slurm's daemons); the ten files that took most:")
        for path, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:10]:
            lines.append(f"  {seconds / 60:7.1f} core-min  {path}")
    lines.append("the ten slowest:")
    for nodeid, seconds in slowest(run):
        was = (before or {}).get("tests", {}).get(nodeid)
        delta = f" ({seconds - was:+.0f} s)" if was is not None else (" (new)" if before else "")
        lines.append(f"  {seconds:7.1f} s  {nodeid}{delta}")
    return lines


def pytest_terminal_summary(terminalreporter) -> None:
    target = os.environ.get("COURSE_DURATIONS")
    if not target or not _per_test:
        return
    run = record()
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run, indent=1) + "\n")
    before = load(Path(os.environ.get("COURSE_DURATIONS_BEFORE", RECORDED)))
    terminalreporter.section(f"where the time went (kept in {path})")
    for line in summary(run, before):
        terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session) -> None:
    global _started
    _started = time.monotonic()
