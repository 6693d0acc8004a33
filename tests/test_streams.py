"""make test's streams (tests/streams.py): the split of the suite, the merged durations, and the apt lock the
streams share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests import shares, streams
from helpers.commands.apt import APT_LOCK, apt_install, lock_dir
from tests.conftest import ROOT
from tests.support.recorded_run import recorded_run


def test_make_test_s_streams_share_out_the_suite_and_join_its_time(tmp_path):
    """tests/streams.py: the caller's -m is joined with each stream's; the merged file is both streams'
    tests under the wall time of the whole run, not the sum of the streams'."""
    args, markers = streams._split_markers(["tests", "-m", "not fullcheck", "-k", "x"])
    assert args == ["tests", "-k", "x"] and markers == "not fullcheck"
    commands = [streams._command(s, args, markers) for s in streams.SIDE_BY_SIDE]
    assert [c[-1] for c in commands] == ["(machine_wide) and (not fullcheck)", "(not machine_wide) and (not fullcheck)",
                                         "(not machine_wide) and (not fullcheck)"]
    assert ["tests.shares" in c for c in commands] == [False, True, True]
    assert [c[:3] for c in commands[1:]] == [["nice", "-n", "10"]] * 2 and commands[0][0] == sys.executable
    assert streams.SIDE_BY_SIDE == list(streams.SELECTIONS), "a stream that runs alone after the others"
    files = {}
    for name, tests in (("slurm", {"a": 5.0}), ("local", {"b": 7.0, "c": 1.0})):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps({**recorded_run(sum(tests.values()), tests), "outcomes": {"passed": len(tests)}}))
    run = streams._merge(files, wall_s=9.0)
    assert run["wall_s"] == 9.0 and run["tests_s"] == 13.0 and set(run["tests"]) == {"a", "b", "c"}
    assert run["outcomes"] == {"passed": 3} and run["streams"]["local"]["tests"] == 2
    files["empty"] = tmp_path / "empty.json"  # a stream whose selection was empty writes no file
    assert set(streams._merge(files, wall_s=9.0)["streams"]) == {"slurm", "local"}
    for path in files.values():
        path.unlink(missing_ok=True)
    assert streams._merge(files, wall_s=9.0) is None


def test_shares_are_whole_files_of_about_equal_recorded_time():
    """tests/shares.py: longest unit first to the lightest share; the notebooks and the site that reads
    them stay one unit; an unknown test counts a second."""
    units = {"a": ["a::1", "a::2"], "b": ["b::1"], "c": ["c::1"], "d": ["d::new"]}
    recorded = {"a::1": 6.0, "a::2": 4.0, "b::1": 7.0, "c::1": 3.0}
    assert shares.split(units, recorded, 2) == [["a", "d"], ["b", "c"]]  # 10 + 1 against 7 + 3
    assert shares.split(units, recorded, 1) == [["a", "b", "c", "d"]]
    assert shares.unit_of("notebooks/03_x.ipynb::Cell 4", False) == shares.unit_of("tests/test_site.py::t", True)
    assert shares.unit_of("tests/test_a.py::t[1]", False) == "tests/test_a.py"
    assert {shares.unit_of(f"{path}::t", False) for path in shares.BEFORE_NOTEBOOKS} == {shares.NOTEBOOKS_UNIT}
    for bad in ("2", "0/2", "3/2", "a/b"):
        with pytest.raises(pytest.UsageError, match="COURSE_TEST_SHARE"):
            shares.parse_share(bad)


def test_the_two_shares_collect_every_test_once():
    """Collected for real, as the local streams are: share 1/2 and 2/2 of the same files are disjoint,
    together the whole, and the site lands with the notebooks; Horovod's build and Lmod's install land
    there too, before the notebooks (lessons 13 and 17 use them), even when named after the notebooks."""
    files = ["tests/test_streams.py", "tests/test_settings.py", "tests/test_site.py", "tests/test_cli.py",
             "notebooks/00_environment.ipynb", "notebooks/01_mirrored_strategy.ipynb", *shares.BEFORE_NOTEBOOKS]

    def collect(share: str) -> list[str]:
        listed = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.shares",
                                 "--nbval-lax", "--collect-only", "-q", *files],
                                env={**os.environ, shares.SHARE_ENV: share}, capture_output=True, text=True,
                                cwd=ROOT, timeout=300).stdout
        return [line for line in listed.splitlines() if "::" in line]

    whole, first, second = collect(""), collect("1/2"), collect("2/2")
    assert first and second and not set(first) & set(second) and set(first + second) == set(whole), \
        (len(first), len(second), len(whole))
    with_site = first if any("test_site.py" in t for t in first) else second
    assert {t for t in whole if ".ipynb" in t} <= set(with_site)
    needed = [i for i, t in enumerate(with_site) if t.split("::")[0] in shares.BEFORE_NOTEBOOKS]
    assert {with_site[i].split("::")[0] for i in needed} == set(shares.BEFORE_NOTEBOOKS), with_site
    assert max(needed) < min(i for i, t in enumerate(with_site) if ".ipynb" in t), with_site


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
    lock_dir()  # root's directory of the lock, made if missing
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
    assert "apt_install(" in (ROOT / "helpers/commands/horovod_build.py").read_text(), "horovod_build goes around the lock"


@pytest.mark.parametrize("args, expected", [(["tests", "notebooks"], 5), (["tests", "-k", "atomic"], 0),
                                            (["tests/test_atomic.py::test_x"], 0), (["tests", "-m", "slurm"], 0)])
def test_a_stream_that_collects_nothing_fails_a_whole_run(tmp_path, monkeypatch, capsys, args, expected):
    """Exit 5 (nothing collected) from one stream: accepted when the caller's selection emptied it, a
    failure naming the stream when the run selects every test (its tests were lost, not deselected)."""
    monkeypatch.setenv("COURSE_DURATIONS", str(tmp_path / "durations.json"))
    monkeypatch.setattr(streams, "_run", lambda names, *rest: {name: 5 if name == "slurm" else 0 for name in names})
    assert streams.main(["-m", "not fullcheck", *args]) == expected  # make test: its -m, then PYTEST_ARGS
    said = "collected no test in a run that selects every test" in capsys.readouterr().out
    assert said == (expected == 5)


def test_a_whole_run_over_the_time_limit_fails_itself(tmp_path, monkeypatch, capsys):
    """The budget is checked on the run as it ends, not only on the recorded one (test_ci_budget)."""
    monkeypatch.setenv("COURSE_DURATIONS", str(tmp_path / "durations.json"))
    monkeypatch.setenv("COURSE_DURATIONS_BEFORE", os.devnull)
    monkeypatch.setattr(streams, "_run", lambda names, *rest: {name: 0 for name in names})
    for minutes, expected in ((41, 1), (24, 0)):
        monkeypatch.setattr(streams, "_merge", lambda files, wall: {**recorded_run(minutes * 60), "streams": {}})
        assert streams.main(["-m", "not fullcheck", "tests"]) == expected
        assert ("FAILED: this run's wall time, 41.0 min is over the 40-minute limit" in capsys.readouterr().out) \
            == (expected == 1)
