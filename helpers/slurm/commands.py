"""Slurm's commands, run checked (one clear error when missing, hung or failed); whether Slurm answers; a step per node.

`WHERE_SLURM_ANSWERS` is the `slurm=` choice of the tools that run with or without Slurm.

Every `sinfo`, `scontrol` and `squeue` the course asks (outside the tools that talk to a whole
class) goes through `run`, with a deadline: a slurmctld that does not answer is a one-line error,
never a hung notebook.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

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


WHERE_SLURM_ANSWERS = "where Slurm answers"  # a `slurm` argument's third value, beside True and False


def slurm_choice(slurm: bool | str) -> bool | str:
    """`slurm` as the tools that run with or without Slurm (`doctor`, the ipcluster profile) take it:
    True (Slurm's side, required), False (none) or WHERE_SLURM_ANSWERS (Slurm's side where Slurm
    answers here). Never None: in the course `slurm=None` means COURSE_ENGINES decides where engines
    start (`helpers.engines.on_slurm.want_slurm`), and one word has one meaning."""
    if slurm is True or slurm is False or slurm == WHERE_SLURM_ANSWERS:
        return slurm
    raise CourseError(f"slurm={slurm!r} is not understood: use True, False or {WHERE_SLURM_ANSWERS!r}")


def checked_word(name: str, value: str) -> str:
    """A partition, account or time as Slurm writes them; anything else (a newline would add a
    line to the batch script, braces break its template) is refused."""
    if not re.fullmatch(r"[A-Za-z0-9_.,:+-]{1,64}", value):
        raise CourseError(f"{name}={value!r} is not a Slurm name or time: use letters, digits and _ . , : + - "
                          "only (e.g. gpu, myproject, 01:00:00)")
    return value


def srun_per_node(command: list[str], nodes: int, under: Path, timeout: float = 900, env: dict | None = None) -> str:
    """The output of `command` run as one task per node of an `srun` step, task by task.

    Each task writes its own file (`--output=...%t`): long lines of several tasks would otherwise
    interleave in srun's one stream. The files go in a fresh directory under `under`, which the
    nodes must share, and are removed after. `--immediate` and `--time` bound the wait and the run."""
    under.mkdir(parents=True, exist_ok=True)  # a fresh clone has no build/ yet
    where = Path(tempfile.mkdtemp(prefix="srun-tasks-", dir=under))
    shown = " ".join(command[1:4])
    try:
        done = subprocess.run(["srun", "--immediate=120", "--time=20", f"--nodes={nodes}", f"--ntasks={nodes}",
                               "--ntasks-per-node=1", "--export=ALL", f"--output={where}/task-%t.out", *command],
                              capture_output=True, text=True, timeout=timeout, env=env)
        outputs = "".join(path.read_text() for path in sorted(where.glob("task-*.out")))
    except subprocess.TimeoutExpired:
        raise CourseError(f"srun {shown} did not finish within {timeout:.0f} s") from None
    finally:
        shutil.rmtree(where, ignore_errors=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or outputs.strip().splitlines() or ["no output"])[-1]
        raise CourseError(f"srun {shown} failed (exit status {done.returncode}): {tail}")
    return outputs
