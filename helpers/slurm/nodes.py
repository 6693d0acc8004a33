"""The cluster as Slurm shows it: partitions (shape, node sharing), reservations, node and controller addresses."""

from __future__ import annotations

import os
import re
import socket
import subprocess

from ..errors import CourseError
from ..settings import value
from .commands import run

CONTROLLER_IP_ENV = "COURSE_CONTROLLER_IP"


def partition_shape(partition: str | None = None) -> tuple[int, int]:
    """(usable nodes, GPUs per node) of a partition (the default one when None), from sinfo."""
    rows = [line.split() for line in run(["sinfo", "-h", "-o", "%P %D %G %t"]).splitlines()]
    chosen = [r for r in rows if len(r) == 4 and (r[0].rstrip("*") == partition if partition else r[0].endswith("*"))]
    if not chosen:
        raise CourseError("Slurm reports no nodes" + (f" in partition {partition}: check COURSE_SLURM_PARTITION "
                                                      "(`sinfo -s` lists the partitions)" if partition else
                                                      " in a default partition: set COURSE_SLURM_PARTITION"))
    usable = sum(int(r[1]) for r in chosen if not r[3].rstrip("*~#$@").startswith(("down", "drain", "fail")))
    gpus = [int(m.group(1)) for r in chosen for m in [re.search(r"gpu(?::[^:,(]+)?:(\d+)", r[2])] if m]
    return usable, min(gpus) if gpus else 0


def scontrol_records(args: list[str]) -> list[dict]:
    """`scontrol show ... -o` as one dict of fields per line; [] when scontrol fails."""
    try:
        done = subprocess.run(["scontrol", "show", *args, "-o"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in done.stdout.splitlines()] if done.returncode == 0 else []


def sharing_of(partition: str | None) -> tuple[bool, str]:
    """Whether Slurm itself keeps other users' jobs off a learner's nodes, and why (or why not):
    the partition (ExclusiveUser=YES, or OverSubscribe=EXCLUSIVE: whole nodes per job), or the
    class's reservation when it names one user."""
    rows = scontrol_records(["partition", *([partition] if partition else [])])
    row = next((r for r in rows if partition or r.get("Default") == "YES"), None)
    if row is None:
        return False, f"partition {partition or '(default)'} not shown by scontrol"
    name = row.get("PartitionName", "?")
    if row.get("ExclusiveUser") == "YES":
        return True, f"partition {name} is ExclusiveUser=YES: one user per node"
    if row.get("OverSubscribe", "").startswith("EXCLUSIVE"):
        return True, f"partition {name} is OverSubscribe=EXCLUSIVE: whole nodes per job"
    said = f"partition {name} lets users share nodes (ExclusiveUser={row.get('ExclusiveUser', '?')}, " \
           f"OverSubscribe={row.get('OverSubscribe', '?')})"
    reservation = os.environ.get("SBATCH_RESERVATION") or os.environ.get("SLURM_JOB_RESERVATION")
    if reservation:
        found = scontrol_records(["reservation", reservation])
        users = [u for u in (found[0].get("Users", "") if found else "").split(",") if u and u != "(null)"]
        if len(users) == 1:
            return True, f"{said}, but reservation {reservation} is for {users[0]} alone"
        said += f"; reservation {reservation} is for {len(users) or 'several'} users"
    return False, said


def reservation_users(name: str) -> list[str]:
    """The users of Slurm reservation `name` (a class's learners), or a CourseError: also when it
    names none (a reservation for accounts or groups, `Users=(null)`), since a class found by user
    would then be nobody, and `class end` would end nothing and say it had."""
    try:
        done = subprocess.run(["scontrol", "show", "reservation", "-o", name], capture_output=True, text=True,
                              timeout=60)
    except FileNotFoundError:
        raise CourseError("scontrol is not on PATH: run this where Slurm's commands are") from None
    match = re.search(r"(?:^|\s)Users=(\S+)", done.stdout)
    if done.returncode != 0 or not match:
        raise CourseError(f"no Slurm reservation {name!r} with a user list ({(done.stderr or done.stdout).strip()[:200]})")
    users = [user for user in match.group(1).split(",") if user and user != "(null)"]
    if not users:
        by = [f"{field}={found}" for field in ("Accounts", "Groups")
              for found in re.findall(rf"(?:^|\s){field}=(\S+)", done.stdout) if found != "(null)"]
        raise CourseError(f"Slurm reservation {name!r} names no users (Users=(null){', ' + ', '.join(by) if by else ''}): "
                          "its learners cannot be told from anyone else's jobs in it; name the class with --group "
                          "(the hub group of its learners) or give the reservation Users=")
    return users


def node_address(node: str) -> str:
    """The IP address of a compute node, as Slurm knows it (NodeAddr) and resolved."""
    match = re.search(r"NodeAddr=(\S+)", run(["scontrol", "show", "node", "-o", node]))
    address = match.group(1) if match else node
    try:
        return socket.gethostbyname(address)
    except OSError:
        raise CourseError(f"cannot resolve the address {address!r} of node {node}: set "
                          f"{CONTROLLER_IP_ENV} to this host's address on the cluster network") from None


def controller_ip(partition: str | None = None) -> str:
    """This host's address on the network the compute nodes use.

    `COURSE_CONTROLLER_IP` wins; otherwise the local address the kernel would use to reach the
    partition's first node (a UDP socket's route lookup: no packet is sent).
    """
    if value(CONTROLLER_IP_ENV):
        return checked_controller_ip(value(CONTROLLER_IP_ENV))
    args = ["sinfo", "-h", "-N", "-o", "%N"] + (["-p", partition] if partition else [])
    nodes = run(args).split()
    if not nodes:
        raise CourseError("Slurm reports no nodes" + (f" in partition {partition}: check COURSE_SLURM_PARTITION "
                                                      "(`sinfo -s` lists the partitions)" if partition else ""))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((node_address(nodes[0]), 9))
        return probe.getsockname()[0]


def checked_controller_ip(address: str) -> str:
    """An address the controller may listen on: one interface, never all of them (every user on
    every network the host is on could then connect, and read the engines' output)."""
    if address.strip() in ("*", "0.0.0.0", "::", "[::]", ""):
        raise CourseError(f"{CONTROLLER_IP_ENV}={address!r} would make the controller listen on every interface: "
                          "give this host's address on the compute nodes' network (e.g. `hostname -I`)")
    return address.strip()
