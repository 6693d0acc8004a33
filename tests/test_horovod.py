"""Horovod 0.28.1 against TensorFlow 2.21: the course's build recipe, and what it runs.

The build takes minutes; it needs no header package, only a C++ compiler and CMake, which root installs
with apt-get if they are missing (CI runs as root, so there it always runs; where it cannot,
COURSE_REQUIRE_HOROVOD=1, as .ci/run sets it, fails the test instead of skipping it). Its result stays in
build/horovod, where lesson 13 finds it when nbval runs the notebooks after these tests.
"""

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from helpers import horovod_env
from helpers.errors import CourseError
from helpers.commands.horovod_build import TOOLS, XLA_LINE, leave_out_xla_ops
from tests.support.required import unavailable


def test_the_xla_ops_are_left_out_once(tmp_path):
    cmake = tmp_path / "CMakeLists.txt"
    cmake.write_text(f"set(X 1)\n{XLA_LINE}\nlist(APPEND TF_SOURCES other.cc)\n")
    assert leave_out_xla_ops(cmake) is True
    text = cmake.read_text()
    assert f"# left out by the course (TensorFlow moved XLA's headers): {XLA_LINE}" in text
    assert "list(APPEND TF_SOURCES other.cc)\n" in text and text.count("\n") == 3
    assert leave_out_xla_ops(cmake) is False  # a second build leaves the file as it is


def test_another_horovod_is_refused(tmp_path):
    cmake = tmp_path / "CMakeLists.txt"
    cmake.write_text("list(APPEND TF_SOURCES mpi_ops.cc)\n")
    with pytest.raises(CourseError, match="recipe is for Horovod 0.28.1 only"):
        leave_out_xla_ops(cmake)


def test_running_without_a_build_says_how_to_build(tmp_path, monkeypatch):
    monkeypatch.setenv(horovod_env.DIR_ENV, str(tmp_path / "nothing"))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    real = horovod_env.importable  # a build in this checkout's build/ is not this test's
    monkeypatch.setattr(horovod_env, "importable", lambda site: tmp_path in Path(site).parents and real(site))
    assert horovod_env.site_dir() is None
    with pytest.raises(CourseError, match="make horovod"):
        horovod_env.run(tmp_path / "x.py", 2)


def test_a_build_in_the_cache_is_found_where_the_output_directory_is_elsewhere(tmp_path, monkeypatch):
    """Sixth review of lesson 13, finding 3: with COURSE_OUTPUT_DIR set (or another owner's checkout) the output
    directory holds no build, yet a finished one sits in the user's cache: lesson 13 said Horovod was not built.
    (Only sites under tmp_path count here, so a build in this checkout's build/ does not decide the test.)"""
    real = horovod_env.importable
    monkeypatch.setattr(horovod_env, "importable", lambda site: tmp_path in Path(site).parents and real(site))
    monkeypatch.delenv(horovod_env.DIR_ENV, raising=False)
    monkeypatch.setenv("COURSE_OUTPUT_DIR", str(tmp_path / "output"))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(CourseError, match=f"looked in {tmp_path / 'output' / 'horovod' / 'site'}, .*{tmp_path / 'cache'}"):
        horovod_env.run(tmp_path / "x.py", 2)
    planted = horovod_env.cache_dir() / "site"
    (planted / "horovod" / "tensorflow").mkdir(parents=True)
    (planted / "horovod" / "tensorflow" / "mpi_lib.cpython-311-x86_64-linux-gnu.so").write_bytes(b"planted")
    assert horovod_env.site_dir() == planted


def test_a_login_node_refuses_horovodrun_with_a_reason_lesson_13_prints(monkeypatch):
    """Review item 17: lesson 13 asks `refusal` before `run`, so a login node (here: inside a job whose
    nodes are not this host, as salloc's shell) gets the reason and the recipe by hand, not a stop."""
    monkeypatch.delenv("COURSE_LOCAL_WORKERS", raising=False)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "no-such-node-of-this-host")
    assert "not a node of Slurm job 42" in horovod_env.refusal(2)
    monkeypatch.setenv("COURSE_LOCAL_WORKERS", "allow")  # the owner's override: allowed, no reason
    assert horovod_env.refusal(2) is None


