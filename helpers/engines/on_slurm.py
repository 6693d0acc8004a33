"""How ipyparallel engines are launched through Slurm (a batch job or an `srun` step), and an engines job stopped.

Two ways, one result: engines are the tasks of one Slurm job step, one engine per task, so
every engine sees its own `SLURM_PROCID` and the step's node list (what `SlurmClusterResolver`
needs).
- From outside an allocation (a login node, a JupyterHub server outside Slurm): one `sbatch`
  job whose `srun` starts the engines (ipyparallel's Slurm launcher, with our template).
- Inside an allocation (`salloc`, or a JupyterHub server that is itself a Slurm job): `srun`
  starts the engines in the allocation we already have (`SrunEngineSetLauncher`).
The controller runs where the notebook runs and listens on the address the compute nodes reach
it by, never on every interface (`helpers.slurm.nodes.controller_ip`). What the course knows of
Slurm itself (commands, requests, the queue, steps) is in `helpers.slurm`.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from ipyparallel.cluster.launcher import EngineLauncher, MPILauncher
from traitlets import List

from ..errors import CourseError
from ..settings import text
from ..slurm.queue import backoff, cancel, job_record, job_state, step_ids
from ..slurm.request import SlurmRequest
from ..slurm.step import allocation_tasks
from ..slurm.submit import exclusive_options

ENGINES_ENV = "COURSE_ENGINES"  # auto (default), local or slurm: where notebooks start their engines
ENGINE_CHOICES = ("auto", "local", "slurm")
ENGINES_JOB_NAME = "tf-course-engines"  # slurm/engines.sbatch's --job-name: adopt_job() touches no other job


def engines_job_name(cluster_id: str) -> str:
    """The Slurm name of a cluster's engines job or step: the course's own, never ipyparallel's
    default `ipengine-*`, which a learner's research engines carry too (`class end` cancels by name)."""
    return f"{ENGINES_JOB_NAME}-{cluster_id}"


def is_engines_job_name(name: str, cluster_id: str | None = None) -> bool:
    """The one rule for "is this Slurm job or step the course's engines?" (`class end`, adopting a job,
    the kernel's watcher, stopping a cluster from its file), so no two places answer it differently.

    Exactly the names the course gives engines: with `cluster_id`, that cluster's (`engines_job_name`);
    without, slurm/engines.sbatch's or any cluster's. Never a name that only starts the same
    (`tf-course-enginesX`) nor ipyparallel's `ipengine-*`, which a learner's own engines carry.
    """
    if cluster_id is not None:
        return name == engines_job_name(cluster_id)
    return re.fullmatch(re.escape(ENGINES_JOB_NAME) + r"(-[A-Za-z0-9_-]+)?", name) is not None


def want_slurm(slurm: bool | None = None, n: int = 2) -> bool:
    """Whether `n` engines go through Slurm: the argument if given, else `COURSE_ENGINES` (what
    `slurm=None` means everywhere in the course; tools that may run without Slurm take
    `helpers.slurm.commands.WHERE_SLURM_ANSWERS` instead).

    `auto` (the default) takes the allocation's tasks when this process runs in an allocation of
    two or more tasks that holds the `n` engines, outside any job step (a hub's server job, a batch
    job), and local engines otherwise (inside a step too, e.g. JupyterLab started with `srun`);
    `slurm` always goes through Slurm, `local` never does.
    """
    if slurm is not None:
        return bool(slurm)
    choice = text(ENGINES_ENV).lower() or "auto"
    if choice not in ENGINE_CHOICES:
        raise CourseError(f"{ENGINES_ENV}={choice!r} is not understood: use {', '.join(ENGINE_CHOICES)}")
    if choice == "auto":
        return allocation_tasks() >= max(n, 2)
    return choice == "slurm"


def batch_template(request: SlurmRequest, extra: list[str] | tuple = ()) -> str:
    """The engines' batch script, with ipyparallel's placeholders ({n}, {program_and_args}, ...).

    `--ntasks={n}` is spelled out so ipyparallel adds no #SBATCH lines of its own, and
    SLURM_EXPORT_ENV is unset so that `srun` passes the controller's connection info on.
    `--exclusive=user` where the class gives each learner a node (`helpers.slurm.submit`): the
    engines' TensorFlow ports then share their nodes with no other user's job.
    """
    lines = ["#!/bin/bash", f"#SBATCH --job-name={engines_job_name('{cluster_id}')}", "#SBATCH --ntasks={n}",
             "#SBATCH --output={output_file}", *request.sbatch_lines(),
             *(f"#SBATCH {option}" for option in exclusive_options()), *extra,
             "unset SLURM_EXPORT_ENV", "srun --export=ALL {program_and_args}", ""]
    return "\n".join(lines)


def batch_file(cluster_id: str) -> Path:
    """Where the engines' batch script is written: the IPython profile's log directory."""
    from IPython.paths import get_ipython_dir

    directory = Path(get_ipython_dir()) / "profile_default" / "log"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{cluster_id}-engines.sbatch"


