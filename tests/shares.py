"""The local streams' shares of the suite, taken as they go: a pytest plugin `make test` loads (`-p tests.shares`)
in each of its local streams, which run side by side and share a directory of claims.

`COURSE_TEST_CLAIMS=DIR` makes a stream run only the units it claims in DIR: every stream collects the same tests
(the same `-m`), orders the same units longest first by the recorded run (docs/bench/test-durations.json; a test
the record does not know counts its file's mean, else a second), and takes the next unit no other stream has
taken each time it finishes one. A split fixed in advance from the record left one share 6 minutes longer on a
machine that compiled Horovod (359 s in the CI run of 2026-11-30, 15 s in the record) and where ~760 tests were
new since the record; taking units as they go, a stream that finishes early takes more.

A unit is a whole test file, because its module fixtures and the order of its tests hold; the notebooks and the
tests that read what they executed (`after_notebooks`: the site) are one unit, so the site still reads every
notebook after it ran, and so are the files whose work a lesson uses (BEFORE_NOTEBOOKS), which run first in it.
A unit another stream took is reported as deselected in this stream's summary.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from pathlib import Path

import pytest

from tests import durations

CLAIMS_ENV = "COURSE_TEST_CLAIMS"
NOTEBOOKS_UNIT = "notebooks and what reads them"
# Files whose work a lesson in the nbval pass uses, so they must have run before it, in its stream: lesson 13
# compares with Horovod's own step only where test_horovod built Horovod (.ci/run requires it), lesson 17
# takes its Lmod branch only where test_software_stack installed Lmod (the Slurm stream's slurm/local/up
# installs it too, but in another process, at a time nothing orders).
BEFORE_NOTEBOOKS = ("tests/test_horovod.py", "tests/test_software_stack.py")
_UNITS = pytest.StashKey[list]()


def unit_of(nodeid: str, after_notebooks: bool) -> str:
    """What stays together: a test file, or every notebook with what reads them and what they need first."""
    path = nodeid.split("::")[0]
    return NOTEBOOKS_UNIT if after_notebooks or path.endswith(".ipynb") or path in BEFORE_NOTEBOOKS else path


def needed_first(items: list) -> list:
    """`items` with the files of BEFORE_NOTEBOOKS first, each in its own order (sorted is stable)."""
    return sorted(items, key=lambda item: item.nodeid.split("::")[0] not in BEFORE_NOTEBOOKS)


def longest_first(units: dict[str, list[str]], recorded: dict[str, float]) -> list[str]:
    """The units (name -> its test ids) in the order streams take them: the longest recorded first, so that
    what is left at the end is short. A test the record lacks counts the mean of its file's recorded tests."""
    per_file: dict[str, list[float]] = defaultdict(list)
    for nodeid, seconds in recorded.items():
        per_file[nodeid.split("::")[0]].append(seconds)

    def cost(test: str) -> float:
        known = per_file.get(test.split("::")[0])
        return recorded.get(test, sum(known) / len(known) if known else 1.0)

    total = {unit: sum(cost(t) for t in tests) for unit, tests in units.items()}
    return sorted(total, key=lambda u: (-total[u], u))


def claim(directory: Path, unit: str) -> bool:
    """Whether this stream takes `unit`: the first to create its file in `directory` does (O_EXCL is atomic)."""
    try:
        os.close(os.open(directory / hashlib.sha256(unit.encode()).hexdigest(), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@pytest.hookimpl(trylast=True)  # after `-m` has deselected: every stream orders the same tests
def pytest_collection_modifyitems(config, items) -> None:
    if not os.environ.get(CLAIMS_ENV):
        return
    grouped: dict[str, list] = defaultdict(list)
    for item in items:
        grouped[unit_of(item.nodeid, item.get_closest_marker("after_notebooks") is not None)].append(item)
    run = durations.load(durations.RECORDED)
    order = longest_first({u: [i.nodeid for i in its] for u, its in grouped.items()}, (run or {}).get("tests", {}))
    config.stash[_UNITS] = [(unit, needed_first(grouped[unit])) for unit in order]
    items[:] = [item for _, unit_items in config.stash[_UNITS] for item in unit_items]


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session) -> bool | None:
    """pytest's own loop over the items, over the units this stream claims as it goes. The next unit is
    claimed before the last test of the one running, so pytest tears down exactly what the next test does not
    share (its `nextitem`)."""
    directory = os.environ.get(CLAIMS_ENV)
    if not directory:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
    if session.config.option.collectonly:
        return True
    queue = iter(session.config.stash[_UNITS])

    def take_next() -> list:
        for unit, unit_items in queue:
            if claim(Path(directory), unit):
                return unit_items
            session.config.hook.pytest_deselected(items=unit_items)  # another stream runs it
        return []

    current = take_next()
    while current:
        upcoming: list = []
        for i, item in enumerate(current):
            if i + 1 == len(current):
                upcoming = take_next()
            nextitem = current[i + 1] if i + 1 < len(current) else (upcoming[0] if upcoming else None)
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        current = upcoming
    return True
