"""What fits when a class does not: the options `class plan --nodes-available` offers, and their cost.

Arithmetic only, like `class_plan`. A class of `learners` on `nodes` nodes of `gpus_per_node` GPUs
of one model (`GPU_MODELS`, or its memory given) may still run, in one of these ways:

- a GPU per learner (the gpu class layout): a learner's kernel and 2 engines on one GPU;
- pairs: two learners at one server (one login, one screen), half the servers;
- MIG slices: each GPU split into equal slices (NVIDIA's profiles, e.g. 2 x 3g.20gb on an A100
  40GB), a slice per learner; the course reads a slice's own memory (`gpus.gpu_memory_mib`) and a
  slice has `g` of the GPU's 7 compute slices;
- a CPU cohort: as many learners as fit on the GPUs, the rest on CPU nodes in quick mode.

Two learners on one whole GPU without MIG (Slurm's gres/shard or MPS) is not offered: nvidia-smi
reports the whole GPU to both, so each learner's processes would take their 90 % of it.

What each costs the lessons is said with the course's predictions (`training_time`, workshop
mode; quick mode on a CPU), scaled by the learner's share of a GPU's compute: assumptions, never
measured on a GPU. Every learner server takes 2 CPUs (its 2 tasks); a lesson job takes one GPU
(or slice) and one CPU on each of 2 nodes, beside the servers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import CourseError
from ..gpus import memory_share_mib, mig_slice_mib

SERVER_TASKS = 2  # a learner's server: the kernel's job has 2 tasks, for the 2 engines
PROCESSES = SERVER_TASKS + 1  # the kernel and its 2 engines share a learner's GPU or slice
COMPUTE_SLICES = 7  # an A100's or H100's compute slices under MIG: a `3g` profile has 3 of them
LESSONS = tuple(f"{n:02d}" for n in range(19))


@dataclass(frozen=True)
class GpuModel:
    """A GPU as the plan needs it: its memory (MiB, as nvidia-smi reports it) and its MIG profiles
    (equal slices: profile, slices per GPU; NVIDIA's MIG user guide), largest slice first."""

    name: str
    mib: int
    mig: tuple[tuple[str, int], ...] = ()


_MIG_40 = (("3g.20gb", 2), ("2g.10gb", 3), ("1g.5gb", 7))
_MIG_80 = (("3g.40gb", 2), ("2g.20gb", 3), ("1g.10gb", 7))
GPU_MODELS = {
    "a100-40gb": GpuModel("A100 40GB", 40960, _MIG_40),
    "a100-80gb": GpuModel("A100 80GB", 81920, _MIG_80),
    "h100-80gb": GpuModel("H100 80GB", 81920, _MIG_80),
    "v100-16gb": GpuModel("V100 16GB", 16384),
    "v100-32gb": GpuModel("V100 32GB", 32768),
}


def gpu_model(name: str, mib: int | None = None) -> GpuModel:
    """The model `name` (`GPU_MODELS`), its memory replaced by `mib` where given (nvidia-smi's figure)."""
    found = GPU_MODELS.get(name.lower())
    if found is None:
        raise CourseError(f"unknown GPU model {name!r}: use one of {', '.join(GPU_MODELS)} (and --gpu-mib for "
                          "its memory if nvidia-smi says otherwise)")
    return found if mib is None else GpuModel(found.name, mib, found.mig)


@dataclass(frozen=True)
class FitOption:
    """One way to hold the class on the nodes, and what it costs."""

    name: str
    servers: int  # learner servers it must place (pairs: half the learners)
    holds: int  # servers the nodes hold this way
    memory_mib: int | None  # each process's cap (None: a CPU cohort)
    compute: float  # a server's share of one GPU's compute
    jobs_at_once: int  # 2-node lesson jobs that run beside the servers
    how: str  # the class's settings

    @property
    def fits(self) -> bool:
        return self.holds >= self.servers


def jobs_at_once(free: list[int]) -> int:
    """2-node jobs of one unit (a GPU or slice) on each of two different nodes, with `free[i]` units
    free on node i: every job pairs units of two nodes, so at most half of them, and never more than
    the units outside the fullest node."""
    total = sum(free)
    return min(total // 2, total - max(free, default=0))


def _placed(servers: int, nodes: int, units: int, per_node: int, cpus: int | None) -> tuple[int, list[int]]:
    """Servers the nodes hold (`per_node` on each) and the units each node has left for lesson jobs:
    servers fill the nodes in order; a job's task needs a unit and a CPU."""
    holds, free, left = nodes * per_node, [], servers
    for _ in range(nodes):
        here = min(per_node, max(left, 0))
        left -= here
        spare_cpus = units if cpus is None else cpus - SERVER_TASKS * here
        free.append(max(0, min(units - here, spare_cpus)))
    return holds, free


def options(learners: int, nodes: int, gpus_per_node: int, model: GpuModel,
            cpus_per_node: int | None = None) -> list[FitOption]:
    """Every way the plan knows to hold `learners` on `nodes` nodes, fitting or not (`FitOption.fits`)."""
    if learners < 1 or nodes < 0 or gpus_per_node < 1:
        raise CourseError("class plan needs --learners >= 1, --gpus-per-node >= 1 and --nodes-available >= 0")
    cpu_cap = None if cpus_per_node is None else cpus_per_node // SERVER_TASKS
    found = []

    def add(name: str, servers: int, units: int, unit_mib: int, compute: float, how: str) -> None:
        per_node = units if cpu_cap is None else min(units, cpu_cap)
        holds, free = _placed(servers, nodes, units, per_node, cpus_per_node)
        found.append(FitOption(name, servers, holds, memory_share_mib(unit_mib, PROCESSES), compute,
                               jobs_at_once(free), how))

    gpu_how = "COURSE_CLASS_LAYOUT=gpu (server jobs --gpus=1 --ntasks=2), COURSE_JOB_GPUS_PER_TASK=1"
    add("a GPU per learner", learners, gpus_per_node, model.mib, 1.0, gpu_how)
    add("pairs: two learners at one server (one login, one screen)", math.ceil(learners / 2), gpus_per_node,
        model.mib, 1.0, gpu_how + f"; {math.ceil(learners / 2)} logins, one per pair")
    for profile, slices in model.mig:
        g = int(profile.split("g.")[0].split(".")[-1])
        add(f"MIG {profile}: {slices} learners per GPU, a slice each", learners, gpus_per_node * slices,
            mig_slice_mib(profile), g / COMPUTE_SLICES,
            f"each GPU split into {slices} x {profile} (nvidia-smi mig -cgi; Slurm lists each slice as a GPU, "
            "gres AutoDetect=nvml); " + gpu_how)
    return found


def cpu_cohort(learners: int, gpu_option: FitOption) -> tuple[int, int]:
    """(learners on the GPUs, learners on CPU nodes in quick mode) beside `gpu_option`'s servers."""
    on_gpus = min(learners, gpu_option.holds)
    return on_gpus, learners - on_gpus


def lessons_minutes(compute: float, cpu: bool = False) -> tuple[float, float]:
    """(training, start-up) minutes of every lesson, predicted: workshop mode on one GPU (a job lesson
    on its job's one GPU on each of 2 nodes), training divided by the learner's `compute` share; or
    quick mode on a CPU."""
    from ..training_time import predicted_minutes

    rows = [predicted_minutes(n, "quick" if cpu else "workshop", 0 if cpu else 1) for n in LESSONS]
    training = sum(r[0] for r in rows)
    return (training if cpu else training / compute), sum(r[1] for r in rows)


def option_lines(learners: int, nodes: int, gpus_per_node: int, model: GpuModel, jobs: int,
                 cpus_per_node: int | None = None) -> list[str]:
    """What `class plan --nodes-available` prints: the options that fit, their cost, then the others."""
    found = options(learners, nodes, gpus_per_node, model, cpus_per_node)
    base_training, base_startup = lessons_minutes(1.0)
    lines = [f"What fits on {nodes} nodes ({nodes * gpus_per_node} GPUs, {model.name}, {model.mib} MiB each): "
             f"the lessons 00-18 predicted at {base_training:.1f} min of training and {base_startup:.1f} min of "
             "start-up in workshop mode on one GPU (helpers.training_time: assumptions until make gpucheck has "
             "run on a GPU; no process's peak memory is known before it)"]
    for option in [o for o in found if o.fits]:
        training, _ = lessons_minutes(option.compute)
        waves = "cannot run beside the servers (no free GPU on two nodes)" if not option.jobs_at_once and jobs else \
            f"{option.jobs_at_once} at once, {math.ceil(jobs / option.jobs_at_once)} wave(s)" if jobs else "none asked"
        lines += [f"  - {option.name}: fits, {option.servers} servers of {option.holds}",
                  f"    costs the lessons: {option.memory_mib} MiB per process (90 % / {PROCESSES}), "
                  f"{option.compute:.2f} of a GPU's compute: {training:.1f} min of training predicted "
                  f"({training / base_training:.1f}x){_pair_note(option)}",
                  f"    lesson jobs (2 nodes, lessons 08, 11, 16, 17): {waves}",
                  f"    settings: {option.how}"]
    on_gpus, on_cpus = cpu_cohort(learners, found[0])
    if on_cpus:
        training, startup = lessons_minutes(1.0, cpu=True)
        lines += [f"  - a CPU cohort in quick mode: {on_gpus} learners on the GPUs (a GPU each), {on_cpus} on CPU "
                  f"nodes ({on_cpus * SERVER_TASKS} CPUs: {SERVER_TASKS} per learner's server)",
                  f"    costs the lessons: quick mode's sizes (2,048 training images, ResNet50 on 64): the proofs "
                  f"hold, the accuracies are not the GPU cohort's; {training:.1f} min of training and "
                  f"{startup:.1f} min of start-up predicted on 2 CPU cores",
                  "    settings: a second hub profile or Open OnDemand form on the CPU partition with "
                  "COURSE_MODE=quick, COURSE_JOB_GPUS_PER_TASK=0"]
    short = [o for o in found if not o.fits]
    if short:
        lines.append("  does not fit: " + "; ".join(f"{o.name.split(':')[0]} holds {o.holds} of {o.servers}"
                                                    for o in short))
    lines.append("  not offered: two learners on one whole GPU without MIG (Slurm gres/shard or MPS): nvidia-smi "
                 "reports the whole GPU to both, so their processes' caps would add up to 180 % of it")
    return lines


def _pair_note(option: FitOption) -> str:
    return "; two learners read one kernel, one types" if option.name.startswith("pairs") else ""
