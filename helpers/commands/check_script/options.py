"""check-script's options: what the user asked for, checked before anything starts, and the arguments each run gives the script."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import CourseError

DEFAULT_BATCH = 12  # divisible by 1, 2, 3, 4 and 6 workers
DEFAULT_DEADLINE_S = 300.0


@dataclass
class Options:
    script: Path
    script_args: list[str]
    workers: list[int]
    global_batch: int
    batch_flag: str
    batch_is_global: bool
    examples_flag: str | None = None
    deadline_s: float = DEFAULT_DEADLINE_S
    slurm: bool = False
    keep: Path | None = None


def option_name(name: str | None) -> str | None:
    """`batch-size` or `--batch-size` -> `--batch-size` (argparse takes a bare dashed value for an option)."""
    return None if name is None else (name if name.startswith("-") else "--" + name)


def check_options(opts: Options) -> None:
    """One-line errors for what the user can fix before anything starts."""
    if not opts.script.is_file():
        raise CourseError(f"no script {opts.script}: give the path of your training script")
    if opts.script.suffix != ".py":
        raise CourseError(f"{opts.script} is not a Python file (.py)")
    for flag in filter(None, (opts.batch_flag, opts.examples_flag)):
        if not flag.strip("-") or any(c.isspace() for c in flag):
            raise CourseError(f"{flag!r} is not an option name: write it as your script takes it, e.g. batch-size")
        if any(a == flag or a.startswith(flag + "=") for a in opts.script_args):
            raise CourseError(f"{flag} is set by check-script (it differs between the runs): remove it after --")
    if opts.global_batch < 1:
        raise CourseError(f"--global-batch {opts.global_batch} must be at least 1")
    for n in opts.workers:
        if n < 2:
            raise CourseError(f"--workers {n}: the comparison needs 2 or more workers (1 worker always runs)")
        if opts.global_batch % n:
            raise CourseError(f"--global-batch {opts.global_batch} does not split over {n} workers: "
                              f"choose a multiple of {n}")


def script_args(opts: Options, n: int) -> list[str]:
    """The script's arguments in a run of `n` workers: the user's, then the batch (and examples)."""
    batch = opts.global_batch if opts.batch_is_global else opts.global_batch // n
    args = [*opts.script_args, opts.batch_flag, str(batch)]
    if opts.examples_flag:
        args += [opts.examples_flag, str(opts.global_batch)]
    return args
