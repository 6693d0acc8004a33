"""What Slurm's queue says of jobs and steps: their state, their steps, the CPUs those hold, whose they are; waiting on a job.

`check_tasks_available` and `check_cpus_free` say at once what `srun` would otherwise wait for
silently, for ever: tasks the allocation does not have, CPUs a running step holds.

Every wait on Slurm the course makes polls on one schedule, `backoff` (a fifth of a second first,
then seconds, at most one query every 5 s), asks about its own job only (`squeue -h -j JOB`, never
the whole queue: slurmctld answers a listing of the whole class for each), and ends at a deadline
with a one-line error: `wait_for_job` for a job, `wait_gone` for jobs being replaced. A class of
300 learners in the same cell then costs slurmctld what docs/slurm.md ("A class polling the
controller") measured, not thousands of queries a second.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from typing import Callable, Iterator

from ..errors import CourseError
from .commands import run

OVERLAP_ENV = "COURSE_SLURM_OVERLAP"  # 1: the engines' srun step shares CPUs with steps running already


POLL_FIRST_S, POLL_LIMIT_S = 0.2, 5.0  # the course's one schedule of Slurm queries (docs/slurm.md)
# the states of a job that has ended (squeue -t all lists them until MinJobAge has passed)
ENDED = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
         "TIMEOUT")


def backoff(first: float = POLL_FIRST_S, limit: float = POLL_LIMIT_S) -> Iterator[float]:
    """Pauses between polls: quick at first (a job that starts at once), then rarer, so that a
    class of learners waiting for the queue does not hammer slurmctld or the shared file system."""
    pause = first
    while True:
        yield pause
        pause = min(limit, pause * 1.5)


def job_now(job_id: str, env: dict | None = None) -> str | None:
    """`STATE(REASON)` of one job, asked of squeue about that job alone; "" once it has ended or
    left the queue, None when squeue did not answer (a busy slurmctld: ask again later)."""
    try:
        done = subprocess.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T(%r)"], capture_output=True,
                              text=True, timeout=30, env=env)
    except FileNotFoundError:
        raise CourseError("squeue is not on PATH: run this where Slurm's commands are") from None
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return "" if "Invalid job id" in done.stderr else None  # purged after MinJobAge: gone
    state = (done.stdout.strip().splitlines() or [""])[0]
    return "" if state.split("(")[0] in ENDED else state


def wait_for_job(job_id: str, deadline_s: float, label: str = "", on_state: Callable[[str], None] | None = None,
                 each_tick: Callable[[], bool | None] | None = None, tick_s: float = 0.5,
                 first_s: float = POLL_FIRST_S, env: dict | None = None) -> None:
    """Wait until job `job_id` has ended, asking squeue about it on the `backoff` schedule.

    `on_state(state)` hears each new `STATE(REASON)`; `each_tick()`, a check of the caller's own
    (its log file, a process) every `tick_s`, ends the wait when it returns True. Past `deadline_s`
    the job is cancelled and that is a CourseError: a wait always ends."""
    began, pauses, state = time.monotonic(), backoff(first_s), None
    next_query = began
    while True:
        now = time.monotonic()
        if now >= next_query:
            seen = job_now(job_id, env)
            if seen is not None and seen != state:
                state = seen
                if on_state is not None:
                    on_state(seen or "ended")
            if seen == "":
                return
            next_query = now + next(pauses)
        if each_tick is not None and each_tick():
            return
        if now - began > deadline_s:
            cancel(job_id)
            raise CourseError(f"job {job_id}{f' ({label})' if label else ''} did not end within {deadline_s:.0f} s "
                              f"(last seen {state or 'not yet'}): cancelled")
        pause = next_query - time.monotonic()
        time.sleep(max(0.01, min(pause, tick_s) if each_tick is not None else pause))


def job_state(job_id: str) -> str:
    """Slurm's state of a job and the reason it waits, for error messages."""
    try:
        out = run(["squeue", "-h", "-j", job_id, "-o", "%T %R"]).strip()
    except CourseError as exc:
        return str(exc)
    return out or "no longer in the queue"


def wait_gone(job_ids: list[str], deadline_s: float = 60.0) -> bool:
    """Wait until the jobs have left the queue, COMPLETING included; False at the deadline.

    A job submitted to replace them is then placed on every node they held: submitted while one
    node still completes, `--spread-job` spreads it over the nodes free at that moment only."""
    ends = time.monotonic() + deadline_s
    for pause in backoff():
        try:
            if not run(["squeue", "-h", "-j", ",".join(map(str, job_ids)), "-o", "%i"]).strip():
                return True
        except CourseError:  # squeue answers an error for ids it no longer knows: gone
            return True
        if time.monotonic() + pause > ends:
            return False
        time.sleep(pause)
    return False


