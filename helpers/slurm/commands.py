"""Slurm's commands, run checked: one clear error when they are missing, hang or fail; whether Slurm answers.

Every `sinfo`, `scontrol` and `squeue` the course asks (outside the tools that talk to a whole
class) goes through `run`, with a deadline: a slurmctld that does not answer is a one-line error,
never a hung notebook.
"""

from __future__ import annotations

import re
import subprocess

from ..errors import CourseError

TIMEOUT_S = 30


def run(args: list[str]) -> str:
    """The output of a Slurm command, or a CourseError saying why there is none."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError:
        raise CourseError(f"`{args[0]}` not found: Slurm's commands must be on PATH to start "
                          "engines through Slurm (or start local engines)") from None
    except subprocess.TimeoutExpired:
        raise CourseError(f"`{' '.join(args)}` did not answer within {TIMEOUT_S} s: is slurmctld reachable? "
                          "(check SLURM_CONF and `sinfo`)") from None
    if done.returncode != 0:
        raise CourseError(f"`{' '.join(args)}` failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return done.stdout


def require_slurm() -> None:
    """A clear error when Slurm was asked for but cannot be reached."""
    run(["sinfo", "-h", "-o", "%P"])


def slurm_reachable() -> bool:
    """Whether a Slurm cluster answers here (its commands on PATH, its controller reachable)."""
    try:
        require_slurm()
    except CourseError:
        return False
    return True


def checked_word(name: str, value: str) -> str:
    """A partition, account or time as Slurm writes them; anything else (a newline would add a
    line to the batch script, braces break its template) is refused."""
    if not re.fullmatch(r"[A-Za-z0-9_.,:+-]{1,64}", value):
        raise CourseError(f"{name}={value!r} is not a Slurm name or time: use letters, digits and _ . , : + - "
                          "only (e.g. gpu, myproject, 01:00:00)")
    return value
