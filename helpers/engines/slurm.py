"""How ipyparallel engines are launched through Slurm: batch job or `srun` step, controller address.

Two ways, one result: engines are the tasks of one Slurm job step, one engine per task, so
every engine sees its own `SLURM_PROCID` and the step's node list (what `SlurmClusterResolver`
needs).
- From outside an allocation (a login node, a JupyterHub server outside Slurm): one `sbatch`
  job whose `srun` starts the engines (ipyparallel's Slurm launcher, with our template).
- Inside an allocation (`salloc`, or a JupyterHub server that is itself a Slurm job): `srun`
  starts the engines in the allocation we already have (`SrunEngineSetLauncher`).
The controller runs where the notebook runs and listens on the address the compute nodes reach
it by, never on every interface.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ipyparallel.cluster.launcher import EngineLauncher, MPILauncher
from traitlets import List

from ..errors import CourseError
from ..settings import text, value
from ..slurm_jobs import exclusive_options

CONTROLLER_IP_ENV = "COURSE_CONTROLLER_IP"
ENGINES_ENV = "COURSE_ENGINES"  # local (default) or slurm: where notebooks start their engines
ENGINES_JOB_NAME = "tf-course-engines"  # slurm/engines.sbatch's --job-name: attach() touches no other job


def engines_job_name(cluster_id: str) -> str:
    """The Slurm name of a cluster's engines job or step: the course's own, never ipyparallel's
    default `ipengine-*`, which a learner's research engines carry too (`class end` cancels by name)."""
    return f"{ENGINES_JOB_NAME}-{cluster_id}"


def is_engines_job_name(name: str) -> bool:
    """Exactly the names the course gives engines: slurm/engines.sbatch's, or `engines_job_name`'s."""
    return re.fullmatch(re.escape(ENGINES_JOB_NAME) + r"(-[A-Za-z0-9_-]*)?", name) is not None


def want_slurm(slurm: bool | None = None) -> bool:
    """Whether engines go through Slurm: the argument if given, else `COURSE_ENGINES`."""
    if slurm is not None:
        return bool(slurm)
    choice = text(ENGINES_ENV).lower() or "local"
    if choice not in ("local", "slurm"):
        raise CourseError(f"{ENGINES_ENV}={choice!r} is not understood: use local or slurm")
    return choice == "slurm"


def in_allocation() -> bool:
    """True inside a Slurm allocation but not inside a job step (where `srun` can start a step)."""
    return "SLURM_JOB_ID" in os.environ and "SLURM_STEP_ID" not in os.environ


