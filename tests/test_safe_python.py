"""One check that the course's Python is safe to run, used by all five launchers: slurm/train.sbatch,
slurm/engines.sbatch, slurm/gpucheck.sbatch, the hub's server job and the Open OnDemand app.

Each launcher runs here (outside Slurm, as root) on a stand-in checkout whose venv is then made
writable by others in one place at a time: its pyvenv.cfg, its lib/ or lib/python3.x/, its
site-packages. Every launcher must refuse each one before its Python runs (the stand-in Python
leaves a mark), and run the Python of the checkout untouched."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import ROOT
from tests.support.launchers import CHECK, LAUNCHERS, checkout_with_venv, launch

PLANTS = {  # where another user could write, and how
    "pyvenv.cfg writable by everyone": (".venv/pyvenv.cfg", lambda p: p.chmod(0o666)),
    "lib/ writable by the group": (".venv/lib", lambda p: p.chmod(0o775)),
    "lib/python3.11/ owned by another user": (".venv/lib/python3.11", lambda p: os.chown(p, 65534, 65534)),
    "site-packages writable by everyone": (".venv/lib/python3.11/site-packages", lambda p: p.chmod(0o777)),
    "a .pth file in site-packages owned by another user":
        (".venv/lib/python3.11/site-packages/course.pth", lambda p: os.chown(p, 65534, 65534)),
}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_launcher_runs_a_python_nobody_else_could_change(tmp_path, launcher):
    checkout, mark = checkout_with_venv(tmp_path)
    launch(launcher, checkout, tmp_path)
    assert mark.exists(), f"{launcher} did not run the checkout's own Python"


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("plant", list(PLANTS))
def test_every_launcher_refuses_a_venv_others_could_write_to(tmp_path, launcher, plant, report):
    if os.geteuid() != 0:
        pytest.skip("files of another user need root")
    checkout, mark = checkout_with_venv(tmp_path)
    where, change = PLANTS[plant]
    change(checkout / where)
    done = launch(launcher, checkout, tmp_path)
    said = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "(nothing)"
    assert done.returncode == 2 and f"error: {checkout / where} belongs to uid" in said, (done.stdout, done.stderr)
    assert not mark.exists(), f"{launcher} ran the Python of a venv with {plant}"
    if launcher == LAUNCHERS[0] and plant == list(PLANTS)[0]:
        report(f"test_safe_python: {said}")


def test_the_check_fails_closed_on_a_course_account_that_is_not_a_uid(tmp_path):
    """A uid the hub failed to fill in (`@INSTALL_UID@` left as it is) would make find fail, and a
    find that finds nothing would pass: the check refuses instead."""
    checkout, mark = checkout_with_venv(tmp_path)
    done = subprocess.run(["bash", "-c", f'source {ROOT / CHECK}; COURSE_TRUSTED_UID=@INSTALL_UID@ '
                           f'course_python_check {checkout}/.venv/bin/python {checkout}'],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "COURSE_TRUSTED_UID=@INSTALL_UID@ is not a uid" in done.stderr, done.stderr
