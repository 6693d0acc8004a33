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
error, never a silent share, in the default class layout (`COURSE_CLASS_LAYOUT=node`: a node per
learner).

In the GPU-per-learner layout (`COURSE_CLASS_LAYOUT=gpu`) a learner has one GPU for the kernel
and its engines or workers: when a process has fewer GPUs than workers, they share them, each
process with a memory limit (90 % of the GPU's memory, from nvidia-smi, divided by the processes:
the workers and the learner's kernel; the workers share what the kernel's own share leaves), set
as one logical device per GPU where TensorFlow is imported (`host.limit_gpu_memory`, from
`COURSE_GPU_MEMORY_MIB`; a take-home program applies the same variable itself), and the strategy
uses RING collectives (NCCL cannot run two ranks on one GPU). Every process that may use a GPU is
also started with `TF_FORCE_GPU_ALLOW_GROWTH=true` (read by TensorFlow's allocator, not by its
Python API), so one that ignores its share takes memory as it needs it, never all of it at start.
None of this has run on a real GPU: the decisions are tested, TensorFlow's use of them is not.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, replace

from .errors import CourseError
from .host import GPU_MEMORY_ENV, tensorflow_is_cpu_build
from .settings import text
from .slurm.submit import class_layout

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"  # TensorFlow takes GPU memory as needed, not all at start
NO_DEVICES = ("", "-1", "NoDevFiles")  # what Slurm and users write for "no GPU"
SHARED_FRACTION = 0.9  # of a shared GPU's memory, divided among its processes (the rest: CUDA's own)
DEFAULT_GPU_MIB = 8192  # when nvidia-smi does not say (a limit too small is safer than none)
KERNEL_MEMORY_ENV = "COURSE_KERNEL_GPU_MIB"  # the learner's kernel's share, inherited by what it starts


@dataclass(frozen=True)
class GpuPlan:
    """The GPUs one worker uses: what goes into its CUDA_VISIBLE_DEVICES, and why."""

    gpus: tuple[str, ...]  # device ids as this process numbers them
    how: str  # cpu | bound (Slurm bound them to this task) | shared (narrowed by local rank) | all | hidden
    #          | memory (the gpu layout: processes share the GPUs, each within memory_mib)
    note: str = ""
    memory_mib: int | None = None  # this process's GPU memory limit (shared GPUs); None: grow as needed
    kernel: bool = False  # the learner's kernel: what it starts shares out the rest of the GPU

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
        if self.gpus:  # growth on in every plan: a program that never reads its share still takes
            found[GROWTH_ENV] = "true"  # memory as it needs it, never a classmate's whole GPU at start
        if self.gpus and self.memory_mib:  # the share, applied where TensorFlow is imported
            found[GPU_MEMORY_ENV] = str(self.memory_mib)
            if self.kernel:
                found[KERNEL_MEMORY_ENV] = str(self.memory_mib)
        return found

    def describe(self) -> str:
        if not self.gpus:
            return "CPU" + (f" ({self.note})" if self.note else "")
        text = f"GPU {','.join(self.gpus)} ({self.how}" + (f", {self.memory_mib} MiB" if self.memory_mib else "") + ")"
        return text + (f"; {self.note}" if self.note else "")


def gpu_count_without_tf() -> int:
    """GPUs visible to this process, found without initialising TensorFlow."""
    return len(visible_gpus())


def usable_gpu_count() -> int:
    """GPUs this process's TensorFlow can use, found without starting it: the visible ones, none
    where the installed TensorFlow is the CPU wheel (`host.tensorflow_is_cpu_build`)."""
    return 0 if tensorflow_is_cpu_build() else gpu_count_without_tf()


def visible_gpus(environ: dict | None = None) -> list[str]:
    """The GPU ids this process may use, without starting TensorFlow.

    `CUDA_VISIBLE_DEVICES` when set (Slurm sets it for jobs with GPUs), cut at its first "", -1 or
    NoDevFiles entry (CUDA also stops at an index out of range or text naming no GPU: not checked); then
    `GPU_DEVICE_ORDINAL`, read the same way (CUDA reads only `CUDA_VISIBLE_DEVICES`;
    `GPU_DEVICE_ORDINAL` is ROCm's and OpenCL's, which Slurm sets beside it); then the GPUs
    `nvidia-smi -L` lists (a node whose GPUs Slurm does not manage).
    """
    env = os.environ if environ is None else environ
    for name in (VISIBLE_ENV, "GPU_DEVICE_ORDINAL"):
        if name in env:
            # CUDA reads the list up to its first entry naming no device: "-1,0" names none
            return list(itertools.takewhile(lambda item: item not in NO_DEVICES,
                                            (item.strip() for item in env[name].split(","))))
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


