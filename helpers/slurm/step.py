"""The Slurm job and step this process runs in, from its `SLURM_*` variables: every task's place, its port block.

A multi-worker strategy needs, in every task, the same list of workers (`host:port` by
rank) without any task talking to another first. Slurm tells each task only its own rank
(`SLURM_PROCID`), its node and local index (`SLURM_NODEID`, `SLURM_LOCALID`) and the step's
shape (`SLURM_STEP_NODELIST`, `SLURM_STEP_TASKS_PER_NODE`, `SLURM_DISTRIBUTION`); the list
of workers follows from the shape and the distribution. TensorFlow's own
`SlurmClusterResolver` assumes a block distribution over the *sorted* host names, which puts
ranks on the wrong hosts for `--distribution=cyclic` and for node lists such as
`gpu[9-10]` (Slurm's order is gpu9, gpu10; sorted it is gpu10, gpu9). Here the order is
Slurm's, and every task checks that its own rank lands on its own node and local index
before it trusts the list.

Ports: two jobs (or two steps of one job) sharing a node must not pick the same ports, so
each step takes its own block of `COURSE_PORT_RANGE`, derived from job and step id.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from itertools import product

from ..errors import CourseError

STEPS_PER_JOB = 16  # consecutive job ids get disjoint port blocks for this many steps each


@dataclass
class SlurmInfo:
    """The Slurm job and step this process runs in, read from `SLURM_*` variables."""

    job_id: str | None
    step: bool  # inside an `srun` step (SLURM_PROCID and the step variables are set)
    procid: int | None
    ntasks: int | None
    nodelist: str | None
    tasks_per_node: str | None
    extra: dict = field(default_factory=dict)


def slurm_info(environ: dict | None = None) -> SlurmInfo | None:
    """The Slurm context of this process, or None outside Slurm.

    Malformed numeric variables are reported as a `CourseError` here, once, rather than as
    a ValueError from deep inside TensorFlow's resolver later.
    """
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if job_id is None and "SLURM_PROCID" not in env:
        return None

    def as_int(name: str) -> int | None:
        value = env.get(name)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise CourseError(f"{name}={value!r} is not a whole number: this does not look like "
                              "a Slurm step; run under srun or unset the SLURM_* variables") from None

    procid = as_int("SLURM_PROCID")
    ntasks = as_int("SLURM_STEP_NUM_TASKS")
    step = procid is not None and ntasks is not None and "SLURM_STEP_NODELIST" in env
    return SlurmInfo(job_id=job_id, step=step, procid=procid, ntasks=ntasks,
                     nodelist=env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST"),
                     tasks_per_node=env.get("SLURM_STEP_TASKS_PER_NODE"),
                     extra={k: env[k] for k in ("SLURM_JOB_PARTITION", "SLURM_CPUS_PER_TASK",
                                                "SLURMD_NODENAME") if k in env})


def in_allocation() -> bool:
    """True inside a Slurm allocation but not inside a job step (where `srun` can start a step)."""
    return "SLURM_JOB_ID" in os.environ and "SLURM_STEP_ID" not in os.environ


def allocation_tasks() -> int:
    """The tasks of the allocation this process runs in (0 outside one, or where it counts none)."""
    tasks = os.environ.get("SLURM_NTASKS") or os.environ.get("SLURM_NPROCS") or ""
    return int(tasks) if in_allocation() and tasks.isdigit() else 0


def expand_hostlist(spec: str) -> list[str]:
    """Slurm's compact host list, in Slurm's order, as `scontrol show hostnames` prints it without
    asking slurmctld: 'gpu[9-10],login1' -> gpu9, gpu10, login1; 'r[1-2]n[01-02]' -> r1n01 r1n02 r2n01 r2n02."""
    names: list[str] = []
    for item in _top_level_items(spec or "", spec):
        pieces = re.split(r"(\[[^\[\]]*\])", item)
        choices = [_range_names(piece[1:-1], spec) if piece.startswith("[") else [piece] for piece in pieces]
        if any("[" in piece or "]" in piece for piece in pieces if not piece.startswith("[")):
            raise CourseError(f"host list {spec!r} is malformed near {item!r}")
        names += ["".join(parts) for parts in product(*choices)]
    if not names:
        raise CourseError(f"host list {spec!r} names no host")
    return names


def _top_level_items(text: str, spec: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in text:
        depth += (char == "[") - (char == "]")
        if depth not in (0, 1):
            raise CourseError(f"host list {spec!r} has unbalanced brackets")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise CourseError(f"host list {spec!r} has unbalanced brackets")
    return [item for item in [*items, current] if item]


def _range_names(ranges: str, spec: str) -> list[str]:
    """`1-3,07` -> 1 2 3 07: numbers keep the width of the range's first (Slurm's zero padding)."""
    out = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise CourseError(f"host list {spec!r} has a bad range {part!r}")
        out += [str(i).zfill(len(low)) for i in range(int(low), int(high or low) + 1)]
    return out


def expand_tasks_per_node(spec: str) -> list[int]:
    """Slurm's compact task counts: '2(x3),1' -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in (spec or "").split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            raise CourseError(f"SLURM_STEP_TASKS_PER_NODE={spec!r} is malformed: expected e.g. '2(x2),1'")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def hosts_by_rank(nodes: list[str], tasks: list[int], distribution: str = "block") -> list[str]:
    """The node of every rank, for Slurm's block (default) or cyclic task distribution."""
    kind = (distribution or "block").split(":")[0].split(",")[0] or "block"
    if kind == "block":
        return [node for node, count in zip(nodes, tasks) for _ in range(count)]
    if kind == "cyclic":
        left, order = list(tasks), []
        while any(left):
            for i, node in enumerate(nodes):
                if left[i]:
                    order.append(node)
                    left[i] -= 1
        return order
    raise CourseError(f"SLURM_DISTRIBUTION={distribution!r}: the course can place ranks for block and cyclic "
                      "distributions only; drop --distribution (or use block/cyclic)")


