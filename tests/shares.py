"""One share of a stream's tests, whole files at a time, balanced by the recorded run's durations: a
pytest plugin `make test` loads (`-p tests.shares`) when it splits the local stream in two.

`COURSE_TEST_SHARE=K/N` keeps the K-th of N shares. Every share's pytest sees the same tests after
`-m`, and the recorded durations (docs/bench/test-durations.json) are the same file, so each computes
the same split on its own: files longest first, each to the share with the least time so far (a
file the record does not know counts a second a test). A file stays whole, because its module
fixtures and the order of its tests hold; the notebooks and the tests that read what they executed
(`after_notebooks`: the site) are one unit, so the site still reads every notebook after it ran, and
so are the files whose work a lesson uses (BEFORE_NOTEBOOKS), which run first in their share.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

from tests import durations

SHARE_ENV = "COURSE_TEST_SHARE"
NOTEBOOKS_UNIT = "notebooks and what reads them"
# Files whose work a lesson in the nbval pass uses, so they must have run before it, in its share: lesson 13
# compares with Horovod's own step only where test_horovod built Horovod (.ci/run requires it), lesson 17
# takes its Lmod branch only where test_software_stack installed Lmod (the Slurm stream's slurm/local/up
# installs it too, but in another process, at a time nothing orders).
BEFORE_NOTEBOOKS = ("tests/test_horovod.py", "tests/test_software_stack.py")


def parse_share(text: str) -> tuple[int, int]:
    """(K, N) from 'K/N', 1 <= K <= N."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"{SHARE_ENV}={text!r} is not K/N (e.g. 1/2)") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"{SHARE_ENV}={text!r}: K must be 1 to N")
    return k, n


def unit_of(nodeid: str, after_notebooks: bool) -> str:
    """What stays together: a test file, or every notebook with what reads them and what they need first."""
    path = nodeid.split("::")[0]
    return NOTEBOOKS_UNIT if after_notebooks or path.endswith(".ipynb") or path in BEFORE_NOTEBOOKS else path


def needed_first(items: list) -> list:
    """`items` with the files of BEFORE_NOTEBOOKS first, each in its own order (sorted is stable)."""
    return sorted(items, key=lambda item: item.nodeid.split("::")[0] not in BEFORE_NOTEBOOKS)


def split(units: dict[str, list[str]], recorded: dict[str, float], n: int) -> list[list[str]]:
    """The units (name -> its test ids) dealt into n shares of about equal recorded time."""
    cost = {unit: sum(recorded.get(t, 1.0) for t in tests) for unit, tests in units.items()}
    shares: list[list[str]] = [[] for _ in range(n)]
    totals = [0.0] * n
    for unit in sorted(cost, key=lambda u: (-cost[u], u)):
        lightest = totals.index(min(totals))
        shares[lightest].append(unit)
        totals[lightest] += cost[unit]
    return shares


@pytest.hookimpl(trylast=True)  # after `-m` has deselected: every share splits the same tests
def pytest_collection_modifyitems(config, items) -> None:
    text = os.environ.get(SHARE_ENV)
    if not text:
        return
    k, n = parse_share(text)
    units: dict[str, list[str]] = defaultdict(list)
    for item in items:
        units[unit_of(item.nodeid, item.get_closest_marker("after_notebooks") is not None)].append(item.nodeid)
    run = durations.load(durations.RECORDED)
    mine = {t for unit in split(units, (run or {}).get("tests", {}), n)[k - 1] for t in units[unit]}
    keep = needed_first([item for item in items if item.nodeid in mine])
    dropped = [item for item in items if item.nodeid not in mine]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
