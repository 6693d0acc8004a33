"""The suite's leftover check (tests/conftest.py, nothing_left_behind) finds a process a test left
running anywhere on the machine, not only among pytest's children: a detached `setsid sleep`
(reparented to init when its shell ends) passed the old check."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import ROOT, TAG_ENV, tagged

_LEAVES = """
import subprocess


def test_leaves_a_detached_sleep():
    subprocess.run(["sh", "-c", "setsid sleep 3141 &"], check=True)  # the shell ends: init adopts the sleep
"""


def test_a_detached_process_a_test_leaves_running_fails_that_test(tmp_path):
    """A test session of its own (the suite's fixtures as a plugin) whose one test leaves a detached
    sleep: the check must fail it, naming the sleep. The sleep carries this test's tag, nested, so
    it is found (and killed) here as well."""
    (tmp_path / "test_leaves.py").write_text(textwrap.dedent(_LEAVES))
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                               "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path)],
                              cwd=ROOT, capture_output=True, text=True, timeout=180)
        left = [" ".join(p.cmdline()) for p in tagged(os.environ[TAG_ENV])]
    finally:
        for process in tagged(os.environ[TAG_ENV]):
            process.kill()
    assert left == ["sleep 3141"], (left, done.stdout[-3000:])  # the sleep inherited the tag, under this test's
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 passed, 1 error" in done.stdout and "left running: " in done.stdout and "sleep 3141" in done.stdout, \
        done.stdout[-3000:]


def test_a_session_tag_is_nested_under_the_one_it_inherited():
    """A process whose tag is this test's, or one nested under it, is found; a longer number is not."""
    mine = os.environ[TAG_ENV]
    assert mine.rsplit(":", 1)[-1].isdigit(), mine  # a test's own tag, not the between-tests one
    started = [subprocess.Popen(["sleep", "60"], env={**os.environ, TAG_ENV: tag})
               for tag in (mine, f"{mine}/nested-1:0", f"{mine}0", "elsewhere")]
    try:
        assert sorted(p.pid for p in tagged(mine)) == sorted(p.pid for p in started[:2])
    finally:
        for process in started:
            process.kill()
            process.wait(timeout=30)
