"""Engines that end with their kernel, however it ends.

A kernel killed by the out-of-memory killer or SIGKILL runs no exit hook: its local engines
(TensorFlow loaded, ports open) would stay on the login node and its Slurm engines job would hold
its nodes until the time limit. A small watcher process in its own session holds the read end of
a pipe whose write end only the kernel has: when the kernel ends, the pipe reports end-of-file at
once (no polling) and the watcher stops the cluster, touching only what is provably its own
(`helpers.ownership`). A normal stop writes one byte first, and the watcher just leaves.
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
    elif kind == "job":
        from helpers.slurm_engines import SlurmJob

        SlurmJob(ident).cancel_if_ours()
