"""One call that returns the right tf.distribute strategy for where it runs.

- one process, GPUs: MirroredStrategy with NCCL all-reduce;
- one process, CPU: MirroredStrategy over logical CPU devices (see `environment.split_cpu`);
- several workers (TF_CONFIG, or a Slurm step with several tasks):
  MultiWorkerMirroredStrategy, NCCL on GPUs and ring on CPU (NCCL has no CPU kernel).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import keras_fix, tuning
from .environment import split_cpu
from .gpus import gpu_count_without_tf
from .host import import_tensorflow, tensorflow_is_cpu_build
from .errors import CourseError
from .gpus import GROWTH_ENV, shares_gpu, usable_gpu_count
from .rendezvous import rendezvous_deadline
from .settings import text as setting_text
from .resolver import cluster_resolver, describe, slurm_resolver

KINDS = ("auto", "mirrored", "multiworker", "default")
COLLECTIVE_TIMEOUT_ENV = "COURSE_COLLECTIVE_TIMEOUT"
DEFAULT_COLLECTIVE_TIMEOUT = 300.0


def collective_timeout() -> float:
    """Seconds a collective may wait for a peer that never joins it: `COURSE_COLLECTIVE_TIMEOUT`, else 300.

    A peer that dies fails the others without it, by its closed connections or, within about 10 s,
    by missed heartbeats, depending on what the survivors were doing (lesson 06); the timeout is for
    one alive but stuck elsewhere.

    Read when a strategy is made (not at import), so a bad value is one clear error there and
    a value set in a notebook before `make_strategy` counts."""
    text = setting_text(COLLECTIVE_TIMEOUT_ENV)
    if not text:
        return DEFAULT_COLLECTIVE_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise CourseError(f"{COLLECTIVE_TIMEOUT_ENV}={text!r} must be a number of seconds above 0, e.g. 300")
    return value


def worker_gpus(resolver) -> int:
    """GPUs (replicas) of this worker: the Slurm resolver's plan, else what the process sees."""
    plan = getattr(resolver, "gpu_plan", None)
    return plan.replicas if plan is not None else gpu_count_without_tf()


def communication_for(gpus: int, shared: bool = False) -> str:
    """The collective implementation to use: NCCL on GPUs of a worker's own, ring on CPU and on
    a GPU shared with other ranks (the gpu class layout: NCCL cannot run two ranks on one GPU)."""
    return "NCCL" if gpus > 0 and not shared else "RING"


def collective_for_this_process(replicas: int | None = None, gpus: int | None = None) -> str:
    """The all-reduce this process's strategy should use, decided before TensorFlow sets up its devices.

    NCCL only where each of its replicas has a GPU of its own that TensorFlow can use; RING on CPU
    (the CPU wheel included, whatever GPUs are visible: NCCL there fails or waits), on a GPU shared
    with other processes (the gpu class layout gives each a memory share, `gpus.shares_gpu`: NCCL
    refuses two ranks on one device, "Duplicate GPU detected"), and on one GPU split into `replicas`
    logical GPUs. `gpus`: this worker's GPUs (its Slurm plan), else the visible ones. Lessons 03, 07
    and 12 ask it; `make_strategy` uses the same rule."""
    gpus = 0 if tensorflow_is_cpu_build() else (gpu_count_without_tf() if gpus is None else gpus)
    return communication_for(gpus, shares_gpu() or (replicas is not None and replicas > gpus))


