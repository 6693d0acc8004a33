"""`python -m helpers class plan`: what a class needs, in both layouts, before the day.

Arithmetic only (nothing is submitted). Two layouts (`COURSE_CLASS_LAYOUT`, helpers.class_settings):

- `node`: a node per learner, every job `--exclusive` (whole node): nodes = learners + the nodes
  of the lesson jobs running at once;
- `gpu`: a GPU per learner (`--gpus=1 --ntasks=2`), classmates share nodes: nodes =
  ceil(learners / learners per node) + the job nodes; the kernel and the two engines share the
  GPU, each with a memory limit, RING collectives.

The lesson jobs (lessons 08, 11, 16, 17 submit 2-node jobs): ASSUMED the class runs one lesson
at a time and `--jobs-at-once` learners (default: all of them) submit that lesson's job at the
same moment. In the node layout a job takes 2 whole nodes beside the learner's server node (the
server holds its node whole); in the gpu layout it takes one GPU on each of 2 nodes
(`COURSE_JOB_GPUS_PER_TASK=1`, one task per node), so `jobs` jobs need max(2, ceil(2 * jobs /
GPUs per node)) nodes. With fewer nodes than that, the jobs queue and run in waves (printed).

The GPU is a model (`--gpu-model`, `class_fit.GPU_MODELS`: its memory and MIG profiles), its memory
replaced by `--gpu-mib` where nvidia-smi says otherwise. With `--nodes-available`, `class_fit` adds
what fits on those nodes when the class does not (pairs, MIG slices, a CPU cohort) and its cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import CourseError
from ..gpus import memory_share_mib

JOB_NODES = 2  # lessons 08, 11, 16, 17: their batch jobs run on 2 nodes
ENGINES = 2  # tasks of a gpu-layout server (the lessons' two engines)
JOB_LESSONS = "08, 11, 16, 17"


@dataclass(frozen=True)
class ClassNeeds:
    """One layout's figures for a class."""

    layout: str
    learners: int
    per_node: int  # learners on one node
    server_nodes: int
    job_nodes: int  # for the lesson jobs running at once
    jobs: int  # lesson jobs at once
    memory_mib: int | None  # each process's limit on a shared GPU (gpu layout)
    gpus_per_node: int = 4

    @property
    def nodes(self) -> int:
        return self.server_nodes + self.job_nodes

    def waves(self, available: int | None) -> int | None:
        """Rounds the lesson jobs run in on `available` nodes (0: they cannot run; None: not asked)."""
        if available is None:
            return None
        free = available - self.server_nodes
        if self.jobs == 0:
            return 1
        if free < JOB_NODES:
            return 0
        at_once = free // JOB_NODES if self.layout == "node" else _gpu_jobs_on(free, self.gpus_per_node)
        return math.ceil(self.jobs / at_once) if at_once else 0


def _gpu_jobs_on(nodes: int, gpus_per_node: int) -> int:
    """2-node jobs of one GPU per node that fit on `nodes` nodes of `gpus_per_node` GPUs."""
    return (nodes * gpus_per_node) // JOB_NODES if nodes >= JOB_NODES else 0


