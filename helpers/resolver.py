"""Cluster resolution: who the workers are, and which one this process is.

Two sources, one result (a TensorFlow cluster resolver):
- inside a Slurm step, Slurm's variables (`SlurmClusterResolver`), rank = `SLURM_PROCID`;
- elsewhere, a `TF_CONFIG` JSON that we write for each local process or ipyparallel engine.
Worker ports stay inside a configurable range (`COURSE_PORT_RANGE`, default 10000-20000),
as large centres open only such a range between compute nodes; under Slurm every step takes
its own block of it (`helpers.slurm.step.port_base`), so jobs sharing a node do not collide.
"""

from __future__ import annotations

import json
import os
import random
import socket
import warnings

from .slurm.step import slurm_info
from .errors import CourseError
from .host import tensorflow_is_cpu_build
from .settings import value

PORT_RANGE_ENV = "COURSE_PORT_RANGE"
DEFAULT_PORT_RANGE = (10000, 20000)


def port_range() -> tuple[int, int]:
    """The allowed (low, high) worker ports, from `COURSE_PORT_RANGE=LOW-HIGH`."""
    text = value(PORT_RANGE_ENV)
    if not text:
        return DEFAULT_PORT_RANGE
    try:
        low, high = (int(part) for part in text.split("-"))
    except ValueError:
        raise CourseError(f"{PORT_RANGE_ENV}={text!r} is not a range: write it as LOW-HIGH, "
                          "e.g. 10000-20000") from None
    if not 1024 <= low <= high <= 65535:
        raise CourseError(f"{PORT_RANGE_ENV}={text!r} must lie within 1024-65535 with LOW <= HIGH")
    return low, high


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on `port` on `host` right now.

    With SO_REUSEADDR, as TensorFlow's gRPC server binds: connections of a worker that just ended
    (TIME_WAIT, for a minute after a requeued job's first run) do not count, a listening socket
    does."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def check_port(port: int, host: str = "127.0.0.1", *, chosen_by_user: bool = False) -> int:
    """`port`, if it is free on `host` and inside the allowed range; else a CourseError.

    The range is one centre's firewall policy for the ports the course picks itself. A port the
    user chose (their own TF_CONFIG) is theirs: outside the range it draws a warning, not a refusal.
    """
    low, high = port_range()
    if not low <= port <= high:
        if not chosen_by_user:
            raise CourseError(f"port {port} is outside the allowed range {low}-{high} "
                              f"(set {PORT_RANGE_ENV} to change the range)")
        warnings.warn(f"port {port} is outside {PORT_RANGE_ENV}={low}-{high}, the range the course keeps its own "
                      f"ports in (the ports a centre's firewall lets through between compute nodes): if the "
                      f"workers cannot reach each other, choose a port in it", stacklevel=2)
    if not port_is_free(port, host):
        raise CourseError(f"port {port} on {host} is already in use: pick another port "
                          f"or free it (`ss -ltnp 'sport = :{port}'` shows who holds it)")
    return port


def free_port(host: str = "127.0.0.1", attempts: int = 200) -> int:
    """A port inside the allowed range that is free on `host` right now."""
    low, high = port_range()
    for port in random.sample(range(low, high + 1), min(attempts, high - low + 1)):
        if port_is_free(port, host):
            return port
    raise CourseError(f"no free port in {low}-{high} on {host}: widen {PORT_RANGE_ENV}")


def make_tf_config(workers: list[str], index: int) -> dict:
    """The TF_CONFIG of worker `index` in a cluster of `workers` ("host:port" each)."""
    return validate_tf_config({"cluster": {"worker": list(workers)},
                               "task": {"type": "worker", "index": index}})


def validate_tf_config(config: str | dict) -> dict:
    """Parse and check a TF_CONFIG, so mistakes surface as one clear line, not a gRPC hang."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as exc:
            raise CourseError(f"TF_CONFIG is not valid JSON ({exc.msg} at character {exc.pos}): "
                              "write it as {\"cluster\": {\"worker\": [...]}, \"task\": {...}}") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        raise CourseError("TF_CONFIG has no \"cluster\" object: it needs "
                          "{\"cluster\": {\"worker\": [\"host:port\", ...]}, \"task\": {...}}")
    task = config.get("task") or {}
    task_type, index = task.get("type"), task.get("index")
    addresses = [a for tasks in config["cluster"].values() for a in tasks]
    if len(set(addresses)) != len(addresses):
        twice = sorted({a for a in addresses if addresses.count(a) > 1})
        raise CourseError(f"TF_CONFIG names {', '.join(twice)} more than once: every worker "
                          "needs its own host:port")
    for address in addresses:
        host, _, port = str(address).rpartition(":")
        if not host or not port.isdigit():
            raise CourseError(f"TF_CONFIG worker address {address!r} is not host:port")
    members = config["cluster"].get(task_type)
    if members is None or not isinstance(index, int) or not 0 <= index < len(members):
        raise CourseError(f"TF_CONFIG task {task!r} is not in the cluster: \"task\" must name a "
                          "type of the cluster and an index below its number of tasks")
    return config


def tf_config_from_env() -> dict | None:
    """The process's TF_CONFIG, checked, or None when unset."""
    text = os.environ.get("TF_CONFIG")
    return validate_tf_config(text) if text else None


def _slurm_resolver_class():
    import tensorflow as tf

    SlurmClusterResolver = tf.distribute.cluster_resolver.SlurmClusterResolver

    class CourseSlurmClusterResolver(SlurmClusterResolver):
        """SlurmClusterResolver with the workers where Slurm put them and the GPUs each really has.

        Upstream orders hosts alphabetically and assumes a block distribution, asks `nvidia-smi`
        for GPUs (absent on CPU nodes; zero GPUs then divide by zero), and divides the GPUs it
        counts by the tasks per node, which fails or over-counts when Slurm already bound GPUs
        to tasks. Here `helpers.slurm.step` places the ranks and `helpers.gpus` decides the GPUs
        (and sets CUDA_VISIBLE_DEVICES); upstream is given one placeholder GPU per task with
        `auto_set_gpu=False` so that its own bookkeeping stays valid.
        """

        def __init__(self, layout, workers: list[str], plan):
            self.layout, self.workers, self.gpu_plan = layout, list(workers), plan
            super().__init__(port_base=0, gpus_per_node=layout.max_tasks_per_node, gpus_per_task=1,
                             tasks_per_node=dict(zip(layout.nodes, layout.tasks)), auto_set_gpu=False)
            # known from the start (upstream sets them only inside cluster_spec(): a learner who
            # asks first saw "I am None None", lesson 03 on Slurm)
            self.task_type, self.task_id = "worker", layout.rank

        def cluster_spec(self):
            self.task_type, self.task_id = "worker", self.layout.rank
            return tf.train.ClusterSpec({"worker": self.workers})

        def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
            # the CPU wheel can use no GPU the plan names (the local Slurm's simulated ones): MWMS
            # would make replicas on devices that do not exist and wait in its first collective
            return {"GPU": 0 if tensorflow_is_cpu_build() else self.gpu_plan.replicas}

    return CourseSlurmClusterResolver


def resolve_step(port_base: int | None = None) -> tuple:
    """(layout, GPU plan, workers) of this Slurm task, without TensorFlow.

    Sets this process's CUDA_VISIBLE_DEVICES to the GPUs its worker uses (so it must run before
    TensorFlow starts) and checks that the worker's port is free on this node.
    """
    from . import gpus
    from .slurm.step import step_layout

    info = slurm_info()
    if info is None or not info.step:
        raise CourseError("not inside a Slurm step: run the workers with `srun` (SLURM_PROCID, "
                          "SLURM_STEP_NUM_TASKS and SLURM_STEP_NODELIST must be set)")
    layout = step_layout()
    plan = gpus.apply(gpus.plan_for_task(layout.tasks_on_my_node, layout.local_rank,
                                         layout.max_tasks_per_node))
    return layout, plan, step_workers(layout, port_base)


def step_workers(layout, port_base: int | None = None) -> list[str]:
    """`host:port` of every rank of the step, this task's own port checked free on its node."""
    from .slurm.step import port_base as step_port_base

    low, high = port_range()
    base = step_port_base(layout, low, high) if port_base is None else port_base
    if not (low <= base and base + layout.max_tasks_per_node - 1 <= high):
        raise CourseError(f"ports {base}-{base + layout.max_tasks_per_node - 1} are outside the allowed "
                          f"range {low}-{high}")
    port = base + layout.local_rank
    if port not in _own_listening_ports():  # resolved again after this process's server started
        _check_step_port(port, layout)
    return layout.workers(base)


def _check_own_tf_config_port(config: dict) -> None:
    """This worker's TF_CONFIG port: inside COURSE_PORT_RANGE and free on every interface (where
    TensorFlow's server binds it), unless this process's own server already holds it."""
    task = config["task"]
    port = int(str(config["cluster"][task["type"]][task["index"]]).rpartition(":")[2])
    if port not in _own_listening_ports():
        try:
            check_port(port, host="0.0.0.0", chosen_by_user=True)
        except CourseError as exc:
            raise CourseError(f"TF_CONFIG of {task['type']} {task['index']}: {exc}") from None


def _own_listening_ports() -> set[int]:
    import psutil

    try:
        return {c.laddr.port for c in psutil.Process().net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN}
    except (psutil.Error, OSError):
        return set()


def slurm_resolver(port_base: int | None = None):
    """The resolver for the current Slurm step: ranks on their nodes, GPUs bound, own ports."""
    layout, plan, workers = resolve_step(port_base)
    return _slurm_resolver_class()(layout, workers, plan)


def _check_step_port(port: int, layout) -> None:
    try:
        check_port(port, host="0.0.0.0")
    except CourseError as exc:
        raise CourseError(f"{exc} (job {layout.job_id} step {layout.step_id}, rank {layout.rank} on "
                          f"{layout.node}; another job on this node may hold it: set {PORT_RANGE_ENV} "
                          "to a range of your own)") from None


def cluster_resolver():
    """The resolver for where this process runs, or None for a single worker.

    TF_CONFIG wins when set (it is explicit); otherwise a Slurm step with more than one task.
    A TF_CONFIG that names exactly this step's workers and rank (what `setup_multiworker` writes
    on Slurm engines) is the same cluster: the Slurm resolver is used, with its GPU plan.
    """
    config = tf_config_from_env()
    info = slurm_info()
    in_step = info is not None and info.step and (info.ntasks or 1) > 1
    if config is not None and not (in_step and is_step_tf_config(config)):
        import tensorflow as tf

        _check_own_tf_config_port(config)
        return tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if in_step:
        return slurm_resolver()
    return None


def is_step_tf_config(config: dict) -> bool:
    """Whether `config` names this Slurm step's workers, ports and rank, as `slurm_resolver` does."""
    from .slurm.step import port_base as step_port_base, step_layout

    try:
        layout = step_layout()
        workers = layout.workers(step_port_base(layout, *port_range()))
    except CourseError:  # Slurm's variables do not describe a step: the TF_CONFIG given is the cluster
        return False
    return (config.get("cluster") == {"worker": workers}
            and config.get("task") == {"type": "worker", "index": layout.rank})


def describe(resolver) -> dict:
    """Rank, task address, all workers and this worker's GPUs, for printing in `%%px` cells."""
    spec = resolver.cluster_spec().as_dict()
    task_type, task_id = resolver.task_type, resolver.task_id
    plan = getattr(resolver, "gpu_plan", None)
    return {"kind": type(resolver).__name__, "task_type": task_type, "rank": task_id,
            "address": spec[task_type][task_id], "workers": spec.get(task_type, []),
            "gpus": plan.describe() if plan is not None else None}
