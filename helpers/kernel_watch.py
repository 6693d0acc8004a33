"""Engines, and whatever else a kernel starts, that end with their kernel, however it ends.

A kernel killed by the out-of-memory killer or SIGKILL runs no exit hook: its local engines
(TensorFlow loaded, ports open) would stay on the login node and its Slurm engines job would hold
its nodes until the time limit. A small watcher process in its own session holds the read end of
a pipe whose write end only the kernel has: when the kernel ends, the pipe reports end-of-file at
once (no polling) and the watcher calls the stop it was handed (the cluster's, which touches
only what is provably its own, or the engines job's). A normal stop writes one byte first, and
the watcher just leaves. The watcher imports nothing of the course until it has to stop
something: it is handed its stop as a function, which it finds again by module and name.

The same watch covers processes a kernel starts in sessions of their own, with ports open:
local TensorFlow workers, `horovodrun`, TensorBoard (`end_with_kernel`). Each is named by its
PID and start time, so a PID reused since is never signalled.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])
_PACKAGE = __name__.split(".")[0]  # the watcher calls stops of this package only


def watch(ident: str, stop: Callable[[str], object]) -> Callable[[], None]:
    """Start a watcher that calls `stop(ident)` if this kernel ends first; returns the function
    that tells it the kernel stopped `ident` itself. `stop` is a module-level function of this
    package: the watcher, another process, imports it by its module and name."""
    entry = f"{stop.__module__}:{stop.__qualname__}"
    if not entry.startswith(f"{_PACKAGE}.") or "." in stop.__qualname__:
        raise ValueError(f"the kernel watcher calls module-level functions of {_PACKAGE} only, not {entry}")
    read_end, write_end = os.pipe()
    subprocess.Popen([sys.executable, "-c", f"from {__name__} import _main; _main()",
                      str(read_end), entry, ident],
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
    return watch(",".join(f"{pid}:{psutil.Process(pid).create_time()!r}" for pid in pids), kill_processes)


def kill_processes(ident: str) -> None:
    """Kill `pid:start-time,...` with their process groups, skipping PIDs reused since."""
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
    read_end, entry, ident = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    if os.read(read_end, 1):  # a byte: stopped normally; end-of-file: the kernel is gone
        return
    module, _, name = entry.partition(":")
    if not module.startswith(f"{_PACKAGE}."):
        return
    try:
        getattr(importlib.import_module(module), name)(ident)
    except Exception:  # noqa: BLE001 - already gone, or nothing left to stop: the kernel is gone either way
        pass
