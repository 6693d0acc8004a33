"""Run N local worker processes with TF_CONFIG, each with a hard-kill deadline.

A MultiWorkerMirroredStrategy worker whose peer never arrives waits for good and ignores
SIGTERM; only SIGKILL ends it. Everything here therefore kills with SIGKILL at the
deadline, and kills the whole group when one worker fails, so nothing is left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from . import HUB_SECRETS
from .environment import PROXY_VARIABLES
from .errors import CourseError
from .gpus import plan_for_local_worker
from .kernel_watch import end_with_kernel
from .resolver import free_port, make_tf_config
from .slurm.login_node import check_local_workers


@dataclass
class WorkerOutcome:
    rank: int
    returncode: int | None  # None: killed by the launcher
    output: str
    killed_because: str | None = None  # "deadline" or "rank N failed" when killed


def worker_env(workers: list[str], rank: int, base: dict | None = None) -> dict:
    """Environment of local worker `rank`: TF_CONFIG, its own GPUs, quiet logs, no proxies, no hub token."""
    env = dict(os.environ if base is None else base)
    env["TF_CONFIG"] = json.dumps(make_tf_config(workers, rank))
    env.update(plan_for_local_worker(len(workers), rank, env).env())
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for name in (*PROXY_VARIABLES, *HUB_SECRETS):
        env.pop(name, None)
    return env


def run_local_workers(args: list[str], n: int, deadline_s: float = 300.0,
                      env: dict | None = None, ok_statuses: tuple[int, ...] = (0,)) -> list[WorkerOutcome]:
    """Run `python args...` as `n` workers of one cluster on localhost; wait at most `deadline_s`.

    If any worker fails, the others are killed at once (they would wait for it for ever). An exit
    status in `ok_statuses` is not a failure: e.g. a program that saved and asks to be requeued
    (notebook 11), whose peers are still writing their own last lines.
    """
    if n < 1:
        raise CourseError(f"cannot run {n} workers: ask for at least 1")
    check_local_workers(f"{n} local workers")
    workers = [f"localhost:{free_port()}" for _ in range(n)]
    note = plan_for_local_worker(n, 0, env).note
    if note:
        print(f"note: {note}", file=sys.stderr)
    procs = [subprocess.Popen([sys.executable, *args], env=worker_env(workers, rank, env),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
             for rank in range(n)]
    release = end_with_kernel(*procs)  # a killed kernel takes its workers (and their ports) with it
    try:
        outputs = _wait_all(procs, deadline_s, ok_statuses)
    finally:
        release()
    return [WorkerOutcome(rank, proc.returncode if not why else None, out, why)
            for rank, (proc, (out, why)) in enumerate(zip(procs, outputs))]


def _wait_all(procs: list[subprocess.Popen], deadline_s: float,
              ok_statuses: tuple[int, ...] = (0,)) -> list[tuple[str, str | None]]:
    import threading

    chunks: list[list[str]] = [[] for _ in procs]
    readers = [threading.Thread(target=lambda p=p, c=c: c.extend(iter(p.stdout.readline, "")),
                                daemon=True) for p, c in zip(procs, chunks)]
    for reader in readers:
        reader.start()
    end = time.monotonic() + deadline_s
    killed: list[str | None] = [None] * len(procs)
    while any(p.poll() is None for p in procs):
        failed = next((i for i, p in enumerate(procs) if p.poll() not in (None, *ok_statuses)), None)
        if failed is not None or time.monotonic() > end:
            why = "deadline" if failed is None else f"rank {failed} failed"
            for i, p in enumerate(procs):
                if p.poll() is None:
                    kill_group(p.pid)
                    killed[i] = why
            break
        time.sleep(0.1)
    for p in procs:
        p.wait()
    for reader in readers:
        reader.join(timeout=5)
    return [("".join(c), k) for c, k in zip(chunks, killed)]


def kill_group(pid: int) -> None:
    """SIGKILL a process and its session (TensorFlow workers ignore SIGTERM)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
