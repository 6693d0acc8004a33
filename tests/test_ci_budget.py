"""The suite's time budget, read from the recorded run (docs/bench/test-durations.json, kept by
`make durations-record` after a full `make test` here): a warning above 25 minutes, a failure above 40."""

from __future__ import annotations

import warnings

import pytest

from tests import durations


def recorded_run(wall_s: float, tests: dict[str, float] | None = None) -> dict:
    """A durations file's content with these figures (the streams' tests use it too)."""
    return {"schema": durations.SCHEMA, "wall_s": wall_s, "tests_s": wall_s, "commit": "abc", "date": "d",
            "tests": tests or {"a": wall_s}}


def test_the_budget_warns_above_25_and_fails_above_40_minutes():
    assert durations.budget(recorded_run(24 * 60))[0] == "ok"
    assert durations.budget(recorded_run(26 * 60))[0] == "warn"
    assert durations.budget(recorded_run(41 * 60))[0] == "fail"


def test_the_summary_names_the_ten_slowest_and_the_change_against_the_run_before():
    now = recorded_run(600, {f"t{i}": float(i) for i in range(12)})
    before = recorded_run(900, {"t11": 20.0})
    lines = durations.summary(now, before)
    assert "change -5.0 min" in lines[1]
    slow = [line for line in lines if line.startswith("  ")]
    assert len(slow) == 10 and "t11" in slow[0] and "(-9 s)" in slow[0] and "(new)" in slow[1]


def test_the_recorded_run_is_within_budget():
    run = durations.load(durations.RECORDED)
    if run is None:
        pytest.skip(f"no recorded run in {durations.RECORDED.name} yet: `make durations-record` after a full make test")
    verdict, why = durations.budget(run)
    print(f"recorded run {run.get('commit')}: {why}")
    assert verdict != "fail", why
    if verdict == "warn":
        warnings.warn(why)
