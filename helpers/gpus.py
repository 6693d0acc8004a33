"""Which GPUs each worker uses, decided before TensorFlow starts.

A worker's replicas are the GPUs it really sees. Slurm hands GPUs to tasks in three common
ways, and each looks different from inside a task (measured on the course's local Slurm with
simulated GPUs, Slurm 22.05; `SLURM_GPUS_ON_NODE` is the job's GPUs on the node):

| request                                   | every task sees (`CUDA_VISIBLE_DEVICES`) | course does            |
|-------------------------------------------|------------------------------------------|------------------------|
| `--ntasks-per-node=4 --gpus-per-task=1`   | its own GPU (1 of 4 on the node)         | keeps it ("bound")     |
| `--ntasks-per-node=4 --gres=gpu:4`        | all 4, like its 3 neighbours             | narrows by local rank  |
| `--ntasks-per-node=1 --gres=gpu:4`        | all 4                                    | uses all 4             |

With `ConstrainDevices=yes` a bound task sees its GPU as `0` (seen on the local Slurm with
`--cgroup`); the rule below does not read
the numbers, only how many a task sees against how many the node gave the job. Multi-worker
all-reduce needs the same number of replicas on every worker, so tasks sharing a node's GPUs
each take `GPUs // (largest number of tasks on a node)`; GPUs left over stay idle, and the
plan says so. Two workers on one GPU break NCCL ("Duplicate GPU detected"), so that is an
error, never a silent share.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from .errors import CourseError

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"  # TensorFlow takes GPU memory as needed, not all at start
NO_DEVICES = ("", "-1", "NoDevFiles")  # what Slurm and users write for "no GPU"


@dataclass(frozen=True)
class GpuPlan:
    """The GPUs one worker uses: what goes into its CUDA_VISIBLE_DEVICES, and why."""

    gpus: tuple[str, ...]  # device ids as this process numbers them
    how: str  # cpu | bound (Slurm bound them to this task) | shared (narrowed by local rank) | all | hidden
    note: str = ""

    @property
    def replicas(self) -> int:
        return len(self.gpus)

    @property
    def visible_devices(self) -> str | None:
        """The CUDA_VISIBLE_DEVICES to set, or None to leave the environment as it is."""
        if self.how == "cpu":
            return None
        return ",".join(self.gpus)

    def env(self) -> dict[str, str]:
        """Variables a worker process needs for this plan (before TensorFlow starts)."""
        found = {} if self.visible_devices is None else {VISIBLE_ENV: self.visible_devices}
        if self.gpus:
            found[GROWTH_ENV] = "true"
        return found

    def describe(self) -> str:
        if not self.gpus:
            return "CPU" + (f" ({self.note})" if self.note else "")
        text = f"GPU {','.join(self.gpus)} ({self.how})"
        return text + (f"; {self.note}" if self.note else "")


def gpu_count_without_tf() -> int:
    """GPUs visible to this process, found without initialising TensorFlow."""
    return len(visible_gpus())


def visible_gpus(environ: dict | None = None) -> list[str]:
    """The GPU ids this process may use, without starting TensorFlow.

    `CUDA_VISIBLE_DEVICES` when set (Slurm sets it for jobs with GPUs), then
    `GPU_DEVICE_ORDINAL`, then the GPUs `nvidia-smi -L` lists (a node whose GPUs Slurm does not
    manage).
    """
    env = os.environ if environ is None else environ
    for name in (VISIBLE_ENV, "GPU_DEVICE_ORDINAL"):
        if name in env:
            value = env[name].strip()
            if value in NO_DEVICES:
                return []
            return [item.strip() for item in value.split(",") if item.strip() not in NO_DEVICES]
    return [str(i) for i in range(_nvidia_smi_count())]


def nvidia_smi(*args: str) -> str:
    """What `nvidia-smi ARGS` prints, or "" where there is none (CPU nodes) or it fails."""
    if shutil.which("nvidia-smi") is None:
        return ""
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _nvidia_smi_count() -> int:
    return sum(1 for line in nvidia_smi("-L").splitlines() if line.startswith("GPU "))


def _node_gpu_count(env: dict, visible: list[str]) -> int:
    """GPUs the job has on this node (Slurm's count), or what this task sees outside Slurm."""
    on_node = env.get("SLURM_GPUS_ON_NODE", "")
    if on_node.isdigit():
        return int(on_node)
    job_gpus = env.get("SLURM_JOB_GPUS", "")
    return len(job_gpus.split(",")) if job_gpus else len(visible)


def plan_for_task(tasks_on_node: int, local_rank: int, max_tasks_per_node: int,
                  environ: dict | None = None) -> GpuPlan:
    """The GPUs of one task of a Slurm step (see the table in the module docstring)."""
    env = os.environ if environ is None else environ
    visible = visible_gpus(env)
    if not visible:
        return GpuPlan((), "cpu")
    on_node = _node_gpu_count(env, visible)
    if len(visible) < on_node:  # Slurm gave this task its own GPUs (--gpus-per-task, --gpu-bind)
        if len(visible) * tasks_on_node > on_node:
            raise CourseError(f"{tasks_on_node} tasks on this node are bound to {on_node} GPU(s), "
                              f"{len(visible)} each: some tasks share a GPU, which breaks NCCL; ask "
                              "for one GPU per task (--gpus-per-task=1) or fewer tasks per node")
        return GpuPlan(tuple(visible), "bound")
    if len(visible) < max_tasks_per_node:
        raise CourseError(f"{max_tasks_per_node} tasks per node share {len(visible)} GPU(s): every worker "
                          f"needs a GPU of its own; ask for --ntasks-per-node={len(visible)} or "
                          f"--gpus-per-task=1 (or more GPUs per node)")
    mine, idle = _equal_share(visible, local_rank, max_tasks_per_node, tasks_on_node)
    note = (f"{idle} of {len(visible)} GPUs on this node stay idle: every worker needs the same number "
            f"of GPUs ({len(mine)})" if idle else "")
    return GpuPlan(mine, "all" if tasks_on_node == 1 and not idle else "shared", note)


def _equal_share(visible: list[str], index: int, divisor: int, holders: int) -> tuple[tuple[str, ...], int]:
    """Worker `index`'s `len(visible) // divisor` GPUs, and how many of the `holders`' GPUs stay idle."""
    each = len(visible) // divisor
    return tuple(visible[index * each:(index + 1) * each]), len(visible) - each * holders


def plan_for_local_worker(workers_on_host: int, index: int, environ: dict | None = None) -> GpuPlan:
    """The GPUs of local worker `index` of `workers_on_host` (engines or launched processes).

    At least as many GPUs as workers: an equal share each. Fewer (but some): the workers run on
    CPU, since two workers on one GPU break NCCL; the note says so.
    """
    visible = visible_gpus(environ)
    if not visible:
        return GpuPlan((), "cpu")
    if len(visible) < workers_on_host:
        return GpuPlan((), "hidden", f"{workers_on_host} workers but {len(visible)} GPU(s) on this host: "
                                     "the workers run on CPU (two workers on one GPU break NCCL); "
                                     "start one worker per GPU")
    mine, idle = _equal_share(visible, index, workers_on_host, workers_on_host)
    return GpuPlan(mine, "shared" if workers_on_host > 1 else "all",
                   f"{idle} GPU(s) stay idle" if idle else "")


def apply(plan: GpuPlan) -> GpuPlan:
    """Put the plan into this process's environment; it must come before TensorFlow starts."""
    from .host import tensorflow_initialised

    wanted = plan.env()
    changes = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
    if changes.get(VISIBLE_ENV) is not None and tensorflow_initialised():
        raise CourseError(f"TensorFlow already started in this process, so it cannot be given "
                          f"{VISIBLE_ENV}={wanted[VISIBLE_ENV]!r}: resolve the cluster (or create the "
                          "strategy) before any TensorFlow op; restart the kernel or engine")
    os.environ.update(changes)
    return plan
