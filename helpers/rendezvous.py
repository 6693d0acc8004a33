"""A deadline for the moment workers meet: MultiWorkerMirroredStrategy's constructor.

The constructor waits for every peer for ever, inside TensorFlow's C++ runtime, and ignores
SIGTERM: a worker whose peer never starts (a typo in TF_CONFIG, a task that failed, an engine
that was not started) freezes a `%%px` cell or a batch job until its time limit. Python cannot
interrupt that call, and it holds the GIL while it waits, so no thread of ours can run either.
A tiny watcher *process* does the only thing that works: when the deadline passes before the
constructor returns, it names the peers that are not listening (on the worker's stderr, i.e.
the job log) and ends the worker with exit status `DEADLINE_EXIT` (42). That status comes
from a C-level signal handler (`_exit` installed for signal 42 with ctypes), which needs
neither the GIL nor Python, so the shell shows status 42 instead of "Killed" and 137. If the
handler cannot be installed or the worker still runs 2 s later, SIGKILL follows.
"""

from __future__ import annotations

import os
import socket
import sys
import signal
import subprocess
from contextlib import contextmanager

from .settings import value

RENDEZVOUS_ENV = "COURSE_RENDEZVOUS_TIMEOUT"
DEFAULT_RENDEZVOUS_S = 120.0
DEADLINE_EXIT = 42  # exit status of a worker ended by the rendezvous deadline (docs/troubleshooting.md)
_DEADLINE_SIGNAL = DEADLINE_EXIT  # a real-time signal on Linux; its handler _exit()s with its own number


def _exit_on_deadline_signal(install: bool) -> bool:
    """Install (or remove) `_exit` as the C handler of signal 42: it runs without the GIL."""
    import ctypes

    if not (signal.SIGRTMIN <= _DEADLINE_SIGNAL <= signal.SIGRTMAX):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        handler = ctypes.cast(libc._exit, ctypes.c_void_p) if install else ctypes.c_void_p(0)  # 0: SIG_DFL
        return libc.signal(_DEADLINE_SIGNAL, handler) != ctypes.c_void_p(-1).value
    except (OSError, AttributeError):
        return False


def rendezvous_seconds() -> float:
    from .errors import CourseError

    raw = value(RENDEZVOUS_ENV) or ""
    try:
        seconds = float(raw) if raw else DEFAULT_RENDEZVOUS_S
    except ValueError:
        raise CourseError(f"{RENDEZVOUS_ENV}={raw!r} is not a number of seconds") from None
    if seconds <= 0:
        raise CourseError(f"{RENDEZVOUS_ENV}={raw!r} must be more than 0 seconds")
    return seconds


def listening(address: str, timeout: float = 2.0) -> bool:
    """Whether something accepts TCP connections at `host:port`."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def missing_peers(workers: list[str], rank: int) -> list[tuple[int, str]]:
    """The (rank, address) of every other worker that does not listen."""
    return [(r, address) for r, address in enumerate(workers) if r != rank and not listening(address)]


def expiry_message(workers: list[str], rank: int, seconds: float) -> str:
    missing = missing_peers(workers, rank)
    what = (", ".join(f"rank {r} at {a}" for r, a in missing) if missing
            else "none (all listen, but not every worker joined: was one started twice or restarted?)")
    return (f"worker {rank} waited {seconds:.0f} s for its {len(workers) - 1} peer(s) to create "
            f"MultiWorkerMirroredStrategy; not reachable: {what}. Start every worker of the cluster "
            f"(same TF_CONFIG or srun step) and check hosts and ports; this worker exits now "
            f"(deadline: {RENDEZVOUS_ENV}, {seconds:.0f} s)")


@contextmanager
def rendezvous_deadline(workers: list[str], rank: int, seconds: float | None = None):
    """Run the body (the strategy's constructor); kill this process if it outlasts the deadline."""
    seconds = rendezvous_seconds() if seconds is None else seconds
    handled = _exit_on_deadline_signal(True)
    done_read, done_write = os.pipe()
    watcher = subprocess.Popen(
        [sys.executable, "-c", "from helpers.rendezvous import _watch; _watch()",
         str(done_read), str(os.getpid()), str(seconds), str(int(handled)), str(rank), *workers],
        pass_fds=(done_read,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.close(done_read)
    try:
        yield
    finally:
        os.close(done_write)  # the watcher sees end-of-file and leaves
        try:
            watcher.wait(timeout=5)
        except subprocess.TimeoutExpired:
            watcher.kill()
        if handled:
            _exit_on_deadline_signal(False)


def _watch() -> None:
    """The watcher process: wait for end-of-file on the pipe, or the deadline."""
    import select

    import time

    done_fd, pid, seconds, handled, rank, *workers = sys.argv[1:]
    ready, _, _ = select.select([int(done_fd)], [], [], float(seconds))
    if ready:
        return
    message = "error: " + expiry_message(workers, int(rank), float(seconds))
    print(message, file=sys.stderr, flush=True)
    try:
        if handled == "1":
            os.kill(int(pid), _DEADLINE_SIGNAL)  # the worker _exit()s with status DEADLINE_EXIT
            for _ in range(20):
                time.sleep(0.1)
                os.kill(int(pid), 0)  # raises once it is gone
        os.kill(int(pid), signal.SIGKILL)
    except ProcessLookupError:
        pass