def make_strategy(kind: str = "auto", *, timeout_seconds: float | None = None,
                  communication: str | None = None, cpu_replicas: int = 1):
    """Create the strategy for this process.

    `auto` chooses multi-worker when a cluster of more than one worker is described
    (TF_CONFIG, Slurm step) and MirroredStrategy otherwise (over the GPUs, or over the CPU split
    into `cpu_replicas` logical devices, as notebook 01 does). Collectives get a timeout
    (`collective_timeout()`, 300 s) so that a worker alive but never joining ends in an error
    instead of a hang; a worker that dies is found sooner without it (lesson 06).
    """
    if kind not in KINDS:
        raise CourseError(f"unknown strategy {kind!r}: use one of {', '.join(KINDS)}")
    resolver = cluster_resolver() if kind in ("auto", "multiworker") else None
    if kind == "multiworker" and resolver is None:
        raise CourseError("multi-worker strategy asked for, but this process is not part of a "
                          "cluster: set TF_CONFIG or run the workers under `srun`")
    tuning.configure_graph_optimizer()
    if gpu_count_without_tf():  # before TensorFlow starts: GPU memory as needed, not all of it
        os.environ.setdefault(GROWTH_ENV, "true")
    if resolver is not None:
        return _multiworker(resolver, timeout_seconds, communication)
    if cpu_replicas > 1 and not usable_gpu_count():
        split_cpu(cpu_replicas)  # before TensorFlow's first op
    return _single_process(kind)


def _single_process(kind: str):
    tf = import_tensorflow()

    if kind == "default":
        return tf.distribute.get_strategy()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus and len(tf.config.list_logical_devices("GPU")) == len(gpus):
        return tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.NcclAllReduce())
    if gpus:  # one GPU split into logical GPUs (environment.local_replicas): NCCL cannot reduce there
        return tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.ReductionToOneDevice())
    return tf.distribute.MirroredStrategy(
        devices=[d.name for d in tf.config.list_logical_devices("CPU")])


def _multiworker(resolver, timeout_seconds: float | None, communication: str | None):
    tf = import_tensorflow()

    implementation = (communication or collective_for_this_process(gpus=worker_gpus(resolver))).upper()
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=getattr(tf.distribute.experimental.CommunicationImplementation, implementation),
        bytes_per_pack=tuning.pack_bytes(implementation),
        timeout_seconds=timeout_seconds if timeout_seconds is not None else collective_timeout())
    keras_fix.apply()
    me = describe(resolver)
    tuning.configure_threads(workers_on_my_host(me))
    try:
        with rendezvous_deadline(me["workers"], me["rank"]):
            return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver,
                                                             communication_options=options)
    except RuntimeError as exc:
        if "must be configured at program startup" in str(exc):
            raise CourseError("TensorFlow already ran an op in this process, so it cannot join a "
                              "multi-worker cluster: create the strategy first, right after "
                              "importing TensorFlow (restart the kernel/engine)") from None
        raise


def workers_on_my_host(me: dict) -> int:
    """How many workers of the cluster share this worker's host (its `host:port` host)."""
    host = str(me["address"]).rsplit(":", 1)[0]
    return sum(1 for w in me["workers"] if str(w).rsplit(":", 1)[0] == host)


@dataclass(frozen=True)
class StrategyInfo:
    """What a run needs to know about its strategy, asked in one place."""

    name: str     # the public class name (MWMS's own class is CollectiveAllReduceStrategy)
    rank: int     # this worker's index in the cluster, 0 in a single process
    chief: bool   # whether this worker writes checkpoints, logs and results
    workers: int  # worker processes in the cluster, 1 in a single process


def describe_strategy(strategy) -> StrategyInfo:
    """Name, rank, chief and worker count of `strategy`, from its cluster resolver."""
    import tensorflow as tf

    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not spec:
        return StrategyInfo(type(strategy).__name__, 0, True, 1)
    name = ("MultiWorkerMirroredStrategy" if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            else type(strategy).__name__)
    rank = int(resolver.task_id or 0)
    chief = resolver.task_type == "chief" or (resolver.task_type == "worker" and rank == 0)
    workers = max(1, sum(len(v) for k, v in spec.items() if k in ("worker", "chief")))
    return StrategyInfo(name, rank, chief, workers)


__all__ = ["make_strategy", "describe_strategy", "communication_for", "slurm_resolver"]
