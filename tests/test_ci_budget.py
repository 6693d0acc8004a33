"""The suite's time budget, read from the recorded run (docs/bench/test-durations.json, kept by
`make durations-record` after a full `make test` here): a warning above 25 minutes, a failure above 40."""

from __future__ import annotations

import warnings

import pytest

from tests import durations


def _run(wall_s: float, tests: dict[str, float] | None = None) -> dict:
    return {"schema": durations.SCHEMA, "wall_s": wall_s, "tests_s": wall_s, "commit": "abc", "date": "d",
            "tests": tests or {"a": wall_s}}


def test_the_budget_warns_above_25_and_fails_above_40_minutes():
    assert durations.budget(_run(24 * 60))[0] == "ok"
    assert durations.budget(_run(26 * 60))[0] == "warn"
    assert durations.budget(_run(41 * 60))[0] == "fail"


def test_the_summary_names_the_ten_slowest_and_the_change_against_the_run_before():
    now = _run(600, {f"t{i}": float(i) for i in range(12)})
    before = _run(900, {"t11": 20.0})
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


def test_make_test_s_streams_share_out_the_suite_and_join_its_time(tmp_path):
    """tests/streams.py: the caller's -m is joined with each stream's; the merged file is both streams'
    tests under the wall time of the whole run, not the sum of the streams'."""
    from tests import streams

    args, markers = streams._split_markers(["tests", "-m", "not fullcheck", "-k", "x"])
    assert args == ["tests", "-k", "x"] and markers == "not fullcheck"
    commands = [streams._command(s, args, markers) for s in streams.STREAMS]
    assert [c[-1] for c in commands] == ["(machine_wide and not quiet) and (not fullcheck)",
                                         "(not machine_wide and not quiet) and (not fullcheck)"]
    assert streams._command(streams.QUIET, args, markers)[-1] == "(quiet) and (not fullcheck)"
    files = {}
    for name, tests in (("slurm", {"a": 5.0}), ("local", {"b": 7.0, "c": 1.0})):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(__import__("json").dumps({**_run(sum(tests.values()), tests), "outcomes": {"passed": len(tests)}}))
    run = streams._merge(files, wall_s=9.0)
    assert run["wall_s"] == 9.0 and run["tests_s"] == 13.0 and set(run["tests"]) == {"a", "b", "c"}
    assert run["outcomes"] == {"passed": 3} and run["streams"]["local"]["tests"] == 2
    files["quiet"] = tmp_path / "quiet.json"  # a stream whose selection was empty writes no file
    assert set(streams._merge(files, wall_s=9.0)["streams"]) == {"slurm", "local"}
    for path in files.values():
        path.unlink(missing_ok=True)
    assert streams._merge(files, wall_s=9.0) is None


def test_every_test_of_the_local_slurm_or_a_second_user_is_in_the_slurm_stream():
    """The streams run side by side, so a test on the one local Slurm (or with a second Unix user) in the
    other stream would start a second Slurm beside the first: collected, each is marked machine_wide."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    listed = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                             "-m", "not machine_wide", "tests/test_slurm.py", "tests/test_hub.py", "tests/test_gpucheck.py",
                             "tests/test_security_engines_privacy.py"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300).stdout
    ids = [line for line in listed.splitlines() if "::" in line]
    assert ids and all(line.startswith("tests/test_gpucheck.py") for line in ids), ids
    assert not any("batch_job_on_simulated_gpus" in line for line in ids), ids  # gpucheck's Slurm test
