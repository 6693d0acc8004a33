"""What this process has: CPUs, GPUs, a Slurm allocation or step, versions.

Two things here must run before TensorFlow initialises (splitting the CPU into logical
devices, removing proxies for gRPC), so nothing in this module imports TensorFlow at
import time.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from .errors import CourseError

PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                   "all_proxy", "ALL_PROXY")


def remove_proxies() -> dict[str, str]:
    """Remove HTTP(S) proxy variables from this process's environment.

    gRPC, which MultiWorkerMirroredStrategy uses between workers, honours these
    variables and then sends worker-to-worker traffic to the centre's web proxy, where
    it stalls. HPC centres therefore ask jobs to unset them. Returns what was removed so a
    caller can report it.
    """
    return {name: os.environ.pop(name) for name in PROXY_VARIABLES if name in os.environ}


def cpu_count() -> int:
    """CPUs this process may run on (the Slurm/cgroup affinity, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def gpu_count_without_tf() -> int:
    """GPUs visible to this process, found without initialising TensorFlow."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() not in ("", "-1")])
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


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


def import_tensorflow():
    """Import TensorFlow without the C++ start-up lines it writes straight to stderr.

    TensorFlow 2.21 logs "oneDNN custom operations are on" and CPU-feature notes through absl
    before logging is initialised, ignoring TF_CPP_MIN_LOG_LEVEL; in a `%%px` cell that is two
    screens of noise per engine. Only the import is silenced (file descriptor 2 points at
    /dev/null for its duration); errors still raise as usual.
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
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
    return tf


def tensorflow_initialised() -> bool:
    """Whether TensorFlow's runtime context already exists in this process."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None  # noqa: SLF001 - no public API


def split_cpu(replicas: int) -> list:
    """Split the CPU into `replicas` logical devices so MirroredStrategy has replicas.

    TensorFlow fixes its device list when it initialises, so this must run before the
    first op. Calling it twice with the same count is harmless.
    """
    if replicas < 1:
        raise CourseError(f"cannot split the CPU into {replicas} devices: ask for 1 or more")
    tf = import_tensorflow()

    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == replicas:
        return tf.config.list_logical_devices("CPU")
    from .tuning import configure_threads

    configure_threads(replicas)  # before the runtime starts, like the device split
    try:
        tf.config.set_logical_device_configuration(cpu, wanted)
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        raise CourseError(f"TensorFlow already initialised with {have} CPU device(s); split the "
                          f"CPU into {replicas} before any TensorFlow op (restart the kernel and "
                          "call it first)") from None
    return tf.config.list_logical_devices("CPU")


def versions() -> dict[str, str]:
    """Versions of the pieces the course depends on (those importable here)."""
    from importlib import metadata

    found = {"python": platform.python_version()}
    for dist in ("tensorflow", "tensorflow-cpu", "keras", "tensorflow-datasets", "ipyparallel",
                 "jupyterlab", "numpy"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return found


def report() -> dict:
    """Everything the course detected about this process, for `helpers info` and notebook 00."""
    slurm = slurm_info()
    return {
        "host": platform.node(),
        "cpus": cpu_count(),
        "gpus": gpu_count_without_tf(),
        "slurm": None if slurm is None else {
            "job_id": slurm.job_id, "in_step": slurm.step, "procid": slurm.procid,
            "ntasks": slurm.ntasks, "nodelist": slurm.nodelist, **slurm.extra},
        "tf_config": bool(os.environ.get("TF_CONFIG")),
        "proxies_set": [name for name in PROXY_VARIABLES if name in os.environ],
        "versions": versions(),
    }


def output_dir() -> "Path":
    """Where runs write models, results and figures: `COURSE_OUTPUT_DIR`, else build/ of
    the course checkout when this user may write there, else ~/tf-hpc-course-output (a course
    installed once for everybody, e.g. for a JupyterHub, is read-only for its users).
    Multi-node runs need it on a shared filesystem."""
    from pathlib import Path

    if os.environ.get("COURSE_OUTPUT_DIR"):
        return Path(os.environ["COURSE_OUTPUT_DIR"])
    repo = Path(__file__).resolve().parents[1]
    build = repo / "build"
    if (repo / "pyproject.toml").is_file() and os.access(build if build.exists() else repo, os.W_OK):
        return build
    return Path.home() / "tf-hpc-course-output"


def local_replicas(cpu_replicas: int = 2) -> int:
    """Make sure this process has replicas for MirroredStrategy; returns how many.

    GPUs: one replica per GPU, nothing to do. CPU only: split the CPU into `cpu_replicas`
    logical devices (before TensorFlow initialises). On CPU the logical devices share the
    same cores, so they show the mechanics of data parallelism, not a speed-up.
    """
    gpus = gpu_count_without_tf()
    if gpus:
        return gpus
    return len(split_cpu(cpu_replicas))
