"""make test's streams (tests/streams.py): the split of the suite, the merged durations, and the apt lock the
streams share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests import streams
from helpers.tools.apt import APT_LOCK, apt_install
from tests.conftest import ROOT
from tests.test_ci_budget import recorded_run


def test_make_test_s_streams_share_out_the_suite_and_join_its_time(tmp_path):
    """tests/streams.py: the caller's -m is joined with each stream's; the merged file is both streams'
    tests under the wall time of the whole run, not the sum of the streams'."""
    args, markers = streams._split_markers(["tests", "-m", "not fullcheck", "-k", "x"])
    assert args == ["tests", "-k", "x"] and markers == "not fullcheck"
    commands = [streams._command(s, args, markers) for s in streams.SIDE_BY_SIDE]
    assert [c[-1] for c in commands] == ["(machine_wide and not quiet) and (not fullcheck)",
                                         "(not machine_wide and not quiet) and (not fullcheck)"]
    assert streams._command(streams.QUIET, args, markers)[-1] == "(quiet) and (not fullcheck)"
    files = {}
    for name, tests in (("slurm", {"a": 5.0}), ("local", {"b": 7.0, "c": 1.0})):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps({**recorded_run(sum(tests.values()), tests), "outcomes": {"passed": len(tests)}}))
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
    listed = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                             "-m", "not machine_wide", "tests/test_slurm.py", "tests/test_hub.py", "tests/test_gpucheck.py",
                             "tests/test_security_engines_privacy.py"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300).stdout
    ids = [line for line in listed.splitlines() if "::" in line]
    assert ids and all(line.startswith("tests/test_gpucheck.py") for line in ids), ids
    assert not any("batch_job_on_simulated_gpus" in line for line in ids), ids  # gpucheck's Slurm test


def test_an_apt_get_of_one_stream_waits_for_the_other_streams(tmp_path, monkeypatch):
    """apt refuses a second apt-get at once: apt_install (and slurm/local/up, horovod_build) take one lock
    first. With the lock held elsewhere for 2 s, a stand-in apt-get on PATH runs only after it is freed."""
    if os.geteuid() != 0:  # the lock lives in /var/lock, where apt-get (root) takes its own
        if os.environ.get("CI"):
            pytest.fail("the apt lock test must run in CI (root)")
        pytest.skip("the apt lock is root's (/var/lock), as apt-get is")

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text(f"#!/bin/sh\ndate +%s.%N >> {tmp_path}/calls\n")
    (fake / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    holder = subprocess.Popen(["flock", APT_LOCK, "sleep", "2"])
    try:
        time.sleep(0.5)  # the holder has the lock
        began = time.time()
        done = apt_install("nothing-real")
    finally:
        holder.wait(timeout=30)
    calls = [float(t) for t in (tmp_path / "calls").read_text().split()]
    assert done.returncode == 0 and len(calls) == 2, (done.stderr, calls)  # update, then install
    assert min(calls) - began >= 1.2, f"apt-get ran {min(calls) - began:.1f} s after the call, inside the other's lock"
    assert APT_LOCK in (ROOT / "slurm/local/up").read_text(), "slurm/local/up runs apt-get without the lock"
    assert "apt_install(" in (ROOT / "helpers/tools/horovod_build.py").read_text(), "horovod_build goes around the lock"