# MiB of a MIG slice by the memory its profile's name gives (1g.5gb: 5): the GiB `nvidia-smi mig -lgip`
# lists for A100 40GB/80GB and H100 80GB (4.75, 9.75, 19.62, 39.50, 79.25), rounded down to MiB
MIG_SLICE_MIB = {5: 4864, 10: 9984, 20: 20090, 40: 40448, 80: 81152}
MIG_SLICE_UNLISTED = 0.95  # other sizes: the listed slices hold 95-99 % of their name, 95 % is counted
MIG_PROFILE = re.compile(r"^(?:\d+c\.)?(\d+)g\.(\d+)gb")
MIG_DEVICE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+\d+:\s+\(UUID:\s*(MIG-[^)\s]+)\)", re.M)


def mig_slice_mib(profile: str) -> int:
    """Memory of a MIG slice from its profile name (`1g.5gb`, `3g.40gb`, `1c.3g.20gb`, `1g.10gb+me`)."""
    match = MIG_PROFILE.match(profile)
    if not match:
        raise CourseError(f"{profile!r} is not a MIG profile name such as 1g.5gb or 3g.40gb")
    gb = int(match.group(2))
    return MIG_SLICE_MIB.get(gb, int(gb * 1024 * MIG_SLICE_UNLISTED))


def gpu_memory_mib() -> int | None:
    """Memory of this process's first GPU in MiB, from nvidia-smi (None where it does not say).

    Under MIG, `--query-gpu=memory.total` reports the whole GPU, not the slice a process runs on:
    the slices come from `nvidia-smi -L` (`  MIG 3g.20gb Device 0: (UUID: MIG-...)` under their GPU),
    the one `CUDA_VISIBLE_DEVICES` names, else the smallest listed (a limit too small is safer)."""
    slices = MIG_DEVICE.findall(nvidia_smi("-L"))
    if slices:
        named = set(visible_gpus())  # MIG UUIDs where CUDA_VISIBLE_DEVICES names them
        mine = [profile for profile, uuid in slices if uuid in named]
        return mig_slice_mib(mine[0]) if mine else min(mig_slice_mib(profile) for profile, _ in slices)
    out = nvidia_smi("--query-gpu=memory.total", "--format=csv,noheader,nounits").split()
    return int(out[0]) if out and out[0].isdigit() else None


