"""`make install` keeps one TensorFlow: the venv remembers its extra (cpu or gpu) and every later
target keeps it, so `make install EXTRA=gpu` then `make lab` or `make course` never puts
tensorflow-cpu beside tensorflow. Run with a stand-in Python that logs what it is asked to do
(no registry, no TensorFlow installed), so the plan is what make really runs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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
