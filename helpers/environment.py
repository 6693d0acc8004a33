"""What a lesson sets up and reports about its machine: logical CPU/GPU devices, proxies removed, versions, the output directory,
whether Linux's autogroup shares CPU time between sessions first (`autogroup`: the setting and the CPU cgroup).

Built on `host` (facts found without TensorFlow); the Slurm job and step are `helpers.slurm.step`'s.

Two things here must run before TensorFlow initialises (splitting the CPU into logical
devices, removing proxies for gRPC), so nothing in this module imports TensorFlow at
import time.
"""

from __future__ import annotations

import os
import platform

from . import tuning
from .errors import CourseError
from .gpus import gpu_count_without_tf
from .host import cpu_count, import_tensorflow
from .settings import value
from .slurm.step import slurm_info

# gRPC's C core reads grpc_proxy, https_proxy, http_proxy (first one set wins; gRPC's
# doc/environment_variables.md); the upper-case and all_proxy forms are read by other clients
# and tools a job may run, and are removed too. The one list: `python -m helpers proxies`
# prints it for the batch scripts (`unset $(... -m helpers proxies)`).
PROXY_VARIABLES = ("grpc_proxy", "https_proxy", "http_proxy", "GRPC_PROXY", "HTTPS_PROXY", "HTTP_PROXY",
                   "all_proxy", "ALL_PROXY")


