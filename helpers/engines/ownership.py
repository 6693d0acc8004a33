"""What is provably ours before anything is signalled or cancelled.

ipyparallel rebuilds a cluster from its file and signals the PIDs written there; after a reboot,
or long enough, such a PID is someone else's process (as root: anyone's). So a process counts as
a cluster's only if it is this user's, runs ipyparallel and carries the cluster's id in its
environment; a Slurm job only if it is this user's and named for the cluster. A cluster started
by a kernel that still runs belongs to that kernel: `cluster stop --all` leaves it alone unless
forced.
"""

from __future__ import annotations

import os

from ..settings import value

OWNER_PID_ENV = "COURSE_OWNER_PID"  # in the controller's environment: the kernel that started it
OWNER_START_ENV = "COURSE_OWNER_START"


def is_ours(process, cluster_id: str, kind: str = "ipyparallel") -> bool:
    """This user's process, running `kind` (e.g. ipyparallel.controller), of cluster `cluster_id`."""
    import psutil

    try:
        return (process.uids().real == os.getuid() and kind in " ".join(process.cmdline())
                and process.environ().get("IPP_CLUSTER_ID") == cluster_id)
    except psutil.Error:
        return False


def controllers_of(cluster_id: str) -> list:
    """Controller processes of this cluster found by name, whoever their parent is now."""
    import psutil

    return [p for p in psutil.process_iter(["cmdline"])
            if "ipyparallel.controller" in " ".join(p.info["cmdline"] or [])
            and is_ours(p, cluster_id, "ipyparallel.controller")]


def controller_tree(cluster) -> list:
    """The controller and its scheduler processes, if provably this cluster's."""
    import psutil

    process = getattr(getattr(cluster, "controller", None), "process", None)
    if process is None:
        return []
    try:
        if not process.is_running():
            return []
        tree = [process, *process.children(recursive=True)]
    except psutil.Error:
        return []
    return [p for p in tree if is_ours(p, cluster.cluster_id, "ipyparallel.controller")]


def kill(processes: list) -> None:
    """Kill what is still running of `processes` and wait until it is gone (is_running also checks
    the start time, so a PID reused since the list was made is never signalled)."""
    import psutil

    alive = []
    for process in processes:
        try:
            if process.is_running():
                process.kill()
                alive.append(process)
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=10)


def owner_env() -> dict[str, str]:
    """For the controller's environment: this process (the kernel) and its start time."""
    import psutil

    return {OWNER_PID_ENV: str(os.getpid()), OWNER_START_ENV: f"{psutil.Process().create_time():.2f}"}


def living_owner(cluster) -> int | None:
    """The PID of the kernel that started this cluster, if it still runs (None: gone, or a CLI cluster)."""
    import psutil

    process = getattr(getattr(cluster, "controller", None), "process", None)
    try:
        env = process.environ() if process is not None else {}
        pid, started = int(value(OWNER_PID_ENV, env) or "0"), float(value(OWNER_START_ENV, env) or "0")
        if pid and abs(psutil.Process(pid).create_time() - started) < 0.05:
            return pid
    except (psutil.Error, ValueError):
        pass
    return None


def prune_foreign(cluster) -> list[str]:
    """Drop from a cluster loaded from its file every process and job that is not provably its
    own, so that stopping it signals nothing else; returns what was left alone."""
    from ..slurm.queue import slurm_job_is_ours
    from .on_slurm import is_engines_job_name

    left = []
    process = getattr(getattr(cluster, "controller", None), "process", None)
    if process is not None and not is_ours(process, cluster.cluster_id, "ipyparallel.controller"):
        left.append(f"PID {process.pid} (not this cluster's controller any more)")
        cluster.controller = None
    for set_id, engine_set in list(cluster.engines.items()):
        job_id = getattr(engine_set, "job_id", "")
        if job_id:
            if not slurm_job_is_ours(job_id, lambda name: is_engines_job_name(name, cluster.cluster_id)):
                left.append(f"Slurm job {job_id} (not this cluster's engines job)")
                cluster.engines.pop(set_id)
            continue
        step = getattr(engine_set, "process", None)  # engines as one `srun` step
        if step is not None and not is_ours(step, cluster.cluster_id, "srun"):
            left.append(f"PID {step.pid} (not this cluster's srun any more)")
            cluster.engines.pop(set_id)
            continue
        launchers = getattr(engine_set, "launchers", {})
        for key, launcher in list(launchers.items()):
            engine = getattr(launcher, "process", None)
            if engine is not None and not is_ours(engine, cluster.cluster_id, "ipyparallel.engine"):
                left.append(f"PID {engine.pid} (not this cluster's engine any more)")
                launchers.pop(key)
        if not launchers and hasattr(engine_set, "launchers"):
            cluster.engines.pop(set_id)
    return left