def plan(learners: int, gpus_per_node: int, cpus_per_node: int | None = None, jobs_at_once: int | None = None,
         gpu_mib: int = 40960) -> dict[str, ClassNeeds]:
    """Both layouts' needs for `learners` on nodes of `gpus_per_node` GPUs (and `cpus_per_node` CPUs)."""
    for name, value in (("--learners", learners), ("--gpus-per-node", gpus_per_node)):
        if value < 1:
            raise CourseError(f"{name} must be at least 1")
    jobs = learners if jobs_at_once is None else jobs_at_once
    if not 0 <= jobs <= learners:
        raise CourseError(f"--jobs-at-once must be from 0 to the {learners} learners")
    per_node = gpus_per_node if cpus_per_node is None else min(gpus_per_node, cpus_per_node // ENGINES)
    if per_node < 1:
        raise CourseError(f"{cpus_per_node} CPUs per node cannot hold one learner's {ENGINES} tasks")
    node = ClassNeeds("node", learners, 1, learners, JOB_NODES * jobs, jobs, None, gpus_per_node)
    gpu_job_nodes = 0 if jobs == 0 else max(JOB_NODES, math.ceil(JOB_NODES * jobs / gpus_per_node))
    gpu = ClassNeeds("gpu", learners, per_node, math.ceil(learners / per_node), gpu_job_nodes, jobs,
                     memory_share_mib(gpu_mib, ENGINES + 1), gpus_per_node)
    return {"node": node, "gpu": gpu}


def reservation_command(nodes: int, name: str, start: str, duration: str, users: str, partition: str) -> str:
    """The `scontrol create reservation` line for `nodes` nodes (run by Slurm's administrator)."""
    line = (f"scontrol create reservation ReservationName={name} StartTime={start} Duration={duration} "
            f"Users={users} NodeCnt={nodes}")
    return line + (f" PartitionName={partition}" if partition else "")


def report(learners: int, gpus_per_node: int, cpus_per_node: int | None = None, nodes_available: int | None = None,
           jobs_at_once: int | None = None, gpu_mib: int | None = None, name: str = "course-day",
           start: str = "2026-12-01T08:00:00", duration: str = "10:00:00", users: str = "LEARNER1,LEARNER2,...",
           partition: str = "", gpu_model: str = "a100-40gb") -> str:
    """What `class plan` prints: both layouts, their hub and Open OnDemand settings, the reservation,
    and with `nodes_available` the options that fit there (`class_fit`)."""
    from .class_fit import gpu_model as find_model, option_lines

    model = find_model(gpu_model, gpu_mib)
    gpu_mib = model.mib
    needs = plan(learners, gpus_per_node, cpus_per_node, jobs_at_once, gpu_mib)
    node, gpu = needs["node"], needs["gpu"]
    lines = [f"class plan: {learners} learners, {gpus_per_node} GPUs per node ({model.name}, {gpu_mib} MiB)"
             + (f", {cpus_per_node} CPUs per node" if cpus_per_node else "")
             + (f", {nodes_available} nodes available" if nodes_available is not None else ""),
             f"assumed: one lesson at a time; {node.jobs} learners submit its 2-node job (lessons {JOB_LESSONS}) "
             "at once (--jobs-at-once)", ""]
    for layout in (node, gpu):
        lines += _layout_lines(layout, nodes_available, gpus_per_node, gpu_mib, name, start, duration, users,
                               partition)
    if nodes_available is not None:
        lines += option_lines(learners, nodes_available, gpus_per_node, model, gpu.jobs, cpus_per_node)
    return "\n".join(lines).rstrip()


def _layout_lines(needs: ClassNeeds, available: int | None, gpus_per_node: int, gpu_mib: int, name: str,
                  start: str, duration: str, users: str, partition: str) -> list[str]:
    if needs.layout == "node":
        lines = ["A node per learner (COURSE_CLASS_LAYOUT=node, every job --exclusive):",
                 f"  nodes: {needs.server_nodes} for the servers + {needs.job_nodes} for {needs.jobs} lesson jobs "
                 f"of {JOB_NODES} nodes = {needs.nodes}",
                 f"  hub: COURSE_HUB_OPTIONS=\"--nodes=1 --ntasks={gpus_per_node} --gres=gpu:{gpus_per_node} "
                 f"--exclusive\" COURSE_HUB_RESERVATION={name}",
                 f"  Open OnDemand form: Class layout node, Nodes 1, Workers per node {gpus_per_node}, "
                 f"GPUs per worker 1, Reservation {name}",
                 "  collectives: NCCL, a GPU per worker; memory: every process grows as it needs",
                 "  isolation: no classmate on a learner's nodes"]
    else:
        lines = ["A GPU per learner (COURSE_CLASS_LAYOUT=gpu, classmates share nodes):",
                 f"  nodes: ceil({needs.learners}/{needs.per_node}) = {needs.server_nodes} for the servers "
                 f"({needs.per_node} learners per node) + {needs.job_nodes} for {needs.jobs} lesson jobs "
                 f"(one GPU on each of {JOB_NODES} nodes) = {needs.nodes}",
                 "  hub: COURSE_CLASS_LAYOUT=gpu (server jobs \"--nodes=1 --ntasks=2 --gpus=1\") "
                 f"COURSE_JOB_GPUS_PER_TASK=1 COURSE_HUB_RESERVATION={name}",
                 f"  Open OnDemand form: Class layout gpu, Workers per node {ENGINES}, Reservation {name}",
                 f"  memory: kernel and {ENGINES} engines share the learner's GPU: 90 % of {gpu_mib} MiB / "
                 f"{ENGINES + 1} = {needs.memory_mib} MiB each (COURSE_GPU_MEMORY_MIB)",
                 "  collectives: RING (NCCL cannot run two ranks on one GPU)",
                 f"  what classmates can reach: up to {needs.per_node - 1} classmates share each node; TensorFlow's "
                 "worker ports (COURSE_PORT_RANGE) have no authentication, so a classmate on the node (or any "
                 "node that reaches it) can run graphs in a learner's workers as that learner while they run; "
                 "kernels (private Unix sockets) and engines (encrypted, keyed) stay the learner's own"]
    waves = needs.waves(available)
    if waves is not None:
        fits = "yes" if available >= needs.server_nodes else f"no: {needs.server_nodes - available} nodes short"
        lines.append(f"  on {available} nodes: servers fit: {fits}; lesson jobs: "
                     + ("cannot run (no 2 nodes left beside the servers)" if waves == 0 else
                        "all at once" if waves == 1 else f"queue, {waves} waves"))
    lines += [f"  reservation: {reservation_command(needs.nodes, name, start, duration, users, partition)}", ""]
    return lines
