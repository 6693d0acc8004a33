"""`make test` as three pytest runs side by side: the tests that use what the machine has only one of
(its local Slurm, a second Unix user; marked `machine_wide` at collection) in one, everything else in
two that take whole files as they free up (tests/shares.py). The local Slurm's jobs, JupyterHub's spawns and the engines'
start-ups often wait, so the other streams' TensorFlow runs fill the time; they run niced, because the
Slurm stream is the longest and sets the run's length (in the first three-stream run, unniced, it
stretched from 30.2 to 33.2 minutes while the two shares took 27; niced, 32.7). Each stream's leftover
checks count only what that stream started (its own children, its own Slurm), so none mistakes
another's processes for its own.

Usage: `python -m tests.streams PYTEST_ARGS...` (make test). Each line is prefixed with its stream;
each stream keeps its durations in build/test-durations-STREAM.json, and the run as a whole (wall time
of all, every test) in `COURSE_DURATIONS`, summarised at the end against the recorded run. The exit
status is the first failing stream's, else 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from tests import durations
from tests.shares import CLAIMS_ENV

class Stream(NamedTuple):
    markers: str  # its part of the marker expression
    shared: bool = False  # whether it shares those tests with the other such streams (tests/shares.py), or runs all
    nice: int = 0  # its CPU priority: the local shares yield to the Slurm stream, which sets the run's length


# All three run side by side: the Slurm stream, and the rest in two streams taking whole files (the Slurm
# stream waits for jobs, servers and engines much of the time, so two TensorFlow streams beside it keep
# both cores busy; niced, they take what it leaves). No stream runs alone after them: the last proofs
# that timed an effect (a `quiet` stream of their own until 2026-11-29) now count it, whatever the load.
# So the proofs with timing thresholds (lessons 02, 06, 07, 09, 12, 14, 16) run beside the two other streams.
LOCAL = "not machine_wide"
SELECTIONS = {"slurm": Stream("machine_wide"), "local-1": Stream(LOCAL, True, 10), "local-2": Stream(LOCAL, True, 10)}
SIDE_BY_SIDE = list(SELECTIONS)


def _command(stream: str, args: list[str], markers: str) -> list[str]:
    own = SELECTIONS[stream]
    expression = f"({own.markers}) and ({markers})" if markers else own.markers
    plugin = ["-p", "tests.shares"] if own.shared else []
    nice = ["nice", "-n", str(own.nice)] if own.nice else []
    return [*nice, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin, *args, "-m", expression]


def _split_markers(args: list[str]) -> tuple[list[str], str]:
    """The caller's `-m EXPR` (make test passes "not fullcheck"), taken out to be joined with a stream's."""
    rest, markers = [], ""
    items = iter(args)
    for arg in items:
        if arg == "-m":
            markers = next(items, "")
        elif arg.startswith("-m") and len(arg) > 2:
            markers = arg[2:]
        else:
            rest.append(arg)
    return rest, markers


def _relay(stream: str, proc: subprocess.Popen, lock: threading.Lock) -> None:
    tag = f"[{stream}] "
    for line in proc.stdout:
        with lock:
            sys.stdout.write(tag + line)
            sys.stdout.flush()


def _merge(files: dict[str, Path], wall_s: float) -> dict | None:
    """Every stream's durations in one run (a stream whose selection was empty wrote no file)."""
    runs = {name: run for name, path in files.items() if (run := durations.load(path))}
    if not runs:
        return None
    tests = {k: v for run in runs.values() for k, v in run["tests"].items()}
    outcomes: dict[str, int] = {}
    for run in runs.values():
        for outcome, count in run["outcomes"].items():
            outcomes[outcome] = outcomes.get(outcome, 0) + count
    first = next(iter(runs.values()))
    cpu = {k: v for run in runs.values() for k, v in run.get("cpu", {}).items()}
    return {**first, "wall_s": round(wall_s, 1), "tests_s": round(sum(tests.values()), 1), "cpu": dict(sorted(cpu.items())),
            "outcomes": dict(sorted(outcomes.items())),
            "failed": sorted(nodeid for run in runs.values() for nodeid in run.get("failed", [])),
            "reasons": {k: v for run in runs.values() for k, v in run.get("reasons", {}).items()},
            "environment_restored": {k: v for run in runs.values() for k, v in run.get("environment_restored", {}).items()},
            "tests": dict(sorted(tests.items())),
            "streams": {name: {"wall_s": run["wall_s"], "tests": len(run["tests"])} for name, run in runs.items()}}


