"""The environment and options of a Slurm job a lesson submits (a clean start, the class's GPUs and node sharing), and following it to its end.

A learner's JupyterHub server (or an `salloc` shell) is itself a Slurm job. `sbatch` from it
passes the whole environment on (`--export=ALL`, Slurm's default), and Slurm reads the
server's `SLURM_*` variables (its GPUs per task, memory, partition, node list...) as the
child's own request: the child is refused or sized like the server. `job_environment` is
the environment without them; `job_options` the options every job the course submits adds:
`--exclusive=user` where the class gives each learner a node, and the GPUs a task should have.
`follow_job` watches a submitted job until it has ended (lesson 11, on the course's one polling
schedule), and sends it the warning `--signal=USR1@...` would send when the lesson asks.

Settings (each read by a small function, each bad value one line):
    COURSE_CLASS_LAYOUT        node (default): a node per learner, jobs `--exclusive=user`;
                               gpu: a GPU per learner, learners share nodes on purpose
    COURSE_JOB_GPUS_PER_TASK   a whole number, or auto (default): 1 when the job this runs in
                               (the learner's server) has GPUs, else 0 (no GPU option)
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Callable

from ..errors import CourseError
from ..settings import text
from .queue import POLL_FIRST_S, wait_for_job

LAYOUT_ENV = "COURSE_CLASS_LAYOUT"
LAYOUTS = ("node", "gpu")
GPUS_ENV = "COURSE_JOB_GPUS_PER_TASK"

# Set by Slurm for the job this process runs in; read back by sbatch/srun as the new job's
# request (SLURM_* and SRUN_*), or by CUDA/ROCm/oneAPI as the GPUs to use (the server's GPUs,
# on another node than the child's).
_INHERITED_PREFIXES = ("SLURM_", "SLURMD_", "SRUN_")
_INHERITED_GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
_KEPT = ("SLURM_CONF",)  # where the cluster's configuration is: the child needs it too


def class_layout(env: dict | None = None) -> str:
    """`node` (a node per learner, the default) or `gpu` (a GPU per learner, nodes shared)."""
    raw = text(LAYOUT_ENV, env).lower() or "node"
    if raw not in LAYOUTS:
        raise CourseError(f"{LAYOUT_ENV}={raw!r} is not a class layout: use node (a node per learner) "
                          "or gpu (a GPU per learner, nodes shared)")
    return raw


def gpus_per_task(env: dict | None = None) -> int:
    """GPUs each task of a submitted job asks for: `COURSE_JOB_GPUS_PER_TASK`, or with `auto`
    (the default) 1 when the job this runs in has GPUs, else 0."""
    env = os.environ if env is None else env
    raw = text(GPUS_ENV, env).lower() or "auto"
    if raw == "auto":
        return 1 if this_job_has_gpus(env) else 0
    if not raw.isdigit():
        raise CourseError(f"{GPUS_ENV}={raw!r} is not a number of GPUs: use a whole number (0: no GPU) or auto "
                          "(1 when your server's job has GPUs)")
    return int(raw)


def this_job_has_gpus(env: dict | None = None) -> bool:
    """Whether the Slurm job this process runs in was given GPUs (what Slurm set for it)."""
    env = os.environ if env is None else env
    on_node = env.get("SLURM_GPUS_ON_NODE", "").strip()
    if on_node.isdigit() and int(on_node) > 0:
        return True
    return any(env.get(name, "").strip() not in ("", "NoDevFiles") for name in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS"))


def exclusive_options(env: dict | None = None) -> list[str]:
    """`--exclusive=user` in the node layout (no other user's job beside yours), nothing in the gpu layout."""
    return ["--exclusive=user"] if class_layout(env) == "node" else []


def job_options(env: dict | None = None) -> list[str]:
    """The options every job the course submits adds on sbatch's command line.

    `--exclusive=user` in the node layout: no other user's job on the job's nodes, where
    TensorFlow's gRPC ports accept anyone who can reach them. In the gpu layout learners share
    nodes on purpose: `--oversubscribe` undoes the take-home scripts' `#SBATCH --exclusive=user`
    (command-line options win over #SBATCH lines; on a partition with OverSubscribe=NO, the
    default, it asks for nothing more). Then `--gpus-per-task=N` when tasks should have GPUs."""
    env = os.environ if env is None else env
    options = exclusive_options(env) or ["--oversubscribe"]
    gpus = gpus_per_task(env)
    return options + ([f"--gpus-per-task={gpus}"] if gpus else [])


def job_environment(extra: dict, env: dict | None = None) -> dict:
    """The environment for `sbatch` from inside a job: this one without what Slurm set for the job
    it runs in (`SLURM_*` but SLURM_CONF, `SRUN_*`, the GPUs it was given), with `extra` on top.

    The class's deliberate `SBATCH_*`/`SALLOC_*` settings (the reservation the hub sets) stay."""
    env = os.environ if env is None else env
    clean = {name: value for name, value in env.items()
             if name in _KEPT or not (name.startswith(_INHERITED_PREFIXES) or name in _INHERITED_GPU_VARIABLES)}
    return {**clean, **{name: str(value) for name, value in extra.items()}}


def explain(env: dict | None = None) -> str:
    """One line on who can reach this job's nodes, for a lesson to print."""
    if class_layout(env) == "node":
        return ("class layout node: your jobs run --exclusive=user, so no other user's job runs on their nodes "
                "(their TensorFlow ports still answer whoever reaches the node over the network)")
    return ("class layout gpu: you share nodes with classmates, whose jobs can connect to your TensorFlow workers' "
            "ports on the same node (gRPC, no authentication): train nothing private in this class")


def follow_job(job: str, log_file: Path, label: str, warn_when: Callable[[str], bool] | None = None,
               deadline_s: float = 900.0, first_s: float = POLL_FIRST_S) -> str:
    """Watch `job` until it has ended, printing each new state; return its log.

    The queue is asked about this job alone, on the course's one schedule (`queue.wait_for_job`:
    fast at first, then every few seconds). When `warn_when(log text)` first holds (the log is read
    every half second), send the job SIGUSR1 once (what `--signal=USR1@120` sends before the time
    limit). A requeued job stays in the queue, pending, so a requeue is not taken for the end. A
    job still there after `deadline_s` is cancelled, and that is an error, never a wait without end."""
    began, warned = time.monotonic(), []

    def say(what: str) -> None:
        print(f"{time.monotonic() - began:6.1f} s  {label:<22} job {job}: {what}", flush=True)

    def warn_once() -> None:
        if warn_when is not None and not warned and log_file.exists() and warn_when(log_file.read_text()):
            subprocess.run(["scancel", "--signal=USR1", job], check=True, timeout=60)
            say("sent SIGUSR1")
            warned.append(True)

    wait_for_job(job, deadline_s, label, on_state=say, each_tick=warn_once if warn_when else None, first_s=first_s)
    if not log_file.exists():
        raise CourseError(f"job {job} ({label}) ended without writing its log {log_file.name}")
    return log_file.read_text()
