"""The local Slurm's lock (tests/support/slurm_lock.py): a second session waits, saying for whom, and a session
started under `flock` on the lock goes on (its ancestor holds it) instead of waiting for itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.conftest import ROOT

TAKE = ("import sys, time; from tests.support.slurm_lock import local_slurm_lock\n"
        "with local_slurm_lock(path=sys.argv[1]):\n    print('in', round(time.monotonic() - float(sys.argv[2]), 1), flush=True)\n")


def _take(path, *wrapper: str) -> subprocess.CompletedProcess:
    """In a session of its own, so a timeout kills `flock` and the Python under it, not `flock` alone."""
    args = [*wrapper, sys.executable, "-c", TAKE, str(path), str(time.monotonic())]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def test_a_second_session_waits_and_says_who_holds_the_lock(tmp_path):
    path = tmp_path / "slurm.lock"
    path.touch()
    holder = subprocess.Popen(["flock", str(path), "sleep", "4"])
    try:
        time.sleep(0.5)
        done = _take(path)
    finally:
        holder.wait(timeout=30)
    assert done.returncode == 0, done.stderr
    assert f"is held by {holder.pid} (flock {path} sleep 4)" in done.stdout, done.stdout
    waited = float(done.stdout.split()[-1])
    assert waited >= 3, f"went in after {waited} s while another process held the lock"


def test_a_session_under_flock_on_the_lock_goes_on(tmp_path):
    path = tmp_path / "slurm.lock"
    path.touch()
    done = _take(path, "flock", str(path))
    assert done.returncode == 0 and "waiting" not in done.stdout, done.stdout + done.stderr
    assert float(done.stdout.split()[-1]) < 20