def _run(streams: list[str], args: list[str], markers: str, files: dict[str, Path],
         lock: threading.Lock) -> dict[str, int]:
    """Run `streams` at once, relaying their lines; their exit statuses."""
    with tempfile.TemporaryDirectory(prefix="course-test-claims-") as claims:  # the shared streams' claims, this run's
        return _started(streams, args, markers, files, lock, claims)


def _started(streams: list[str], args: list[str], markers: str, files: dict[str, Path],
             lock: threading.Lock, claims: str) -> dict[str, int]:
    procs, relays = {}, []
    for stream in streams:
        # each stream's own summary compares with nothing: the recorded run is all streams together
        env = {**os.environ, "COURSE_DURATIONS": str(files[stream]), "COURSE_DURATIONS_BEFORE": os.devnull,
               CLAIMS_ENV: claims if SELECTIONS[stream].shared else ""}
        procs[stream] = subprocess.Popen(_command(stream, args, markers), env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True, bufsize=1)
        relays.append(threading.Thread(target=_relay, args=(stream, procs[stream], lock), daemon=True))
        relays[-1].start()
    codes = {stream: proc.wait() for stream, proc in procs.items()}
    for relay in relays:
        relay.join(timeout=30)
    return codes


def main(argv: list[str]) -> int:
    args, markers = _split_markers(argv)
    target = Path(os.environ.get("COURSE_DURATIONS", "build/test-durations.json"))
    files = {name: target.with_name(f"{target.stem}-{name}{target.suffix}") for name in SELECTIONS}
    for path in files.values():
        path.unlink(missing_ok=True)
    started = time.monotonic()
    lock = threading.Lock()
    codes = _run(SIDE_BY_SIDE, args, markers, files, lock)
    wall = time.monotonic() - started
    print(f"\n==== all streams: {', '.join(f'{s} exit {c}' for s, c in codes.items())}; {wall / 60:.1f} min wall")
    run = _merge(files, wall)
    try:
        return _summarised(run, target, args, markers, codes)
    finally:  # last, so that a log's tail (all CI shows) names what failed
        _print_failed(run)


def _print_failed(run: dict | None) -> None:
    if run is None:
        return
    restored = run.get("environment_restored", {})
    if restored:  # harmless now (conftest put it back), but each names a test whose code leaves it set
        names = sorted({name for changed in restored.values() for name in changed})
        print(f"==== environment put back after {len(restored)} test(s): {', '.join(names)[:300]}")
    outcomes = ", ".join(f"{count} {outcome}" for outcome, count in run.get("outcomes", {}).items())
    print(f"==== outcomes, all streams: {outcomes}")
    for nodeid in run.get("failed", []):
        why = run.get("reasons", {}).get(nodeid)
        print(f"==== FAILED {nodeid}" + (f" -- {why}" if why else ""))


def _summarised(run: dict | None, target: Path, args: list[str], markers: str, codes: dict[str, int]) -> int:
    """The run's summary against the recorded one, and its exit status."""
    if run is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(run, indent=1) + "\n")
        before = durations.load(Path(os.environ.get("COURSE_DURATIONS_BEFORE", durations.RECORDED)))
        print(f"==== where the time went, all streams (kept in {target})")
        for name, part in run["streams"].items():
            print(f"{name} stream: {part['wall_s'] / 60:.1f} min wall, {part['tests']} tests")
        for line in durations.summary(run, before):
            print(line)
        verdict, why = durations.budget(run)
        if verdict == "fail" and not narrowed(args, markers):  # the run itself, not only the recorded one
            print(f"==== FAILED: this run's wall time, {why}")
            return 1
    # pytest's 5 (no tests collected) is not a failure of a stream the caller's selection emptied (-k, a
    # test's id); in a whole run a stream that collected nothing lost its tests: a failure, said so
    empty = [stream for stream, code in codes.items() if code == 5]
    if empty and not narrowed(args, markers):
        print(f"==== FAILED: stream(s) {', '.join(empty)} collected no test in a run that selects every test")
        return 5
    failed = [code for code in codes.values() if code not in (0, 5)]
    if failed:
        return failed[0]
    return 0 if any(code == 0 for code in codes.values()) else 5


def narrowed(args: list[str], markers: str = "") -> bool:
    """Whether the caller selects part of the suite (-k, --deselect, --lf, a test's id, a marker expression
    other than make test's own "not fullcheck"), so that a stream may be left empty."""
    return markers not in ("", "not fullcheck") or any(
        arg.startswith(("-k", "--deselect", "--lf", "--last-failed")) or "::" in arg for arg in args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
