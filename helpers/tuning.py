"""CPU performance defaults (thread pools, all-reduce pack size, Grappler), not hyperparameters: each with its figure.

Each default comes with the figure that justifies it, measured side by side on the course
machine (2 vCPU x86_64 VM, ResNet50 on 32x32 images, global batch 64, median step time;
`python -m helpers bench` measures them again, against TensorFlow's defaults):

- Thread pools: TensorFlow gives every op the whole machine (intra-op threads = all cores).
  In one process every CPU device, logical ones included, shares one intra-op pool (upstream
  `local_device.cc`, `LocalDevice`), so MirroredStrategy's replicas share it; 2 worker processes
  each get a pool of their own. Why fewer threads measured faster is not explained here; the
  figures: one intra-op thread per core share (at least 1) and 2 inter-op threads gave
  MirroredStrategy over 2 logical CPUs 0.49-0.53 s/step instead of 0.58-0.61 s (single process
  0.32-0.33 s); multi-worker 0.79 s instead of 0.88 s.
- Ring all-reduce in 4 MiB packs (`CommunicationOptions.bytes_per_pack`): the 94 MB of
  ResNet50 gradients travel in several smaller collectives that overlap instead of one:
  2 local workers 0.63-0.67 s/step with 1-8 MiB packs, 0.71-0.81 s unpacked, 0.96 s with
  128 MiB packs. Only for ring (CPU); NCCL on GPUs keeps TensorFlow's default.
- Grappler (the graph optimiser) off on CPU-only nodes: the first (tracing) step of ResNet50
  under MirroredStrategy 11.0 s instead of 13.5-15.4 s, single process 9.0 s instead of
  9.9-10.7 s, with unchanged step times (0.497 vs 0.49-0.53 s; small CNN 22.9 vs 23.0 ms).
  On GPUs its layout and fusion passes pay, so it stays on there.

`COURSE_TUNING=off` gives TensorFlow's defaults everywhere (what the benchmark compares
with). All of this must happen before TensorFlow initialises its runtime; later calls change
nothing and say so in their return value rather than failing.
"""

from __future__ import annotations


from .gpus import gpu_count_without_tf
from .host import cpu_count, import_tensorflow
from .settings import value

TUNING_ENV = "COURSE_TUNING"
RING_PACK_BYTES = 4 * 1024 * 1024
INTER_OP_THREADS = 2


def enabled() -> bool:
    """Whether the course's defaults apply (`COURSE_TUNING` is not "off")."""
    return (value(TUNING_ENV) or "on").strip().lower() not in ("off", "0", "false", "no")


def threads_for(sharers: int, cpus: int | None = None) -> tuple[int, int]:
    """(intra-op, inter-op) threads for one of `sharers` replicas/workers sharing the CPUs."""
    cpus = cpus or cpu_count()
    return max(1, cpus // max(1, sharers)), INTER_OP_THREADS


def configure_threads(sharers: int) -> tuple[int, int] | None:
    """Size TensorFlow's thread pools for `sharers` replicas or workers on this node's CPUs.

    Returns the (intra, inter) set, or None when nothing was changed: tuning off, GPUs
    present (they do the work), one sharer (TensorFlow's default is right then), or
    TensorFlow already initialised in this process.
    """
    if not enabled() or sharers < 2 or gpu_count_without_tf():
        return None
    tf = import_tensorflow()
    intra, inter = threads_for(sharers)
    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError:  # the runtime exists already: its pools are fixed
        return None
    return intra, inter


def configure_graph_optimizer() -> bool:
    """Turn Grappler off on a CPU-only node (faster first step, same step time); returns
    whether it was turned off."""
    if not enabled() or gpu_count_without_tf():
        return False
    import_tensorflow().config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    return True


def pack_bytes(implementation: str) -> int:
    """`bytes_per_pack` for the collective implementation (0 = TensorFlow's default)."""
    return RING_PACK_BYTES if enabled() and implementation.upper() == "RING" else 0
