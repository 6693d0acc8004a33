"""Cluster resolution: who the workers are, and which one this process is.

Two sources, one result (a TensorFlow cluster resolver):
- inside a Slurm step, Slurm's variables (`SlurmClusterResolver`), rank = `SLURM_PROCID`;
- elsewhere, a `TF_CONFIG` JSON that we write for each local process or ipyparallel engine.
Worker ports stay inside a configurable range (`COURSE_PORT_RANGE`, default 10000-20000),
as large centres open only such a range between compute nodes.
"""

from __future__ import annotations

import json
import os
import random
import socket

from .environment import slurm_info
from .errors import CourseError

PORT_RANGE_ENV = "COURSE_PORT_RANGE"
DEFAULT_PORT_RANGE = (10000, 20000)


def port_range() -> tuple[int, int]:
    """The allowed (low, high) worker ports, from `COURSE_PORT_RANGE=LOW-HIGH`."""
    text = os.environ.get(PORT_RANGE_ENV)
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


def check_port(port: int, host: str = "127.0.0.1") -> int:
    """`port`, if it is inside the allowed range and free on `host`; else a CourseError."""
    low, high = port_range()
    if not low <= port <= high:
        raise CourseError(f"port {port} is outside the allowed range {low}-{high} "
                          f"(set {PORT_RANGE_ENV} to change the range)")
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            raise CourseError(f"port {port} on {host} is already in use: pick another port "
                              f"or free it (`ss -ltnp 'sport = :{port}'` shows who holds it)") from None
    return port


def free_port(host: str = "127.0.0.1", attempts: int = 200) -> int:
    """A port inside the allowed range that is free on `host` right now."""
    low, high = port_range()
    for port in random.sample(range(low, high + 1), min(attempts, high - low + 1)):
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
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
        """SlurmClusterResolver that tells the truth about GPUs on CPU-only nodes.

        Upstream asks `nvidia-smi` (absent on CPU nodes) and cannot be given zero GPUs
        (`range()` with step 0), so on CPU we pass one placeholder GPU per task with
        `auto_set_gpu=False`, and report the real count (0) to the strategy here.
        """

        def __init__(self, real_gpus_per_task: int, **kwargs):
            self._real_gpus_per_task = real_gpus_per_task
            super().__init__(**kwargs)

        def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
            return {"GPU": self._real_gpus_per_task}

    return CourseSlurmClusterResolver


def slurm_resolver(gpus_per_node: int | None = None, port_base: int | None = None):
    """A resolver for the current Slurm step; `gpus_per_node` None means detect."""
    info = slurm_info()
    if info is None or not info.step:
        raise CourseError("not inside a Slurm step: run the workers with `srun` (SLURM_PROCID, "
                          "SLURM_STEP_NUM_TASKS and SLURM_STEP_NODELIST must be set)")
    from .environment import gpu_count_without_tf

    gpus = gpu_count_without_tf() if gpus_per_node is None else gpus_per_node
    low, high = port_range()
    base = port_base if port_base is not None else low
    if not low <= base <= high:
        raise CourseError(f"port base {base} is outside the allowed range {low}-{high}")
    cls = _slurm_resolver_class()
    try:
        if gpus > 0:
            return cls(gpus, port_base=base, auto_set_gpu=True)
        # CPU: one placeholder "GPU" per task keeps upstream's allocation arithmetic valid
        tasks = _max_tasks_per_node(info.tasks_per_node)
        return cls(0, port_base=base, gpus_per_node=tasks, gpus_per_task=1, auto_set_gpu=False)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CourseError(f"Slurm step variables do not describe a valid step ({exc}): "
                          "check SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE") from None


def _max_tasks_per_node(spec: str | None) -> int:
    """Largest per-node task count in Slurm's compact form, e.g. '2(x3),1' -> 2."""
    if not spec:
        raise CourseError("SLURM_STEP_TASKS_PER_NODE is not set: run the workers with `srun`")
    counts = []
    for part in spec.split(","):
        number = part.split("(")[0]
        if not number.isdigit():
            raise CourseError(f"SLURM_STEP_TASKS_PER_NODE={spec!r} is malformed: expected e.g. '2(x2)'")
        counts.append(int(number))
    return max(counts)


def cluster_resolver():
    """The resolver for where this process runs, or None for a single worker.

    TF_CONFIG wins when set (it is explicit); otherwise a Slurm step with more than one task.
    """
    config = tf_config_from_env()
    if config is not None:
        import tensorflow as tf

        return tf.distribute.cluster_resolver.TFConfigClusterResolver()
    info = slurm_info()
    if info is not None and info.step and (info.ntasks or 1) > 1:
        return slurm_resolver()
    return None


def describe(resolver) -> dict:
    """Rank, task address and all workers of a resolver, for printing in `%%px` cells."""
    spec = resolver.cluster_spec().as_dict()
    task_type, task_id = resolver.task_type, resolver.task_id
    return {"kind": type(resolver).__name__, "task_type": task_type, "rank": task_id,
            "address": spec[task_type][task_id], "workers": spec.get(task_type, [])}
