"""The course's apt lock is root's: it lives in a directory only root may enter (not world-writable
/var/lock, where any user could hold it for good or plant a link that root followed), is opened
without following a link, and a lock held too long is a one-line error, never a wait without end."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers.errors import CourseError
from helpers.commands import apt

OLD_LOCK = Path("/var/lock/course-apt.lock")


@pytest.fixture
def fake_apt_get(tmp_path, monkeypatch) -> Path:
    """apt-get on PATH that only notes its calls."""
    if os.geteuid() != 0:
        pytest.skip("the apt lock is root's, as apt-get is")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/calls\n")
    (fake / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    return tmp_path / "calls"


def test_a_link_planted_where_the_lock_was_is_not_followed(tmp_path, fake_apt_get, report):
    """Anyone can create /var/lock/course-apt.lock: a link there to a file root would create elsewhere."""
    if OLD_LOCK.is_symlink() or (OLD_LOCK.exists() and not OLD_LOCK.is_file()):
        pytest.skip(f"{OLD_LOCK} is a link or not a file already: not planting over it")
    aside = OLD_LOCK.with_name(f"course-apt.lock.aside-{os.getpid()}")  # the old code's file, kept (same inode)
    if OLD_LOCK.exists():
        OLD_LOCK.rename(aside)
    target = tmp_path / "created-by-root"
    OLD_LOCK.symlink_to(target)
    try:
        done = apt.apt_install("nothing-real")
    finally:
        OLD_LOCK.unlink()
        if aside.exists():
            aside.rename(OLD_LOCK)
    assert done.returncode == 0 and fake_apt_get.read_text().split("\n")[:2] == ["update -qq", "install -y -qq nothing-real"]
    assert not target.exists(), "root followed the planted link and created its target"
    found = os.lstat(apt.LOCK_DIR)
    assert found.st_uid == 0 and found.st_mode & 0o777 == 0o700, oct(found.st_mode)
    report(f"test_apt_lock: a link at {OLD_LOCK} not followed; the lock is {apt.APT_LOCK} in a directory of mode 700")


def test_a_link_at_the_lock_itself_is_refused(tmp_path, fake_apt_get, monkeypatch):
    """The lock is opened without following a link (in a copy of its directory: the real lock stays)."""
    where = tmp_path / "course"
    monkeypatch.setattr(apt, "LOCK_DIR", str(where))
    monkeypatch.setattr(apt, "APT_LOCK", str(where / "apt.lock"))
    apt.lock_dir()
    (where / "apt.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CourseError, match="cannot open the apt lock"):
        apt.apt_install("nothing-real")
    assert not (tmp_path / "elsewhere").exists() and not fake_apt_get.exists()


def test_a_lock_held_too_long_is_a_one_line_error(fake_apt_get, report):
    apt.lock_dir()
    holder = subprocess.Popen(["flock", apt.APT_LOCK, "sleep", "30"], start_new_session=True)
    try:
        time.sleep(0.5)  # the holder has the lock
        began = time.monotonic()
        with pytest.raises(CourseError) as caught:
            apt.apt_install("nothing-real", lock_timeout=1)
        waited = time.monotonic() - began
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # flock and its sleep: killing flock alone left the sleep running
        holder.wait()
    said = str(caught.value)
    assert f"another apt-get of the course's has held {apt.APT_LOCK} for 1 s" in said and "\n" not in said, said
    assert 1 <= waited < 5 and not fake_apt_get.exists(), (waited, "apt-get ran without the lock")
    report(f"test_apt_lock: held lock, after {waited:.1f} s: {said}")
