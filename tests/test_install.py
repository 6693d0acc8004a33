"""`make install` keeps one TensorFlow: the venv remembers its extra (cpu or gpu) and every later
target keeps it, so `make install EXTRA=gpu` then `make lab` or `make course` never puts
tensorflow-cpu beside tensorflow; it runs pip again only when what pip installs changed (never on a
pull that only touches the Makefile), and a checkout someone else owns builds in the user's own
directory. Run with a stand-in Python that logs what it is asked to do (no registry, no TensorFlow
installed), so the plan is what make really runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT

STAND_IN = """#!/bin/bash
# a stand-in for the venv's python: log the call; answer the version check as Python {version}
echo "$*" >> "{log}"
case "$1" in
  --version) echo "Python {version}" ;;
  -c) exit {version_ok} ;;
  -m) [ "$2" = venv ] && mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
esac
exit 0
"""


def _python(path: Path, log: Path, version: str = "3.11.2") -> Path:
    ok = 0 if (3, 10) <= tuple(int(p) for p in version.split(".")[:2]) <= (3, 12) else 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STAND_IN.format(version=version, log=log, version_ok=ok))
    path.chmod(0o755)
    return path


def _make(*args: str, **variables: str) -> subprocess.CompletedProcess:
    assignments = [f"{k}={v}" for k, v in variables.items()]
    env = {k: v for k, v in os.environ.items() if k not in ("EXTRA", "VENV", "PYTHON", "MAKEFLAGS")}
    return subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", *args, *assignments],
                          capture_output=True, text=True, timeout=60, env=env)


def _venv(tmp_path: Path, extra: str | None, log: Path) -> Path:
    venv = tmp_path / "venv"
    _python(venv / "bin" / "python", log)
    if extra:
        (venv / ".extra").write_text(extra + "\n")
    return venv


def test_a_gpu_venv_stays_gpu_for_every_later_target(tmp_path):
    log = tmp_path / "calls.log"
    venv = _venv(tmp_path, None, log)
    done = _make("install", VENV=str(venv), EXTRA="gpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (venv / ".extra").read_text().strip() == "gpu"
    assert "-e .[gpu,test,hub,site]" in log.read_text(), log.read_text()
    log.write_text("")
    for target in ("lab", "course", "test", "bench"):
        plan = _make("-n", target, VENV=str(venv))  # what make would run, without EXTRA given
        assert plan.returncode == 0, plan.stderr
        assert "[cpu," not in plan.stdout and "tensorflow-cpu" not in plan.stdout, (target, plan.stdout)
    (venv / ".installed-gpu").unlink()  # pyproject.toml changed, say: the next target reinstalls
    done = _make("course", VENV=str(venv))
    installs = [line for line in log.read_text().splitlines() if "pip install" in line and "-e" in line]
    assert installs == ["-m pip install --quiet -e .[gpu,test,hub,site]"], log.read_text()


def test_asking_for_the_other_extra_stops_before_pip(tmp_path):
    log = tmp_path / "calls.log"
    venv = _venv(tmp_path, "gpu", log)
    done = _make("install", VENV=str(venv), EXTRA="cpu")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "holds TensorFlow for EXTRA=gpu" in done.stderr and "VENV=.venv-cpu" in done.stderr, done.stderr
    assert not log.exists() or "pip" not in log.read_text()


def test_a_venv_made_before_extra_was_remembered_keeps_its_stamp_s_extra(tmp_path):
    log = tmp_path / "calls.log"
    venv = _venv(tmp_path, None, log)
    (venv / ".installed-gpu").touch()
    plan = _make("-n", "install", VENV=str(venv))
    assert plan.returncode == 0 and "[cpu," not in plan.stdout, plan.stdout


def test_an_old_python_is_one_line_naming_python_equals(tmp_path):
    log = tmp_path / "calls.log"
    old = _python(tmp_path / "old" / "python3", log, version="3.9.18")
    done = _make("install", VENV=str(tmp_path / "new-venv"), PYTHON=str(old))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "is Python 3.9.18: the course needs Python 3.10-3.12" in done.stderr, done.stderr
    assert "PYTHON=python3.11" in done.stderr and not (tmp_path / "new-venv").exists()


def test_an_unknown_extra_is_refused(tmp_path):
    done = _make("install", VENV=str(tmp_path / "v"), EXTRA="rocm")
    assert done.returncode == 2 and "use EXTRA=cpu or EXTRA=gpu" in done.stderr, done.stderr


def _checkout(where: Path) -> Path:
    """What `make` reads (the Makefile and pyproject.toml), in a checkout of its own."""
    where.mkdir(parents=True, exist_ok=True)
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy2(ROOT / name, where / name)
    return where


def _make_in(checkout: Path, *args: str, user: str | None = None, env: dict | None = None,
             **variables: str) -> subprocess.CompletedProcess:
    prefix = ["runuser", "-u", user, "--"] if user else []
    clean = {k: v for k, v in os.environ.items() if k not in ("EXTRA", "VENV", "PYTHON", "MAKEFLAGS", "COURSE_BUILD_DIR")}
    return subprocess.run([*prefix, "make", "-C", str(checkout), "--no-print-directory", *args,
                           *[f"{k}={v}" for k, v in variables.items()]],
                          capture_output=True, text=True, timeout=120, env={**clean, **(env or {})}, cwd="/")


def _pip_calls(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "pip install" in line] if log.exists() else []


def test_a_pull_that_touches_the_makefile_or_pyproject_runs_no_pip_until_a_requirement_changes(tmp_path):
    """Issue 56, finding 5: the stamp depended on the Makefile's and pyproject.toml's mtimes, so a
    `git pull` touching either made `make` run pip on compute nodes without internet."""
    checkout, log = _checkout(tmp_path / "course"), tmp_path / "calls.log"
    venv = _venv(tmp_path, None, log)
    assert _make_in(checkout, "install", VENV=str(venv)).returncode == 0
    assert len(_pip_calls(log)) == 3, log.read_text()
    stamp = (venv / ".installed-cpu").read_text().strip()
    log.write_text("")
    later = time.time() + 120  # a pull rewrote both files
    for name in ("Makefile", "pyproject.toml"):
        os.utime(checkout / name, (later, later))
    pyproject = checkout / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("timeout = 600", "timeout = 601"))  # pytest's table only
    done = _make_in(checkout, "install", VENV=str(venv))
    assert done.returncode == 0 and _pip_calls(log) == [], (done.stdout, log.read_text())
    assert len(stamp) == 16, stamp  # the stamp holds the hash of what pip installed
    pyproject.write_text(pyproject.read_text().replace('"psutil>=5.9"', '"psutil>=6"'))  # a requirement changed
    done = _make_in(checkout, "install", VENV=str(venv))
    assert done.returncode == 0 and "-m pip install --quiet -e .[cpu,test,hub,site]" in _pip_calls(log), log.read_text()
    assert (venv / ".installed-cpu").read_text().strip() != stamp


def test_a_stamp_made_before_the_hash_stands_while_newer_than_pyproject(tmp_path):
    """A venv installed by the previous Makefile (an empty stamp) is not reinstalled by the pull that
    brings this one, unless pyproject.toml changed after it."""
    checkout, log = _checkout(tmp_path / "course"), tmp_path / "calls.log"
    venv = _venv(tmp_path, "cpu", log)
    old = time.time() - 3600
    os.utime(checkout / "pyproject.toml", (old, old))
    (venv / ".installed-cpu").touch()
    assert _make_in(checkout, "install", VENV=str(venv)).returncode == 0 and _pip_calls(log) == []
    os.utime(checkout / "pyproject.toml", (time.time() + 60,) * 2)
    assert _make_in(checkout, "install", VENV=str(venv)).returncode == 0 and _pip_calls(log), "pyproject is newer"


@pytest.fixture
def root_owned_install():
    """A checkout and a stamped venv that root owns (mode 755), as a class install: what a second
    user may read but not write. Under /var/tmp: pytest's own tmp is root's only."""
    if os.geteuid() != 0:
        pytest.skip("a root-owned install needs root")
    where = Path(tempfile.mkdtemp(prefix="course-install-", dir="/var/tmp"))
    try:
        where.chmod(0o755)
        checkout, log = _checkout(where / "course"), where / "calls.log"
        venv = _venv(where, None, log)
        assert _make_in(checkout, "install", VENV=str(venv)).returncode == 0
        log.chmod(0o666)  # the stand-in python logs as whoever runs it
        yield checkout, venv
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_a_root_owned_checkout_builds_in_the_users_own_directory(root_owned_install, other_user):
    """Issue 56, finding 5: as a learner of a class install (root's checkout, no build/ of theirs),
    make course, site, gpucheck and bench write under the learner's cache, or COURSE_BUILD_DIR;
    root, who can write the checkout, keeps build/."""
    checkout, venv = root_owned_install
    user, home = other_user["name"], other_user["home"]
    cache = f"{home}/.cache/tf-hpc-course/build"
    outs = {}
    for who in (user, None):
        plan = _make_in(checkout, "-n", "course", "site", "gpucheck", "bench", user=who, env={"HOME": str(home)}
                        if who else None, VENV=str(venv))
        assert plan.returncode == 0 and "pip install" not in plan.stdout, plan.stdout + plan.stderr
        outs[who] = [line.split("--out ")[1].split()[0] for line in plan.stdout.splitlines() if "--out " in line]
    assert outs[user] == [cache, f"{cache}/site", f"{cache}/gpucheck", f"{cache}/bench"], outs
    assert outs[None] == ["build", "build/site", "build/gpucheck", "build/bench"], outs
    plan = _make_in(checkout, "-n", "gpucheck", user=user, env={"HOME": str(home), "COURSE_BUILD_DIR": f"{home}/b"},
                    VENV=str(venv))
    assert f"--out {home}/b/gpucheck" in plan.stdout, plan.stdout


def test_make_gpucheck_as_a_learner_of_a_root_owned_checkout_writes_its_json(root_owned_install, other_user, report):
    """One real target as a second Unix user, in the course's own root-owned checkout: its Python
    (PY) is the course's venv; its stamp is the stand-in's, current, so make runs no pip."""
    _, venv = root_owned_install
    user, home = other_user["name"], other_user["home"]
    assert os.stat(ROOT).st_uid == 0 and not os.stat(ROOT).st_mode & 0o022, "the course's checkout is root's here"
    done = _make_in(ROOT, "gpucheck", user=user, env={"HOME": str(home)}, VENV=str(venv),
                    PY=str(ROOT / ".venv" / "bin" / "python"), GPUCHECK_ARGS="--lessons=")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "pip install" not in done.stdout
    written = list((home / ".cache" / "tf-hpc-course" / "build" / "gpucheck").glob("gpucheck-*.json"))
    assert len(written) == 1 and written[0].stat().st_uid == int(subprocess.check_output(["id", "-u", user])), written
    report(f"test_install: make gpucheck as {user} in root's checkout {ROOT} wrote {written[0]}")