def remove_proxies() -> dict[str, str]:
    """Remove HTTP(S) proxy variables from this process's environment.

    gRPC, which MultiWorkerMirroredStrategy uses between workers, honours these
    variables and then sends worker-to-worker traffic to the centre's web proxy, where
    it stalls. HPC centres therefore ask jobs to unset them. Returns what was removed so a
    caller can report it.
    """
    return {name: os.environ.pop(name) for name in PROXY_VARIABLES if name in os.environ}


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
    tuning.configure_threads(replicas)  # before the runtime starts, like the device split
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
    the course checkout when it is this user's own, else ~/tf-hpc-course-output (a course
    installed once for everybody, e.g. for a JupyterHub, or a team's group-writable checkout).
    Multi-node runs need it on a shared filesystem."""
    from pathlib import Path

    if value("COURSE_OUTPUT_DIR"):
        return Path(value("COURSE_OUTPUT_DIR"))
    return checkout_build(Path(__file__).resolve().parents[1]) or Path.home() / "tf-hpc-course-output"


def checkout_build(repo: "Path") -> "Path | None":
    """build/ of a checkout that is this user's own. A checkout someone else owns (a group-writable
    one shared by a team included) gives each user an output directory of their own instead:
    otherwise they would share one build/, where lesson 06 removes the backup directory."""
    build = repo / "build"
    try:
        mine = repo.stat().st_uid == os.getuid() and (not build.exists() or build.stat().st_uid == os.getuid())
    except OSError:
        return None
    writable = os.access(build if build.exists() else repo, os.W_OK)
    return build if (repo / "pyproject.toml").is_file() and mine and writable else None


def local_replicas(cpu_replicas: int = 2) -> int:
    """Make sure this process has replicas for MirroredStrategy; returns how many.

    Two GPUs or more: one replica per GPU, with memory growth (`gpus.plan_for_kernel`). One GPU: the lessons compare replicas
    (mirrored copies, the loss divisor, batch-norm statistics), so the GPU is split into
    `cpu_replicas` logical GPUs, and a line says so. CPU only: the CPU is split into
    `cpu_replicas` logical devices. Logical devices share one GPU or one set of cores: they show
    the mechanics of data parallelism, not a speed-up. All of it before TensorFlow initialises.
    """
    from . import gpus as course_gpus

    # before TensorFlow: memory as needed (or the kernel's share of a learner's GPU, gpu layout),
    # never nearly all of every GPU, which the engines and workers the lesson starts next need
    course_gpus.apply(course_gpus.plan_for_kernel())
    gpus = course_gpus.usable_gpu_count()
    if gpus < gpu_count_without_tf():
        print(f"CUDA_VISIBLE_DEVICES names {gpu_count_without_tf()} GPU(s), but the installed TensorFlow is the "
              "CPU build (tensorflow-cpu): the replicas are logical CPU devices (GPU nodes: make install EXTRA=gpu)")
    if gpus >= 2 or (gpus == 1 and cpu_replicas < 2):
        import_tensorflow()  # quietly, before the lesson's own import
        return gpus
    if gpus == 1:
        devices = split_gpu(cpu_replicas)
        print(f"one GPU: split into {len(devices)} logical GPUs, so this lesson has {len(devices)} replicas "
              "(they share the GPU: the mechanics are real, the speed-up is not)")
        return len(devices)
    return len(split_cpu(cpu_replicas))


def devices_unlike(devices: list[str], other: int) -> list[str]:
    """`devices`, fewer when there are as many as `other` (and more than one): another replica count.

    With two GPUs or more this kernel has one replica per GPU (`local_replicas`), and local
    engines share the same GPUs out equally, so the kernel's count and the workers' can coincide
    (4 GPUs, 2 engines of 2 GPUs each); on a CPU, `CPU_REPLICAS` equal to the engines' count does
    it too. Lesson 15 opens a model under another replica count than the workers trained with, so
    it keeps the largest proper divisor of the count then (4 -> 2, 6 -> 3, 8 -> 4; a prime -> 1):
    the kernel's batch, `per_replica` times the count, then splits evenly over the devices kept.
    Unevenly split batches (one fewer device: 128 images over 3) stop Keras 3.15's `evaluate`
    before its first step: for a model built under a strategy it averages the replicas' first input
    batches to build the model (`strategy.reduce("MEAN", ..., axis=None)` in `_maybe_symbolic_build`,
    keras/src/backend/tensorflow/trainer.py), and the sum inside that mean (an AddN) needs them of one
    shape (the error names the image batch, [43,32,32,3]).
    """
    count = len(devices)
    if count != other or count < 2:
        return list(devices)
    return list(devices[:max(d for d in range(1, count) if count % d == 0)])


def logical_gpu_memory_mib(total_mib: int | None, parts: int) -> int:
    """Memory limit of each logical GPU when one GPU is split in `parts` (90 % shared out)."""
    from .gpus import memory_share_mib

    return memory_share_mib(total_mib, parts)


def split_gpu(replicas: int) -> list:
    """Split the one visible GPU into `replicas` logical GPUs (memory limits from nvidia-smi).

    MirroredStrategy then all-reduces with TensorFlow's ring collectives instead of NCCL: it sees
    more logical than physical GPUs (tensorflow/python/distribute/mirrored_strategy.py:393-399,
    TF 2.21). Memory growth is left off: the limits bound each part.
    """
    os.environ.pop("TF_FORCE_GPU_ALLOW_GROWTH", None)
    tf = import_tensorflow()
    found = tf.config.list_physical_devices("GPU")
    if not found:
        raise CourseError(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r} names a GPU but "
                          "TensorFlow sees none: on GPU nodes install tensorflow[and-cuda] (make install "
                          "EXTRA=gpu); elsewhere unset CUDA_VISIBLE_DEVICES")
    gpu = found[0]
    from .gpus import gpu_memory_mib
    from .host import GPU_MEMORY_ENV

    budget = value(GPU_MEMORY_ENV) or ""  # this process's share of a learner's GPU (gpu layout)
    limit = (max(256, int(budget) // replicas) if budget.isdigit()
             else logical_gpu_memory_mib(gpu_memory_mib(), replicas))
    try:
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit) for _ in range(replicas)])
    except RuntimeError:
        have = len(tf.config.list_logical_devices("GPU"))
        if have == replicas:
            return tf.config.list_logical_devices("GPU")
        raise CourseError(f"TensorFlow already initialised with {have} GPU device(s); split the GPU into "
                          f"{replicas} before any TensorFlow op (restart the kernel)") from None
    return tf.config.list_logical_devices("GPU")


# Linux's scheduler (lesson 07): with autogrouping on it shares CPU time between sessions first, but not for a
# process in a CPU cgroup other than the root (man 7 sched: "The use of the cgroups(7) CPU controller to place
# processes in cgroups other than the root CPU cgroup overrides the effect of autogrouping"): a Slurm node's
# task/cgroup, a systemd slice with the cpu controller, a container. Paths, so that tests can plant others:
PROC = "/proc"
SYS_ROOT = "/"  # under which the cgroup v2 mount point that mountinfo names is read
INITIAL_CGROUP_NAMESPACE = "cgroup:[4026531835]"  # the kernel's own (PROC_CGROUP_INIT_INO, 0xEFFFFFFB)


def cpu_cgroup() -> tuple[str | None, str]:
    """This process's CPU cgroup and where it was read. cgroup v1: the path on /proc/self/cgroup's line whose
    controllers include `cpu`. Else v2: the `0::` path's nearest cgroup, itself or an ancestor below the root,
    whose `cgroup.controllers` lists `cpu`, else the root, "/". None where it cannot tell: no such file, or a
    cgroup namespace of the process's own (a container's), where "/" need not be the root."""
    from pathlib import Path

    try:
        lines = [line.split(":", 2) for line in Path(PROC, "self/cgroup").read_text().splitlines()]
        namespace = os.readlink(Path(PROC, "self/ns/cgroup"))
    except OSError as error:
        return None, f"unreadable: {error}"
    if namespace != INITIAL_CGROUP_NAMESPACE:
        return None, f"a cgroup namespace of its own, {namespace}: its '/' need not be the root"
    v1 = [path for _, controllers, path in lines if "cpu" in controllers.split(",")]
    if v1:
        return v1[0], "cgroup v1, its cpu line"
    path = next((path for _, controllers, path in lines if not controllers), None)
    mounts = [m.split() for m in Path(PROC, "self/mountinfo").read_text().splitlines() if " - cgroup2 " in m]
    if path is None or not mounts:
        return None, "no cpu controller line and no cgroup v2"
    parts = path.strip("/").split("/") if path != "/" else []
    for depth in range(len(parts), 0, -1):  # the deepest first: the cgroup the cpu controller acts on
        listed = Path(SYS_ROOT, mounts[0][4].lstrip("/"), *parts[:depth], "cgroup.controllers")
        if listed.exists() and "cpu" in listed.read_text().split():
            return "/" + "/".join(parts[:depth]), f"cgroup v2 {path}, the cpu controller on"
    return "/", f"cgroup v2 {path}, the cpu controller on for none of it below the root"


def autogroup() -> str:
    """Whether Linux shares CPU time between sessions first for this process (and the workers it starts in its
    cgroup): `sched_autogroup_enabled` 1 and the root CPU cgroup (man 7 sched), with the cgroup as read."""
    from pathlib import Path

    setting = Path(PROC, "sys/kernel/sched_autogroup_enabled")
    if not setting.exists():
        return "not on this system"
    enabled, (cgroup, how) = setting.read_text().strip(), cpu_cgroup()
    seen = f"sched_autogroup_enabled {enabled}, CPU cgroup {cgroup or '?'} ({how})"
    if enabled != "1":
        return f"{seen}: off, CPU time shared per thread (within any CPU cgroups)"
    if cgroup == "/":
        return f"{seen}: 1 and in the root CPU cgroup: sessions share first (man 7 sched)"
    if cgroup is None:
        return f"{seen}: 1, but a CPU cgroup other than the root would override it (man 7 sched): not known"
    return f"{seen}: 1, but not in the root CPU cgroup, whose controller overrides autogrouping (man 7 sched)"
