"""A recorded run's durations file (docs/bench/test-durations.json's shape), built with given figures for
the tests of the time budget and of the test streams."""

from __future__ import annotations

from tests import durations


def recorded_run(wall_s: float, tests: dict[str, float] | None = None) -> dict:
    """A durations file's content with these figures (the streams' tests use it too)."""
    return {"schema": durations.SCHEMA, "wall_s": wall_s, "tests_s": wall_s, "commit": "abc", "date": "d",
            "tests": tests or {"a": wall_s}}
