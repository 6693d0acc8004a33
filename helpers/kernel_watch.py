"""Engines, and whatever else a kernel starts, that end with their kernel, however it ends.

A kernel killed by the out-of-memory killer or SIGKILL runs no exit hook: its local engines
(TensorFlow loaded, ports open) would stay on the login node and its Slurm engines job would hold
its nodes until the time limit. A small watcher process in its own session holds the read end of
a pipe whose write end only the kernel has: when the kernel ends, the pipe reports end-of-file at
once (no polling) and the watcher stops the cluster, touching only what is provably its own
(`helpers.ownership`). A normal stop writes one byte first, and the watcher just leaves.

The same watch covers processes a kernel starts in sessions of their own, with ports open:
local TensorFlow workers, `horovodrun`, TensorBoard (`end_with_kernel`). Each is named by its
PID and start time, so a PID reused since is never signalled.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


def watch(kind: str, ident: str) -> Callable[[], None]:
    """Start the watcher of cluster `ident` (kind "cluster") or engines job `ident` (kind "job");
    returns the function that tells it the kernel stopped them itself."""
    read_end, write_end = os.pipe()
    subprocess.Popen([sys.executable, "-c", "from helpers.kernel_watch import _main; _main()",
                      str(read_end), kind, ident],
                     pass_fds=(read_end,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, cwd=_PACKAGE_ROOT)
    os.close(read_end)

    def release() -> None:
        try:
            os.write(write_end, b"s")
            os.close(write_end)
        except OSError:
            pass

    return release


def end_with_kernel(*processes) -> Callable[[], None]:
    """Kill these processes (`subprocess.Popen` objects or PIDs), with their process groups, when
    this kernel ends without calling the returned release first."""
    import psutil

    pids = [p if isinstance(p, int) else p.pid for p in processes]
    return watch("processes", ",".join(f"{pid}:{psutil.Process(pid).create_time()!r}" for pid in pids))


def _kill_processes(ident: str) -> None:
    import signal

    import psutil

    for item in ident.split(","):
        pid, started = item.split(":")
        try:
            proc = psutil.Process(int(pid))
            if proc.create_time() != float(started):
                continue  # the PID belongs to another process now
            group = os.getpgid(proc.pid)
            targets = [proc, *proc.children(recursive=True)]
            if group == proc.pid:  # a session leader of its own (start_new_session): its whole group
                os.killpg(group, signal.SIGKILL)
            for target in targets:
                target.kill()
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue


def _main() -> None:
    read_end, kind, ident = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    if os.read(read_end, 1):  # a byte: stopped normally; end-of-file: the kernel is gone
        return
    if kind == "cluster":
        from helpers.cluster import stop_by_id
        from helpers.errors import CourseError

        try:
            stop_by_id(ident)
        except CourseError:
            pass  # already gone
    elif kind == "processes":
        _kill_processes(ident)
    elif kind == "job":
        from helpers.slurm_engines import SlurmJob

        SlurmJob(ident).cancel_if_ours()
