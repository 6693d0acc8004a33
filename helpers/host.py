"""The layer `environment`, `gpus` and `tuning` share: the CPU count, `import_tensorflow()` (quietly), whether it ran, the GPU memory cap.

Kept apart from `environment`, `tuning` and `gpus` so that all of them can use these without
importing each other; this module imports nothing of the course but the settings table. The one
place to import TensorFlow quietly from (`import_tensorflow`).
"""

from __future__ import annotations

import functools
import os
import sys

from .settings import text as setting_text

# A GPU shared by several of the course's processes (the gpu class layout, helpers.gpus): each
# process's memory limit in MiB, applied where TensorFlow is imported, before it initialises.
GPU_MEMORY_ENV = "COURSE_GPU_MEMORY_MIB"


@functools.cache
def tensorflow_is_cpu_build() -> bool:
    """Whether the installed TensorFlow is the CPU wheel (`tensorflow-cpu`, no `tensorflow`): it can use
    no GPU, whatever CUDA_VISIBLE_DEVICES names (the local Slurm's simulated GPUs, or a GPU node given
    the CPU install); found from the installed distributions, without importing TensorFlow."""
    from importlib.metadata import PackageNotFoundError, distribution

    def installed(name: str) -> bool:
        try:
            distribution(name)
        except PackageNotFoundError:
            return False
        return True

    return installed("tensorflow-cpu") and not installed("tensorflow")


def cpu_count() -> int:
    """CPUs this process may run on (the Slurm/cgroup affinity, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def import_tensorflow():
    """Import TensorFlow without the C++ start-up lines it writes straight to stderr, and
    without the two kinds of log line that only alarm a learner (below). Lessons call it
    through `environment.local_replicas` or the engines' start, before their own
    `import tensorflow as tf`, which then finds TensorFlow loaded.

    TensorFlow 2.21 logs "oneDNN custom operations are on" and CPU-feature notes through absl
    before logging is initialised, ignoring TF_CPP_MIN_LOG_LEVEL; in a `%%px` cell that is two
    screens of noise per engine. Only the import is silenced (file descriptor 2 points at
    /dev/null for its duration); errors still raise as usual.
    """
    if "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        tf.get_logger().setLevel("ERROR")
        limit_gpu_memory(tf)
        return tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # C++ INFO and WARNING lines (rendezvous CANCELLED, ...)
    # Our pipelines shuffle before batching, as the course teaches; Keras would warn on every
    # `fit` that its own `shuffle=True` does not apply to a tf.data.Dataset.
    import warnings

    warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed", category=UserWarning)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            try:
                import tensorflow as tf
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
    tf.get_logger().setLevel("ERROR")
    limit_gpu_memory(tf)
    return tf


def limit_gpu_memory(tf=None) -> int | None:
    """Give each GPU of this process one logical device of `COURSE_GPU_MEMORY_MIB` MiB, if set;
    returns the limit. Only before TensorFlow initialises, and never over a split a lesson made
    already (`environment.split_gpu` divides the same limit). Never run on a real GPU here."""
    text = setting_text(GPU_MEMORY_ENV)
    if not text.isdigit() or (tf is None and "tensorflow" not in sys.modules):
        return None
    tf = tf or sys.modules["tensorflow"]
    for gpu in tf.config.list_physical_devices("GPU"):
        if tf.config.get_logical_device_configuration(gpu) is None:
            try:
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=int(text))])
            except RuntimeError:  # initialised already: the kernel or engine must restart
                return None
    return int(text)


def tensorflow_initialised() -> bool:
    """Whether TensorFlow's runtime context already exists in this process."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None  # noqa: SLF001 - no public API