def job_record(job_id: str) -> str:
    """`scontrol show job -o` of one job (its fields on one line), or a CourseError when Slurm has none."""
    return run(["scontrol", "show", "job", "-o", str(job_id)])


def cancel(*ids: str, signal: int | None = None, timeout: float = 30) -> None:
    """`scancel` jobs or steps (`job.step`), or send them `signal`; a job already gone is no error."""
    option = [f"--signal={int(signal)}"] if signal is not None else []
    try:
        subprocess.run(["scancel", *option, *map(str, ids)], capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        pass


def slurm_job_is_ours(job_id: str, is_our_name: Callable[[str], bool]) -> bool:
    """This user's Slurm job, with a name `is_our_name` accepts (a job that is gone is nobody's to
    cancel). The caller brings the rule for names: the engines' is `helpers.engines.on_slurm`'s, which
    this package may not import."""
    import getpass

    try:
        done = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%u %j"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    user, _, name = done.stdout.strip("\n").partition(" ")
    return done.returncode == 0 and "\n" not in name and user == getpass.getuser() and is_our_name(name)


def squeue_rows(args: list[str]) -> list[list[str]]:
    """`squeue -h ARGS` with a `|`-separated format, one list of fields per job or step (the whole
    class's queue: a 60 s deadline)."""
    try:
        done = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise CourseError("squeue is not on PATH: run this where Slurm's commands are (the hub host "
                          "or a login node), with SLURM_CONF set if the site needs it") from None
    if done.returncode != 0:
        raise CourseError(f"squeue failed: {done.stderr.strip()[:300]}")
    return [line.split("|") for line in done.stdout.splitlines() if line.strip()]


def step_ids(job_id: str, name: str) -> list[str]:
    """The ids (`job.step`) of the running steps of `job_id` called `name`."""
    out = run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i %j"])
    return [row.split()[0] for row in out.splitlines() if row.split()[1:] == [name]]


def busy_steps(job_id: str) -> tuple[int, list[str]]:
    """CPUs held by the running steps of `job_id` (not its batch, extern or interactive step), and
    `id (name)` of each. srun waits silently, for ever, for CPUs such steps hold."""
    try:
        out = run(["scontrol", "show", "step", "-o", job_id])
    except CourseError:
        return 0, []
    held, named = 0, []
    for line in out.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        step = fields.get("StepId", "")
        if not step or step.endswith((".batch", ".extern", ".interactive")) or fields.get("State") != "RUNNING":
            continue
        held += int(fields.get("CPUs", "0")) if fields.get("CPUs", "0").isdigit() else 0
        named.append(f"{step} ({fields.get('Name', '?')})")
    return held, named


def check_tasks_available(n: int) -> None:
    """Inside an allocation, `n` engines need `n` tasks: say so before srun would wait or fail."""
    tasks = os.environ.get("SLURM_NTASKS") or os.environ.get("SLURM_NPROCS")
    if tasks is None:
        return  # allocated by nodes/CPUs only: srun decides
    if not tasks.isdigit():
        raise CourseError(f"SLURM_NTASKS={tasks!r} is not a number: is this a real Slurm allocation?")
    if n > int(tasks):
        raise CourseError(f"{n} engines asked for, but this allocation (job {os.environ.get('SLURM_JOB_ID')}) "
                          f"has {tasks} tasks: ask for at most {tasks} engines, or allocate more "
                          f"(salloc --ntasks={n})")


def check_cpus_free(n: int, cpus_per_task: int = 1) -> None:
    """Inside an allocation, say at once when running steps hold the CPUs `n` engines need."""
    job = os.environ.get("SLURM_JOB_ID", "")
    held, named = busy_steps(job)
    if not named:
        return
    total = re.search(r"NumCPUs=(\d+)", job_record(job))
    if total and int(total.group(1)) - held >= n * cpus_per_task:
        return
    raise CourseError(
        f"the engines' srun step could not start: {held} of the {total.group(1) if total else '?'} CPUs of job {job} "
        f"are held by {', '.join(named)} (ipcmagic's engines, or a forgotten step): stop it (`%ipcluster stop`, "
        f"or `scancel {named[0].split()[0]}`), or start the engines with `srun --overlap` where the site allows it "
        f"({OVERLAP_ENV}=1); to run the lesson on ipcmagic's engines instead, `%env COURSE_CLUSTER=default` first")
