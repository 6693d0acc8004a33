"""Whether this host may run local multi-worker TensorFlow: never a login node, and it fails closed.

TensorFlow's gRPC worker ports accept anyone who can reach them and run what they are sent, and
a login node is shared with every user of the centre. So local workers, local engines and
`horovodrun` run only
- inside an allocation, on one of its own nodes (`SLURMD_NODENAME` set, which Slurm sets in
  batch scripts and steps, or this host in the job's node list): `salloc` sets `SLURM_JOB_ID`
  but usually leaves its shell on the login node, so the job id alone proves nothing;
- outside any allocation, where no Slurm is found: no configuration (slurm.conf, `SLURM_CONF`,
  the variables or modulefiles of a Slurm module) and no `sinfo` that answers, hangs, or fails
  after finding a configuration (a controller that does not answer is still a cluster);
- or where the machine's only user says so: `COURSE_LOCAL_WORKERS=allow` (never on a login node).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

from ..errors import CourseError
from ..settings import text
from .step import expand_hostlist

LOCAL_WORKERS_ENV = "COURSE_LOCAL_WORKERS"  # "allow": the owner's override, never on a login node
SINFO_TIMEOUT_S = 10.0  # an sinfo that has not answered by then counts as a cluster
CONFIG_FILES = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/usr/local/etc/slurm.conf",
                "/opt/slurm/etc/slurm.conf", "/run/slurm/conf/slurm.conf", "/var/spool/slurmd/conf-cache/slurm.conf")
MODULE_VARIABLES = ("EBROOTSLURM", "SLURM_ROOT", "SLURM_HOME", "SLURM_DIR")  # what Slurm modules set
NO_CONFIGURATION = "configuration source"  # sinfo's "Could not establish a configuration source"


def check_local_workers(what: str) -> None:
    """Refuse local multi-worker TensorFlow unless this host is provably not a login node."""
    if text(LOCAL_WORKERS_ENV).lower() == "allow":
        return
    if os.environ.get("SLURM_JOB_ID"):
        if on_allocation_node():
            return
        nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or "unknown"
        raise CourseError(
            f"{what} would run multi-worker TensorFlow on {socket.gethostname()}, which is not a node of Slurm job "
            f"{os.environ['SLURM_JOB_ID']} ({nodes}): salloc leaves its shell on the login node, whose gRPC worker "
            "ports anyone on it can use; run on the job's nodes (srun, a batch job, COURSE_ENGINES=slurm)")
    found = slurm_here()
    if found:
        raise CourseError(
            f"{what} would run multi-worker TensorFlow here, on a machine Slurm schedules from (a login node?: "
            f"{found}), whose gRPC worker ports anyone on it can use: run the lesson on compute nodes "
            f"(COURSE_ENGINES=slurm, or a JupyterHub server / salloc with srun), or set {LOCAL_WORKERS_ENV}=allow "
            "if you alone use this machine (never on a login node)")


def on_allocation_node() -> bool:
    """Inside a job, whether this process runs on one of the job's nodes (not salloc's login shell)."""
    if os.environ.get("SLURMD_NODENAME"):
        return True
    listed = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or ""
    try:
        nodes = {name.split(".")[0] for name in expand_hostlist(listed)}
    except CourseError:
        return False  # a list we cannot read (or none) proves nothing
    host = socket.gethostname()
    return bool(nodes & {host, host.split(".")[0]})


def slurm_here() -> str | None:
    """Why this host counts as part of a Slurm cluster, or None when nothing says so."""
    configured = slurm_configuration()
    if configured:
        return configured
    if shutil.which("sinfo") is None:
        return None
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%P"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=SINFO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer within {SINFO_TIMEOUT_S:g} s"
    except OSError as exc:
        return f"sinfo is on PATH but does not run ({exc.strerror})"
    if done.returncode == 0:
        return "sinfo answers"
    if NO_CONFIGURATION in done.stderr:
        return None  # Slurm's commands installed, no cluster configured
    return f"sinfo failed after finding a configuration ({(done.stderr.strip().splitlines() or ['?'])[-1][:120]})"


def slurm_configuration() -> str | None:
    """A Slurm configuration or module visible here, whether or not its commands are on PATH."""
    if os.environ.get("SLURM_CONF"):
        return "SLURM_CONF is set"
    for name in MODULE_VARIABLES:
        if os.environ.get(name):
            return f"{name} is set (a Slurm module)"
    for path in CONFIG_FILES:
        if Path(path).exists():
            return f"{path} exists"
    for directory in filter(None, os.environ.get("MODULEPATH", "").split(os.pathsep)):
        try:
            modules = [entry.name for entry in os.scandir(directory) if entry.name.lower().startswith("slurm")]
        except OSError:
            continue
        if modules:
            return f"a Slurm module {modules[0]} in {directory}"
    return None
