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


def test_streams_take_whole_files_longest_first():
    """tests/shares.py: units ordered by recorded time, longest first; a test the record lacks counts its
    file's mean (else a second); the notebooks and the site that reads them stay one unit."""
    units = {"a": ["a::1", "a::2"], "b": ["b::1"], "c": ["c::1", "c::new"], "d": ["d::new"]}
    recorded = {"a::1": 6.0, "a::2": 4.0, "b::1": 7.0, "c::1": 3.0}
    assert shares.longest_first(units, recorded) == ["a", "b", "c", "d"]  # 10, 7, 3 + 3, 1
    recorded["c::1"] = 4.0
    assert shares.longest_first(units, recorded) == ["a", "c", "b", "d"]  # c: 4 + its file's mean 4
    assert shares.unit_of("notebooks/03_x.ipynb::Cell 4", False) == shares.unit_of("tests/test_site.py::t", True)
    assert shares.unit_of("tests/test_a.py::t[1]", False) == "tests/test_a.py"
    assert {shares.unit_of(f"{path}::t", False) for path in shares.BEFORE_NOTEBOOKS} == {shares.NOTEBOOKS_UNIT}


def test_two_streams_claiming_run_every_test_once_and_the_notebooks_unit_in_one(tmp_path):
    """Run for real, as the local streams are: two pytest processes on one claims directory run disjoint
    whole files that together are every test, both take work, a file the other took is counted deselected,
    and the notebooks unit (a BEFORE_NOTEBOOKS file, a notebook, the site) runs in one stream, its
    BEFORE_NOTEBOOKS file first. Without the claims both would run everything."""
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "notebooks").mkdir()
    (tree / "conftest.py").write_text(
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'after_notebooks: reads the notebooks')\n"
        "def pytest_collection_modifyitems(items):\n"  # as the course's conftest.py orders them
        "    last = [i for i in items if i.get_closest_marker('after_notebooks')]\n"
        "    items[:] = [i for i in items if i not in last] + last\n")
    slow = "import time\n" + "".join(f"def test_{i}():\n    time.sleep(0.4)\n" for i in range(3))
    for name in ("a", "b", "c", "d", "e", "f"):
        (tree / "tests" / f"test_{name}.py").write_text(slow)
    (tree / shares.BEFORE_NOTEBOOKS[0]).write_text("def test_built():\n    pass\n")
    (tree / "tests" / "test_site.py").write_text(
        "import pytest\n@pytest.mark.after_notebooks\ndef test_site():\n    pass\n")
    import nbformat
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), tree / "notebooks" / "x.ipynb")
    claims = tmp_path / "claims"
    claims.mkdir()

    def start(env_claims: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.shares",
                                 "-v", "--nbval-lax", "--nbval-current-env", "--rootdir", str(tree), str(tree / "tests"),
                                 str(tree / "notebooks")],
                                cwd=tree, env={**os.environ, "PYTHONPATH": str(ROOT), shares.CLAIMS_ENV: env_claims},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def passed(out: str) -> list[str]:
        return [line.split(" PASSED")[0] for line in out.splitlines() if " PASSED" in line]

    procs = [start(str(claims)), start(str(claims))]
    outs = [proc.communicate(timeout=300)[0] for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), outs
    ran = [passed(out) for out in outs]
    alone = passed(start("").communicate(timeout=300)[0])
    assert len(alone) == 21 and all(ran), (alone, ran)  # 6 files of 3, the build, the cell, the site
    assert not set(ran[0]) & set(ran[1]) and sorted(ran[0] + ran[1]) == sorted(alone), ran
    assert all(f"{21 - len(r)} deselected" in out for r, out in zip(ran, outs)), outs
    with_site = next(r for r in ran if "tests/test_site.py::test_site" in r)
    cell = next(t for t in alone if t.endswith("::Cell 0"))  # nbval's own spelling of the notebook's path
    order = [with_site.index(t) for t in ("tests/test_horovod.py::test_built", cell, "tests/test_site.py::test_site")]
    assert order == sorted(order), with_site
    for path in ("tests/test_a.py", "tests/test_f.py"):  # whole files
        assert len({i for i, r in enumerate(ran) for t in r if t.startswith(path)}) == 1, ran


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
    for minutes, expected in ((61, 1), (24, 0)):
        monkeypatch.setattr(streams, "_merge", lambda files, wall: {**recorded_run(minutes * 60), "streams": {}})
        assert streams.main(["-m", "not fullcheck", "tests"]) == expected
        assert ("FAILED: this run's wall time, 61.0 min is over the 60-minute limit" in capsys.readouterr().out) \
            == (expected == 1)



def test_a_run_names_its_failed_tests_last(tmp_path, monkeypatch, capsys):
    """CI shows a log's tail only: the failed tests (from a real pytest run's durations file) are the last lines
    of make test's output, after the timing summary, each with its own failure's line, so a refused run says what
    failed and why."""
    (tmp_path / "test_two.py").write_text("def test_good():\n    pass\n\ndef test_bad():\n    assert False\n")
    real = tmp_path / "real.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.durations",
                           str(tmp_path / "test_two.py")], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COURSE_DURATIONS": str(real), "COURSE_DURATIONS_BEFORE": os.devnull})
    assert done.returncode == 1, done.stdout[-2000:]

    def run(names, args, markers, files, lock):  # the streams ran: local-1 kept the real run's file
        files["local-1"].write_text(real.read_text())
        return {name: 1 if name == "local-1" else 0 for name in names}

    monkeypatch.setenv("COURSE_DURATIONS", str(tmp_path / "durations.json"))
    monkeypatch.setenv("COURSE_DURATIONS_BEFORE", os.devnull)
    monkeypatch.setattr(streams, "_run", run)
    assert streams.main(["-m", "not fullcheck", "tests"]) == 1
    *_, outcomes, failed = capsys.readouterr().out.strip().splitlines()
    assert outcomes == "==== outcomes, all streams: 1 failed, 1 passed"
    assert failed.startswith("==== FAILED ") and failed.endswith("test_two.py::test_bad -- assert False"), failed


def test_a_test_s_environment_never_reaches_the_next_one(tmp_path):
    """A test that leaves a variable set (as in-process code does: a GPU plan, a class layout, TF_CONFIG) must not
    hand it to the tests after it in its stream: which tests follow depends on which stream frees up first, so a
    leak fails another file's subprocesses in one run and not the next. conftest puts the environment and the
    working directory back after each test and the durations file names what it put back."""
    (tmp_path / "test_leak.py").write_text(
        "import os\n\ndef test_leaves_a_variable():\n    os.environ['COURSE_CLASS_LAYOUT'] = 'gpu'\n    os.chdir('/')\n\n"
        "def test_after_it():\n    assert 'COURSE_CLASS_LAYOUT' not in os.environ and os.getcwd() != '/'\n")
    record = tmp_path / "run.json"
    env = {k: v for k, v in os.environ.items() if k != "COURSE_CLASS_LAYOUT"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.durations",
                           "-p", "tests.conftest", str(tmp_path / "test_leak.py")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env={**env, "COURSE_DURATIONS": str(record), "COURSE_DURATIONS_BEFORE": os.devnull})
    assert done.returncode == 0, done.stdout[-2000:]
    restored = json.loads(record.read_text())["environment_restored"]
    assert [(k.split("::")[-1], v) for k, v in restored.items()] == \
        [("test_leaves_a_variable", ["COURSE_CLASS_LAYOUT", "(working directory)"])], restored