class SrunEngineSetLauncher(MPILauncher, EngineLauncher):
    """Engines as one `srun` step of the allocation this process runs in.

    ipyparallel's MPI launcher with `srun` in place of `mpiexec` and without `--mpi`. Stopping
    kills the step's tasks with `scancel` (srun cannot pass on a SIGKILL, and engines holding
    TensorFlow ignore SIGTERM), then srun itself.
    """

    # the name ipyparallel records in the cluster file and imports back when a later process
    # (`cluster stop`, COURSE_CLUSTER) loads the cluster: its default, "module:Class", does not import
    entrypoint_name = "helpers.engines.on_slurm.SrunEngineSetLauncher"
    mpi_cmd = List(["srun"], config=True, help="srun, and options for the engines' step")

    @property
    def program(self):
        return self.engine_cmd

    @property
    def program_args(self):
        return self.cluster_args + self.engine_args

    @property
    def step_name(self) -> str:
        return engines_job_name(self.cluster_id)

    def find_args(self):
        return (self.mpi_cmd + ["-n", str(self.n), "--export=ALL", f"--job-name={self.step_name}"]
                + self.mpi_args + self.program + self.program_args)

    def start(self, n):
        self.n = n
        return super().start(n)

    def signal(self, sig):
        if sig == signal.SIGKILL and self.state == "running" and os.environ.get("SLURM_JOB_ID"):
            job = os.environ["SLURM_JOB_ID"]
            for step in step_ids(job, self.step_name):
                cancel(step, signal=signal.SIGKILL)
            deadline, pauses = time.monotonic() + 15, backoff()  # gone from squeue: its CPUs are free for the next start
            while step_ids(job, self.step_name) and time.monotonic() < deadline:
                time.sleep(next(pauses))
        return super().signal(sig)


class SlurmJob:
    """A `slurm/engines.sbatch` job seen from the notebook: wait for it, stop it.

    It offers what `helpers.engines.cluster` calls on an ipyparallel cluster (`cluster_id`,
    `signal_engines_sync`, `stop_cluster_sync`), so attached engines stop the same way.
    """

    def __init__(self, job_id: str):
        if not job_id.isdigit():
            raise CourseError(f"{job_id!r} is not a Slurm job id (sbatch prints it: 'Submitted batch job 1234')")
        self.job_id = job_id
        self.cluster_id = f"course-job{job_id}"
        self.ours = False  # set once Slurm confirms it is this user's engines job: only then cancel it

    def wait_running(self, timeout: float) -> int:
        """Wait until the job runs; returns its number of tasks."""
        deadline, pauses = time.monotonic() + timeout, backoff(0.5, 5.0)
        while True:
            try:
                info = job_record(self.job_id)
            except CourseError as exc:
                raise CourseError(f"Slurm job {self.job_id} not found (finished, or never submitted?): "
                                  f"{exc}") from None
            self._check_ours(info)
            state = re.search(r"JobState=(\S+)", info).group(1)
            if state == "RUNNING":
                return int(re.search(r"NumTasks=(\d+)", info).group(1))
            if state not in ("PENDING", "CONFIGURING"):
                raise CourseError(f"Slurm job {self.job_id} is {state}, not running: see its output file")
            if time.monotonic() > deadline:
                raise CourseError(f"Slurm job {self.job_id} still waits ({job_state(self.job_id)}) after "
                                  f"{timeout:.0f} s; it was cancelled: ask for fewer resources or try later")
            time.sleep(min(next(pauses), max(0.0, deadline - time.monotonic()) + 0.01))

    def _check_ours(self, info: str) -> None:
        """A mistyped id may name a multi-day training run, or another user's job: never touch those."""
        import getpass

        name = (re.search(r"JobName=(.*?) UserId=", info) or [None, "?"])[1]  # a name may hold spaces
        user = (re.search(r"UserId=([^(\s]+)", info) or [None, "?"])[1]
        if user != getpass.getuser() or not is_engines_job_name(name):
            raise CourseError(f"Slurm job {self.job_id} is {name!r} of user {user}, not an engines job of yours "
                              f"(slurm/engines.sbatch, name {ENGINES_JOB_NAME}): not attached, left alone")
        self.ours = True

    def cancel_if_ours(self) -> None:
        """Cancel the job if Slurm still lists it as this user's engines job (the kernel-death watcher)."""
        try:
            self._check_ours(job_record(self.job_id))
        except CourseError:
            return
        self.stop_cluster_sync()

    def connection_file(self) -> Path:
        from IPython.paths import get_ipython_dir

        return Path(get_ipython_dir()) / "profile_default" / "security" / f"ipcontroller-{self.cluster_id}-client.json"

    def wait_connection_file(self, timeout: float) -> Path:
        path, deadline, pauses = self.connection_file(), time.monotonic() + timeout, backoff(0.2, 2.0)
        while not (path.is_file() and path.stat().st_size > 0):
            if time.monotonic() > deadline:
                raise CourseError(f"the controller of Slurm job {self.job_id} wrote no {path.name} within "
                                  f"{timeout:.0f} s: is your home directory shared with the compute nodes?")
            time.sleep(min(next(pauses), max(0.0, deadline - time.monotonic()) + 0.01))
        return path

    def signal_engines_sync(self, sig) -> None:
        if self.ours:
            cancel(self.job_id, signal=sig)

    def stop_cluster_sync(self) -> None:
        if self.ours:
            cancel(self.job_id)
        for suffix in ("client", "engine"):
            self.connection_file().with_name(f"ipcontroller-{self.cluster_id}-{suffix}.json").unlink(missing_ok=True)


def cancel_engines_job(job_id: str) -> None:
    """Cancel engines job `job_id` if Slurm still lists it as this user's (the kernel watcher's stop)."""
    SlurmJob(job_id).cancel_if_ours()
