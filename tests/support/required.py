"""A test that cannot run here: skipped with its reason, which the summary prints (pyproject's `-ra`), or
failed where a COURSE_REQUIRE_* setting says this machine must run it (.ci/run sets them as root).

The settings, and what each stands for:
- COURSE_REQUIRE_SLURM: what CI as root has: the local Slurm, root itself, apt-get to install what a
  test needs (Lmod, ruby), Debian's /usr/bin/python3 (.ci/run makes the venv with it);
- COURSE_REQUIRE_BROWSER: Chromium for the browser tests (tests/test_browser.py);
- COURSE_REQUIRE_HOROVOD: the Horovod build (tests/test_horovod.py, lesson 13).
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIREMENTS = ("COURSE_REQUIRE_SLURM", "COURSE_REQUIRE_BROWSER", "COURSE_REQUIRE_HOROVOD")


def unavailable(reason: str, required_by: str) -> NoReturn:
    """Skip the test for `reason`, or fail it when `required_by` (one of REQUIREMENTS) is 1 here."""
    if required_by not in REQUIREMENTS:
        raise ValueError(f"{required_by} is not one of {REQUIREMENTS}")
    if os.environ.get(required_by) == "1":
        pytest.fail(f"required here ({required_by}=1) but cannot run: {reason}")
    pytest.skip(reason)
