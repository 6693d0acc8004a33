"""The one lock on the machine's local Slurm: a test session holds it from `slurm/local/up` to `down`.

`slurm/local/up` tears down a running local Slurm first (so a user's second `up` just works), which
means a second pytest session bringing up its own would pull the bridge and daemons from under the
first one's jobs: "Could not bind to 10.77.0.1", sinfo's "Insane message length", jobs CANCELLED. The
`slurm` fixture holds this lock for its session instead. It lives in root's own directory (the apt
lock's, `helpers.commands.apt.lock_dir`), not in world-writable /tmp. A session started under
`flock <this lock> pytest ...` sees its ancestor holding it and goes on.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from typing import Iterator

import psutil

from helpers.commands.apt import lock_dir

WAIT_S = 3 * 3600  # a whole CI run of another session, then a clear failure instead of waiting for ever


def lock_path() -> str:
    return os.path.join(lock_dir(), "slurm.lock")


def holders(path: str) -> set[int]:
    """PIDs holding a flock on `path`, from /proc/locks (the PID that took it: `flock`'s own, for `flock CMD`)."""
    inode = os.stat(path).st_ino
    found = set()
    with open("/proc/locks") as locks:
        for line in locks:
            parts = line.split()
            if "FLOCK" in parts and "->" not in parts and len(parts) >= 6 and parts[-3].split(":")[-1] == str(inode):
                found.add(int(parts[-4]))
    return found


@contextmanager
def local_slurm_lock(say=print, path: str | None = None) -> Iterator[None]:
    """Hold the lock for the `with` block; wait (saying for whom) while another session holds it."""
    path = path or lock_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            ancestors = {p.pid for p in psutil.Process().parents()}
            if not holders(path) & ancestors:
                _wait(fd, path, say)
        yield
    finally:
        os.close(fd)


def _wait(fd: int, path: str, say) -> None:
    who = ", ".join(f"{pid} ({' '.join(psutil.Process(pid).cmdline())[:100]})" for pid in holders(path)
                    if psutil.pid_exists(pid))
    say(f"waiting for the local Slurm: {path} is held by {who or 'another process'}")
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the local Slurm's lock {path} was held for {WAIT_S} s by {who}") from None
            time.sleep(2)
