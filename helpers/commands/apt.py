"""apt-get for the course's tools and tests, one at a time, under a lock only root can reach: `make test` runs
two pytest streams side by side (tests/streams.py), and apt refuses a second apt-get while one runs, so every
apt-get of the course waits on one lock (slurm/local/up, a shell script, takes the same file).

The lock lives in root's own directory (LOCK_DIR, mode 700), not in world-writable /var/lock: there any user
could hold it for good, or plant a link at its name that root would follow and create a file through. It
is opened without following a link, and waited for at most `lock_timeout` seconds, then a one-line error."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import time
from contextlib import contextmanager
from typing import Iterator

from ..errors import CourseError

LOCK_DIR = "/run/course"
APT_LOCK = f"{LOCK_DIR}/apt.lock"
LOCK_TIMEOUT_S = 900.0


def lock_dir() -> str:
    """LOCK_DIR, made root's and 700 if missing; a CourseError if it is anything else (a link, another
    owner, open to others): then someone else could reach the lock."""
    try:
        os.mkdir(LOCK_DIR, 0o700)
    except FileExistsError:
        pass
    except PermissionError:
        raise CourseError(f"cannot create {LOCK_DIR}: the course's apt-get runs as root") from None
    found = os.lstat(LOCK_DIR)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != 0 or found.st_mode & 0o077:
        raise CourseError(f"{LOCK_DIR} is not a directory of root's that only root may enter (uid {found.st_uid}, "
                          f"mode {stat.S_IMODE(found.st_mode):o}): refusing to take the apt lock there; remove it")
    return LOCK_DIR


@contextmanager
def apt_lock(lock_timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the course's apt lock (APT_LOCK) for the `with` block: wait for another apt-get of the
    course's at most `lock_timeout` seconds, then a CourseError that says who to look for."""
    lock_dir()
    try:
        fd = os.open(APT_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:  # ELOOP: a link at its name
        raise CourseError(f"cannot open the apt lock {APT_LOCK} ({exc.strerror}): remove it") from None
    try:
        deadline, pause = time.monotonic() + lock_timeout, 0.1
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise CourseError(f"another apt-get of the course's has held {APT_LOCK} for {lock_timeout:.0f} s: "
                                      f"wait for it, or find it with `fuser -v {APT_LOCK}`") from None
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(2.0, pause * 1.5)
        yield
    finally:
        os.close(fd)  # releases the lock


def apt_install(*packages: str, timeout: float = 900, lock_timeout: float = LOCK_TIMEOUT_S) -> subprocess.CompletedProcess:
    """`apt-get update` and `apt-get install PACKAGES` (root), after any other apt-get of the course's;
    the first that fails is returned."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with apt_lock(lock_timeout):
        done = subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True, timeout=timeout, env=env)
        if done.returncode != 0:
            return done
        return subprocess.run(["apt-get", "install", "-y", "-qq", *packages], capture_output=True, text=True,
                              timeout=timeout, env=env)