def test_horovodrun_is_refused_where_classmates_share_the_node(monkeypatch, tmp_path):
    """Lesson 13's sixth review: the lesson's cell refused horovodrun in the GPU-per-learner layout itself, so its
    stopwatch (which asked only whether Horovod is built) counted a run that never happened. `refusal` now gives that
    reason too, for the cell, the stopwatch and `run` alike."""
    monkeypatch.setenv("COURSE_LOCAL_WORKERS", "allow")
    monkeypatch.setenv("COURSE_CLASS_LAYOUT", "gpu")
    assert "COURSE_CLASS_LAYOUT=gpu: classmates' jobs share this node" in horovod_env.refusal(2)
    monkeypatch.setattr(horovod_env, "site_dir", lambda: tmp_path)  # taken for built: `run` refuses before starting
    with pytest.raises(CourseError, match="COURSE_CLASS_LAYOUT=gpu"):
        horovod_env.run(tmp_path / "x.py", 2)
    monkeypatch.setenv("COURSE_CLASS_LAYOUT", "node")
    assert horovod_env.refusal(2) is None


def _can_build() -> str | None:
    """Why the build cannot run here, or None."""
    missing = [package for tool, package in TOOLS.items() if shutil.which(tool) is None]
    if missing and (os.geteuid() != 0 or shutil.which("apt-get") is None):
        return f"the build needs {', '.join(missing)} and this user cannot apt-get them"
    return None


def _buildable() -> None:
    """Go on where the build can run; else skip with the reason, or fail where COURSE_REQUIRE_HOROVOD=1
    (CI as root: lesson 13 compares with Horovod's own run only when this build ran)."""
    why_not = _can_build()
    if why_not:
        unavailable(why_not, "COURSE_REQUIRE_HOROVOD")


def test_a_build_that_cannot_run_fails_where_horovod_is_required(monkeypatch):
    monkeypatch.setitem(TOOLS, "no-such-course-compiler", "no-such-course-package")  # missing here
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # not root: no apt-get for it
    outcomes = []
    for required in (None, "1"):
        if required:
            monkeypatch.setenv("COURSE_REQUIRE_HOROVOD", required)
        else:
            monkeypatch.delenv("COURSE_REQUIRE_HOROVOD", raising=False)
        try:  # caught here, both: a skip raised out of this test would skip the test itself
            _buildable()
            outcomes.append(("went on", ""))
        except (pytest.skip.Exception, pytest.fail.Exception) as exc:
            outcomes.append((type(exc).__name__, str(exc)))
    reason = "the build needs no-such-course-package and this user cannot apt-get them"
    assert outcomes == [("Skipped", reason), ("Failed", f"required here (COURSE_REQUIRE_HOROVOD=1) but cannot run: {reason}")], \
        outcomes


class _ReachedTheSource(Exception):
    """The build went past its checks to Horovod's source."""


def _reach_the_source(where, quiet):
    raise _ReachedTheSource(where)


def test_a_user_who_is_not_root_builds_without_header_packages_or_apt(tmp_path, monkeypatch):
    """Lesson 13, third review, finding 1: the build once required Debian's libhighwayhash-dev and libfarmhash-dev,
    installed with apt-get as root and refused to anyone else. TensorFlow's wheel ships both headers, and only
    xla_mpi_ops.cc, the file the build leaves out, includes them. A user who is not root, with a compiler and CMake,
    on a machine without those packages (/usr/include's copies hidden here), goes on to the source; no apt-get runs."""
    import pathlib

    from helpers.commands import horovod_build

    real_exists = pathlib.Path.exists
    monkeypatch.setattr(pathlib.Path, "exists",
                        lambda self, **kw: not str(self).startswith("/usr/include/") and real_exists(self, **kw))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/bin/{tool}" if tool in TOOLS else None)
    monkeypatch.setattr(horovod_build, "apt_install", lambda *packages: pytest.fail(f"apt-get install {packages}"))
    monkeypatch.setattr(horovod_build, "_patched_source", _reach_the_source)
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))  # no cached build to copy
    with pytest.raises(_ReachedTheSource):
        horovod_build.build(tmp_path / "horovod", quiet=True)