@dataclass
class SlurmRequest:
    """What the engines' job asks Slurm for; None leaves it to the site's defaults."""

    tasks_per_node: int | None = None
    nodes: int | None = None
    time: str | None = "01:00:00"
    partition: str | None = None
    account: str | None = None
    cpus_per_task: int | None = None
    gpus_per_task: int | None = None

    INTEGER_FIELDS = ("tasks_per_node", "nodes", "cpus_per_task", "gpus_per_task")

    @classmethod
    def from_env(cls) -> "SlurmRequest":
        """A request from `COURSE_SLURM_<FIELD>` variables (e.g. COURSE_SLURM_PARTITION=gpu).

        A centre or trainer sets these once (in the JupyterHub environment or a shell profile)
        and every notebook's engines job asks for the same resources, with no edits.
        """
        values = {}
        for name in cls.__dataclass_fields__:
            raw = value(f"COURSE_SLURM_{name.upper()}")
            if raw is None or raw == "":
                continue
            if name in cls.INTEGER_FIELDS:
                if not raw.isdigit() or int(raw) < 1:
                    raise CourseError(f"COURSE_SLURM_{name.upper()}={raw!r} must be a whole number >= 1")
                values[name] = int(raw)
            else:
                values[name] = checked_word(f"COURSE_SLURM_{name.upper()}", raw)
        return cls(**values)

    def spread(self, n: int) -> "SlurmRequest":
        """This request with `n` engines spread the way the partition's nodes say.

        Asked for tasks only, Slurm packs engines onto as few nodes as fit (2 and 3 engines all
        landed on node1 of the 2-node local Slurm). Unless the request (or COURSE_SLURM_*)
        already places them: on GPU nodes one engine per GPU (`--gpus-per-task=1`, as many per
        node as it has GPUs), on CPU nodes one engine per node while there are nodes.
        """
        from dataclasses import replace

        if self.tasks_per_node is not None or self.nodes is not None:
            return self
        nodes, gpus = partition_shape(self.partition)
        if self.gpus_per_task is not None or gpus:
            per_task = self.gpus_per_task or 1
            per_node = max(1, min(n, gpus // per_task)) if gpus else 1
            return replace(self, gpus_per_task=per_task, tasks_per_node=per_node, nodes=-(-n // per_node))
        use = max(1, min(n, nodes))
        return replace(self, nodes=use, tasks_per_node=-(-n // use))

    def spread_any(self) -> tuple["SlurmRequest", list[str]]:
        """`spread` for a batch script written before `n` is known (the ipcluster profile's): on
        GPU nodes `--gpus-per-task` alone (Slurm then fills a node's GPUs before the next node;
        adding `--ntasks-per-node=G` was refused for fewer than G tasks); on CPU nodes
        `--spread-job` spreads the tasks over as many nodes as there are."""
        from dataclasses import replace

        if self.tasks_per_node is not None or self.nodes is not None:
            return self, []
        nodes, gpus = partition_shape(self.partition)
        if self.gpus_per_task is not None or gpus:
            per_task = self.gpus_per_task or 1
            return replace(self, gpus_per_task=per_task), []
        return self, ["#SBATCH --spread-job"]

    def sbatch_lines(self) -> list[str]:
        for name in ("time", "partition", "account"):
            if getattr(self, name):
                checked_word(name, str(getattr(self, name)))
        pairs = [("nodes", self.nodes), ("ntasks-per-node", self.tasks_per_node), ("time", self.time),
                 ("partition", self.partition),
                 ("account", self.account), ("cpus-per-task", self.cpus_per_task),
                 ("gpus-per-task", self.gpus_per_task)]
        return [f"#SBATCH --{key}={value}" for key, value in pairs if value not in (None, "")]


def checked_word(name: str, value: str) -> str:
    """A partition, account or time as Slurm writes them; anything else (a newline would add a
    line to the batch script, braces break its template) is refused."""
    if not re.fullmatch(r"[A-Za-z0-9_.,:+-]{1,64}", value):
        raise CourseError(f"{name}={value!r} is not a Slurm name or time: use letters, digits and _ . , : + - "
                          "only (e.g. gpu, myproject, 01:00:00)")
    return value


def batch_template(request: SlurmRequest, extra: list[str] | tuple = ()) -> str:
    """The engines' batch script, with ipyparallel's placeholders ({n}, {program_and_args}, ...).

    `--ntasks={n}` is spelled out so ipyparallel adds no #SBATCH lines of its own, and
    SLURM_EXPORT_ENV is unset so that `srun` passes the controller's connection info on.
    `--exclusive=user` where the class gives each learner a node (`helpers.slurm_jobs`): the
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


def _run(args: list[str]) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise CourseError(f"`{args[0]}` not found: Slurm's commands must be on PATH to start "
                          "engines through Slurm (or start local engines)") from None
    except subprocess.TimeoutExpired:
        raise CourseError(f"`{' '.join(args)}` did not answer within 30 s: is slurmctld reachable? "
                          "(check SLURM_CONF and `sinfo`)") from None
    if done.returncode != 0:
        raise CourseError(f"`{' '.join(args)}` failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return done.stdout


def node_address(node: str) -> str:
    """The IP address of a compute node, as Slurm knows it (NodeAddr) and resolved."""
    match = re.search(r"NodeAddr=(\S+)", _run(["scontrol", "show", "node", "-o", node]))
    address = match.group(1) if match else node
    try:
        return socket.gethostbyname(address)
    except OSError:
        raise CourseError(f"cannot resolve the address {address!r} of node {node}: set "
                          f"{CONTROLLER_IP_ENV} to this host's address on the cluster network") from None


def controller_ip(partition: str | None = None) -> str:
    """This host's address on the network the compute nodes use.

    `COURSE_CONTROLLER_IP` wins; otherwise the local address the kernel would use to reach the
    partition's first node (a UDP socket's route lookup: no packet is sent).
    """
    if value(CONTROLLER_IP_ENV):
        return checked_controller_ip(value(CONTROLLER_IP_ENV))
    args = ["sinfo", "-h", "-N", "-o", "%N"] + (["-p", partition] if partition else [])
    nodes = _run(args).split()
    if not nodes:
        raise CourseError("Slurm reports no nodes" + (f" in partition {partition}: check COURSE_SLURM_PARTITION "
                                                      "(`sinfo -s` lists the partitions)" if partition else ""))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((node_address(nodes[0]), 9))
        return probe.getsockname()[0]


def checked_controller_ip(address: str) -> str:
    """An address the controller may listen on: one interface, never all of them (every user on
    every network the host is on could then connect, and read the engines' output)."""
    if address.strip() in ("*", "0.0.0.0", "::", "[::]", ""):
        raise CourseError(f"{CONTROLLER_IP_ENV}={address!r} would make the controller listen on every interface: "
                          "give this host's address on the compute nodes' network (e.g. `hostname -I`)")
    return address.strip()


def partition_shape(partition: str | None = None) -> tuple[int, int]:
    """(usable nodes, GPUs per node) of a partition (the default one when None), from sinfo."""
    rows = [line.split() for line in _run(["sinfo", "-h", "-o", "%P %D %G %t"]).splitlines()]
    chosen = [r for r in rows if len(r) == 4 and (r[0].rstrip("*") == partition if partition else r[0].endswith("*"))]
    if not chosen:
        raise CourseError("Slurm reports no nodes" + (f" in partition {partition}: check COURSE_SLURM_PARTITION "
                                                      "(`sinfo -s` lists the partitions)" if partition else
                                                      " in a default partition: set COURSE_SLURM_PARTITION"))
    usable = sum(int(r[1]) for r in chosen if not r[3].rstrip("*~#$@").startswith(("down", "drain", "fail")))
    gpus = [int(m.group(1)) for r in chosen for m in [re.search(r"gpu(?::[^:,(]+)?:(\d+)", r[2])] if m]
    return usable, min(gpus) if gpus else 0


def backoff(first: float = 0.2, limit: float = 5.0):
    """Pauses between polls: quick at first (a job that starts at once), then rarer, so that a
    class of learners waiting for the queue does not hammer slurmctld or the shared file system."""
    pause = first
    while True:
        yield pause
        pause = min(limit, pause * 1.5)


def job_state(job_id: str) -> str:
    """Slurm's state of a job and the reason it waits, for error messages."""
    try:
        out = _run(["squeue", "-h", "-j", job_id, "-o", "%T %R"]).strip()
    except CourseError as exc:
        return str(exc)
    return out or "no longer in the queue"


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


def require_slurm() -> None:
    """A clear error when Slurm was asked for but cannot be reached."""
    _run(["sinfo", "-h", "-o", "%P"])


def slurm_reachable() -> bool:
    """Whether a Slurm cluster answers here (its commands on PATH, its controller reachable)."""
    try:
        require_slurm()
    except CourseError:
        return False
    return True


def step_ids(job_id: str, name: str) -> list[str]:
    """The ids (`job.step`) of the running steps of `job_id` called `name`."""
    out = _run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i %j"])
    return [row.split()[0] for row in out.splitlines() if row.split()[1:] == [name]]


OVERLAP_ENV = "COURSE_SLURM_OVERLAP"  # 1: the engines' srun step shares CPUs with steps running already


def busy_steps(job_id: str) -> tuple[int, list[str]]:
    """CPUs held by the running steps of `job_id` (not its batch, extern or interactive step), and
    `id (name)` of each. srun waits silently, for ever, for CPUs such steps hold."""
    try:
        out = _run(["scontrol", "show", "step", "-o", job_id])
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


def check_cpus_free(n: int, cpus_per_task: int = 1) -> None:
    """Inside an allocation, say at once when running steps hold the CPUs `n` engines need."""
    job = os.environ.get("SLURM_JOB_ID", "")
    held, named = busy_steps(job)
    if not named:
        return
    total = re.search(r"NumCPUs=(\d+)", _run(["scontrol", "show", "job", "-o", job]))
    if total and int(total.group(1)) - held >= n * cpus_per_task:
        return
    raise CourseError(
        f"the engines' srun step could not start: {held} of the {total.group(1) if total else '?'} CPUs of job {job} "
        f"are held by {', '.join(named)} (ipcmagic's engines, or a forgotten step): stop it (`%ipcluster stop`, "
        f"or `scancel {named[0].split()[0]}`), or start the engines with `srun --overlap` where the site allows it "
        f"({OVERLAP_ENV}=1); to run the lesson on ipcmagic's engines instead, `%env COURSE_CLUSTER=default` first")


class SrunEngineSetLauncher(MPILauncher, EngineLauncher):
    """Engines as one `srun` step of the allocation this process runs in.

    ipyparallel's MPI launcher with `srun` in place of `mpiexec` and without `--mpi`. Stopping
    kills the step's tasks with `scancel` (srun cannot pass on a SIGKILL, and engines holding
    TensorFlow ignore SIGTERM), then srun itself.
    """

    # the name ipyparallel records in the cluster file and imports back when a later process
    # (`cluster stop`, COURSE_CLUSTER) loads the cluster: its default, "module:Class", does not import
    entrypoint_name = "helpers.engines.slurm.SrunEngineSetLauncher"
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
                subprocess.run(["scancel", "--signal=KILL", step], capture_output=True, timeout=30)
            deadline = time.monotonic() + 15  # gone from squeue: its CPUs are free for the next start
            while step_ids(job, self.step_name) and time.monotonic() < deadline:
                time.sleep(0.2)
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
                info = _run(["scontrol", "show", "job", "-o", self.job_id])
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

        name = (re.search(r"JobName=(\S+)", info) or [None, "?"])[1]
        user = (re.search(r"UserId=([^(\s]+)", info) or [None, "?"])[1]
        if user != getpass.getuser() or not name.startswith(ENGINES_JOB_NAME):
            raise CourseError(f"Slurm job {self.job_id} is {name!r} of user {user}, not an engines job of yours "
                              f"(slurm/engines.sbatch, name {ENGINES_JOB_NAME}): not attached, left alone")
        self.ours = True

    def cancel_if_ours(self) -> None:
        """Cancel the job if Slurm still lists it as this user's engines job (the kernel-death watcher)."""
        try:
            self._check_ours(_run(["scontrol", "show", "job", "-o", self.job_id]))
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
            subprocess.run(["scancel", f"--signal={int(sig)}", self.job_id], capture_output=True, timeout=30)

    def stop_cluster_sync(self) -> None:
        if self.ours:
            subprocess.run(["scancel", self.job_id], capture_output=True, timeout=30)
        for suffix in ("client", "engine"):
            self.connection_file().with_name(f"ipcontroller-{self.cluster_id}-{suffix}.json").unlink(missing_ok=True)


def cancel_engines_job(job_id: str) -> None:
    """Cancel engines job `job_id` if Slurm still lists it as this user's (the kernel watcher's stop)."""
    SlurmJob(job_id).cancel_if_ours()