@dataclass(frozen=True)
class StepLayout:
    """Where every task of this step runs, and which one this process is."""

    rank: int
    nodes: tuple[str, ...]  # the step's nodes, in Slurm's order
    tasks: tuple[int, ...]  # tasks on each of those nodes
    hosts: tuple[str, ...]  # the node of every rank
    job_id: int
    step_id: int

    @property
    def node(self) -> str:
        return self.hosts[self.rank]

    @property
    def local_rank(self) -> int:
        """This task's index among the step's tasks on its node."""
        return self.hosts[: self.rank].count(self.node)

    @property
    def tasks_on_my_node(self) -> int:
        return self.hosts.count(self.node)

    @property
    def max_tasks_per_node(self) -> int:
        return max(self.tasks)

    def local_rank_of(self, rank: int) -> int:
        return self.hosts[:rank].count(self.hosts[rank])

    def workers(self, port_base: int) -> list[str]:
        """`host:port` of every rank: ports `port_base + local rank` on each node."""
        return [f"{host}:{port_base + self.local_rank_of(r)}" for r, host in enumerate(self.hosts)]


def _number(env: dict, name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None or value == "":
        if default is not None:
            return default
        raise CourseError(f"{name} is not set: this process is not a task of a Slurm step (run it with srun)")
    if not value.isdigit():
        if default is not None:
            return default
        raise CourseError(f"{name}={value!r} is not a whole number: is this a real Slurm step?")
    return int(value)


def step_layout(environ: dict | None = None) -> StepLayout:
    """The layout of the current step, checked against what Slurm told this task about itself."""
    env = os.environ if environ is None else environ
    rank = _number(env, "SLURM_PROCID")
    nodes = expand_hostlist(env.get("SLURM_STEP_NODELIST") or "")
    tasks = expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE") or "")
    if len(nodes) != len(tasks):
        raise CourseError(f"SLURM_STEP_NODELIST names {len(nodes)} node(s) but SLURM_STEP_TASKS_PER_NODE "
                          f"{len(tasks)}: these variables do not describe one step")
    total = _number(env, "SLURM_STEP_NUM_TASKS", default=sum(tasks))
    if total != sum(tasks) or not 0 <= rank < total:
        raise CourseError(f"rank {rank} of {total} tasks does not fit SLURM_STEP_TASKS_PER_NODE="
                          f"{env.get('SLURM_STEP_TASKS_PER_NODE')!r}")
    layout = StepLayout(rank=rank, nodes=tuple(nodes), tasks=tuple(tasks),
                        hosts=tuple(hosts_by_rank(nodes, tasks, env.get("SLURM_DISTRIBUTION", "block"))),
                        job_id=_number(env, "SLURM_JOB_ID", default=0),
                        step_id=_number(env, "SLURM_STEP_ID", default=0))
    _check_self(layout, env)
    return layout


def _check_self(layout: StepLayout, env: dict) -> None:
    """Every task must find itself where Slurm says it is, or the worker list is wrong."""
    node_id, local_id = env.get("SLURM_NODEID"), env.get("SLURM_LOCALID")
    mine = []
    if node_id is not None and node_id.isdigit() and int(node_id) < len(layout.nodes):
        mine.append(layout.nodes[int(node_id)] == layout.node)
    if local_id is not None and local_id.isdigit():
        mine.append(int(local_id) == layout.local_rank)
    if not all(mine):
        raise CourseError(f"rank {layout.rank} runs on node {env.get('SLURMD_NODENAME', node_id)} as local task "
                          f"{local_id}, but the step's layout ({env.get('SLURM_DISTRIBUTION', 'block')} "
                          f"distribution) puts it on {layout.node} as local task {layout.local_rank}: "
                          "use the default block or cyclic distribution for training steps")


def port_base(layout: StepLayout, low: int, high: int) -> int:
    """The first port of this step's block in [low, high].

    Each step needs `max_tasks_per_node` ports on every node. Blocks are handed out in job
    and step order (16 steps per job before they wrap), so jobs sharing a node, which have
    nearby ids, get disjoint ports; the ports are then checked free before use.
    """
    width = layout.max_tasks_per_node
    blocks = (high - low + 1) // width
    if blocks < 1:
        raise CourseError(f"COURSE_PORT_RANGE={low}-{high} has fewer ports than the {width} tasks "
                          "this step runs per node: widen it")
    index = (layout.job_id * STEPS_PER_JOB + layout.step_id) % blocks
    return low + index * width