def memory_share_mib(total_mib: int | None, processes: int) -> int:
    """Each process's memory limit on a GPU shared by `processes`: 90 % of it shared out."""
    if processes < 1:
        raise CourseError(f"cannot share a GPU among {processes} processes: ask for 1 or more")
    return max(256, int((total_mib or DEFAULT_GPU_MIB) * SHARED_FRACTION) // processes)


def _memory_plan(visible: list[str], workers: int, what: str, total_mib: int | None, env: dict) -> GpuPlan:
    """A worker's share of the GPU(s) it shares with `workers - 1` others and the learner's kernel:
    what the kernel left (its share is in the environment it handed down), else one share of
    `workers + 1` (a kernel may use the GPU, growing)."""
    kernel = text(KERNEL_MEMORY_ENV, env)
    if kernel.isdigit():
        left = int((total_mib or DEFAULT_GPU_MIB) * SHARED_FRACTION) - int(kernel)
        share = max(256, left // workers)
    else:
        share = memory_share_mib(total_mib, workers + 1)
    return GpuPlan(tuple(visible), "memory", f"{what}: {workers} workers and the kernel share GPU "
                                             f"{','.join(visible)}, {share} MiB each, RING collectives "
                                             "(COURSE_CLASS_LAYOUT=gpu)", share)


def learner_processes(environ: dict | None = None) -> int:
    """Processes on a learner's GPU in the gpu layout: the kernel and one per task of its job."""
    env = os.environ if environ is None else environ
    tasks = env.get("SLURM_NTASKS", "")
    return 1 + (int(tasks) if tasks.isdigit() else 2)  # outside Slurm: the lessons' 2 workers


def plan_for_kernel(environ: dict | None = None, total_mib: int | None = None) -> GpuPlan:
    """The GPUs of the learner's kernel. Node layout: all it sees, memory as needed. Gpu layout:
    its share of the learner's GPU beside the engines or workers it starts (`learner_processes`)."""
    env = os.environ if environ is None else environ
    visible = visible_gpus(env)
    if not visible:
        return GpuPlan((), "cpu")
    if class_layout(env) == "gpu":
        share = memory_share_mib(total_mib or gpu_memory_mib(), learner_processes(env))
        return GpuPlan(tuple(visible), "memory", f"the kernel: {share} MiB of GPU {','.join(visible)}, the rest "
                                                 "for its engines and workers (COURSE_CLASS_LAYOUT=gpu)", share, True)
    return GpuPlan(tuple(visible), "all")


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
    per_task = env.get("SLURM_GPUS_PER_TASK", "")
    # Slurm gave this task its own GPUs (--gpus-per-task, --gpu-bind): it sees fewer than the node's,
    # or, alone on its node (3 tasks on 2 nodes), exactly the GPUs per task it asked for
    if len(visible) < on_node or (per_task.isdigit() and int(per_task) == len(visible)):
        if len(visible) * tasks_on_node > on_node:
            raise CourseError(f"{tasks_on_node} tasks on this node are bound to {on_node} GPU(s), "
                              f"{len(visible)} each: some tasks share a GPU, which breaks NCCL; ask "
                              "for one GPU per task (--gpus-per-task=1) or fewer tasks per node")
        return GpuPlan(tuple(visible), "bound")
    if len(visible) < max_tasks_per_node and class_layout(env) == "gpu":
        # the learner's engines on the learner's GPU(s), beside the kernel of the same job
        return _memory_plan(visible, tasks_on_node, f"task {local_rank}", gpu_memory_mib(), env)
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
    CPU, since two workers on one GPU break NCCL; the note says so. In the gpu class layout they
    share the GPUs instead, with the kernel, each within a memory limit (RING collectives).
    """
    env = os.environ if environ is None else environ
    visible = visible_gpus(env)
    if not visible:
        return GpuPlan((), "cpu")
    if len(visible) < workers_on_host and class_layout(env) == "gpu":
        return _memory_plan(visible, workers_on_host, f"worker {index}", gpu_memory_mib(), env)
    if len(visible) < workers_on_host:
        return GpuPlan((), "hidden", f"{workers_on_host} workers but {len(visible)} GPU(s) on this host: "
                                     "the workers run on CPU (two workers on one GPU break NCCL); "
                                     "start one worker per GPU")
    mine, idle = _equal_share(visible, index, workers_on_host, workers_on_host)
    return GpuPlan(mine, "shared" if workers_on_host > 1 else "all",
                   f"{idle} GPU(s) stay idle" if idle else "")


def at_most(plan: GpuPlan, most: int | None) -> GpuPlan:
    """`plan` with its first `most` GPUs only (None: as it is), the others idle, and a note that says so.

    For code that runs one replica per process whatever the process sees: `ParameterServerStrategy` makes a
    replica of every GPU a worker has (`parameter_server_strategy_v2.py`, `_set_num_gpus`), and with two or
    more its variables refuse an update inside a replica without an aggregation (`ps_values.py`, lesson 12)."""
    if most is None or len(plan.gpus) <= most:
        return plan
    if most < 1:
        raise CourseError(f"at most {most} GPUs per process: ask for 1 or more (no GPU: hide them instead)")
    idle = f"{len(plan.gpus) - most} of its {len(plan.gpus)} GPUs stay idle: one replica per process here"
    return replace(plan, gpus=plan.gpus[:most], note="; ".join(n for n in (plan.note, idle) if n))


def plan_for_engine(engines_on_host: int, index: int, most: int | None = None,
                    environ: dict | None = None) -> GpuPlan:
    """The share of local engine `index` of `engines_on_host`, capped at `most` GPUs: planned once, here, for
    the engine that applies it (`on_engine.configure`) and for the kernel's start-up line that announces it."""
    return at_most(plan_for_local_worker(engines_on_host, index, environ), most)


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
    if plan.memory_mib:  # TensorFlow imported already (e.g. on an engine), not yet initialised
        from .host import limit_gpu_memory

        limit_gpu_memory()
    return plan


def shares_gpu(environ: dict | None = None) -> bool:
    """Whether this process was given a share of a GPU other processes use (RING, not NCCL)."""
    env = os.environ if environ is None else environ
    return text(GPU_MEMORY_ENV, env).isdigit() and bool(visible_gpus(env))