STEP = textwrap.dedent("""
    import sys
    import numpy as np
    import keras
    import tensorflow as tf
    import horovod.tensorflow as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    x = np.arange(8 * 3, dtype="float32").reshape(8, 3) / 10
    y = np.arange(8, dtype="float32").reshape(8, 1) / 10
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=rank))])
    try:
        hvd.broadcast_variables(model.variables, root_rank=0)  # Keras 3 variables, as a Horovod user writes it
    except AttributeError as exc:
        print(f"rank {rank}: Keras variables refused: {exc}")
    hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x[rank::size]) - y[rank::size]) ** 2)
    grads = hvd.DistributedGradientTape(tape).gradient(loss, [v.value for v in model.trainable_variables])
    mean_rank = hvd.allreduce(tf.constant(float(rank)))  # Horovod averages by default
    print(f"rank {rank} of {size}: mean rank {float(mean_rank)} gradient {grads[0].numpy().ravel().tolist()} "
          f"weights {model.trainable_variables[0].numpy().ravel().tolist()}")
""")


@pytest.mark.timeout(2400)
def test_horovod_builds_and_averages_gradients_over_two_processes(tmp_path, report):
    _buildable()
    import time

    from helpers.commands.horovod_build import build

    started = time.perf_counter()
    site = build()
    report(f"Horovod {horovod_env.VERSION} build (or found built) in {time.perf_counter() - started:.0f} s: {site}")
    assert horovod_env.site_dir() == site

    script = tmp_path / "step.py"
    script.write_text(STEP)
    done = horovod_env.run(script, 2, deadline_s=240)
    assert done.returncode == 0, done.stdout[-3000:]
    lines = {int(line.split("rank ")[1].split()[0]): line for line in done.stdout.splitlines()
             if " of 2: mean rank" in line}
    assert sorted(lines) == [0, 1], done.stdout[-3000:]
    assert all("mean rank 0.5" in line for line in lines.values()), lines
    gradients = {r: line.split("gradient ")[1].split(" weights")[0] for r, line in lines.items()}
    weights = {r: line.split("weights ")[1] for r, line in lines.items()}
    assert gradients[0] == gradients[1] and weights[0] == weights[1], lines  # averaged, broadcast
    assert "Keras variables refused" in done.stdout and "has no attribute 'assign'" in done.stdout, done.stdout[-3000:]


def test_a_cached_build_is_copied_not_compiled(tmp_path, monkeypatch, capsys):
    """A build kept in the cache under exactly these versions is copied into a fresh checkout's
    build directory; another version's cache is never used."""
    from helpers.commands import horovod_build

    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    key = horovod_build.cache_dir().name
    assert key.startswith(f"horovod-{horovod_env.VERSION}-tensorflow-2.") and "-py3." in key, key
    planted = horovod_build.cache_dir() / "site" / "horovod" / "tensorflow"
    planted.mkdir(parents=True)
    (planted / "mpi_lib.cpython-311-x86_64-linux-gnu.so").write_bytes(b"planted")
    monkeypatch.setattr(horovod_build, "_build_tools", lambda quiet: pytest.fail("it compiled"))
    site = horovod_build.build(tmp_path / "checkout" / "horovod")
    assert (site / "horovod" / "tensorflow" / "mpi_lib.cpython-311-x86_64-linux-gnu.so").read_bytes() == b"planted"
    assert "copied from the build cache" in capsys.readouterr().out
    monkeypatch.setattr(horovod_env, "tensorflow_version", lambda: "9.99.0")  # another TensorFlow
    with pytest.raises(pytest.fail.Exception, match="it compiled"):
        horovod_build.build(tmp_path / "other" / "horovod")


def test_horovods_extra_dependencies_install_pinned(monkeypatch, tmp_path):
    """What Horovod imports and the environment lacks is installed by pip as root in CI: only
    exact releases (name==version), never whatever is newest on the registry that day."""
    import importlib.util
    import re

    from helpers.commands import horovod_build

    calls = []
    with monkeypatch.context() as patched:
        patched.setattr(importlib.util, "find_spec", lambda name, *args: None)  # all of them missing
        patched.setattr(horovod_build.subprocess, "run", lambda args, **kwargs: calls.append(list(args)))
        horovod_build._dependencies(tmp_path)
    assert len(calls) == 1 and "--no-deps" in calls[0], calls
    requirements = calls[0][calls[0].index("--no-deps") + 1:]
    assert {r.split("==")[0].lower() for r in requirements} == {"cloudpickle", "psutil", "pyyaml"}, requirements
    unpinned = [r for r in requirements if not re.fullmatch(r"[A-Za-z0-9_.-]+==\d+(\.\d+)*", r)]
    assert not unpinned, f"installed without an exact version: {unpinned}"
