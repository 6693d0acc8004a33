"""No skip in CI without its reason in the summary, and none where CI must run the test: a test that
cannot run goes through tests/support/required.py, which fails it under the COURSE_REQUIRE_* setting .ci/run
sets as root, and pytest's `-ra` (pyproject) prints every skip's reason at the end of each stream."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.support.required import REQUIREMENTS, unavailable

_CANNOT_RUN = """
from tests.support.required import unavailable


def test_cannot_run_here():
    unavailable("no such device here (a planted reason)", "COURSE_REQUIRE_BROWSER")
"""


def test_a_test_that_cannot_run_is_skipped_with_its_reason_or_failed_where_required(tmp_path):
    """Run as `make test` runs a stream (the repository's pytest configuration): the reason is in the
    summary's SKIPPED line; with the requirement set, the test fails with it."""
    (tmp_path / "test_cannot_run.py").write_text(_CANNOT_RUN)
    env = {k: v for k, v in os.environ.items() if k not in REQUIREMENTS}
    runs = {}
    for required in ("", "1"):
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml"),
                               "--rootdir", str(tmp_path), str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, env={**env, **({"COURSE_REQUIRE_BROWSER": required} if required else {})})
        runs[required] = done
    skipped, failed = runs[""], runs["1"]
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout[-2000:]
    assert "SKIPPED [1] " in skipped.stdout and ": no such device here (a planted reason)" in skipped.stdout, \
        "the skip's reason is not in the summary:\n" + skipped.stdout[-2000:]
    assert failed.returncode == 1 and "1 failed" in failed.stdout, failed.stdout[-2000:]
    assert "required here (COURSE_REQUIRE_BROWSER=1) but cannot run: no such device here" in failed.stdout, \
        failed.stdout[-2000:]


def test_only_the_settings_ci_sets_are_requirements(monkeypatch):
    ci = (ROOT / ".ci" / "run").read_text()
    assert all(name in ci for name in REQUIREMENTS), "each requirement is set by .ci/run as root"
    monkeypatch.setenv("COURSE_REQUIRE_SLURM", "1")
    never_set = "COURSE" + "_REQUIRE_GPU"  # built: a made-up name, not a setting (test_settings scans for names)
    with pytest.raises(ValueError, match=f"{never_set} is not one of"):
        unavailable("no GPU", never_set)  # a name CI never sets would skip there, unseen
