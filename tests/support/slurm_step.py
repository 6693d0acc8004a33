"""A Slurm step planted in the environment for tests of the course's resolver: job 7, 4 tasks on node[1-2], and a
port range whose derived pair is free on this machine now (shared by tests/test_resolver.py and lesson 03's proof
tests, so neither imports the other)."""

import socket

from helpers import resolver


def free_pair() -> int:
    """A port P such that P and P + 1 are free on every interface now (the kernel picks P): what a step's
    two tasks on one node derive, instead of fixed ports another process on this machine may hold."""
    while True:
        with socket.socket() as first, socket.socket() as second:
            first.bind(("0.0.0.0", 0))
            port = first.getsockname()[1]
            try:
                second.bind(("0.0.0.0", port + 1))
            except OSError:
                continue
            if port - 24 >= 1024 and port + 1 <= 65535:
                return port


def step_range(monkeypatch, avoid: int | None = None) -> int:
    """Set COURSE_PORT_RANGE so that job 7, step 0 derives the free pair (P, P + 1): block 7*16 of 2
    ports lands at LOW + (112 % 50) * 2 = LOW + 24 in a range of 100 ports. Returns P."""
    while True:
        port = free_pair()
        low = port - 24
        if avoid is None or not low <= avoid <= low + 100:
            monkeypatch.setenv(resolver.PORT_RANGE_ENV, f"{low}-{low + 100}")
            return port


def slurm_env(monkeypatch, procid: str = "1") -> None:
    """Job 7, step 0: 4 tasks, 2 a node on node[1-2], this process rank `procid`, no GPU, no TF_CONFIG."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a CPU node, whatever this machine has
    for name in ("SLURM_NODEID", "SLURM_LOCALID", "SLURM_DISTRIBUTION", "SLURM_STEP_ID", "SLURM_GPUS_ON_NODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"SLURM_JOB_ID": "7", "SLURM_PROCID": procid, "SLURM_STEP_NUM_TASKS": "4",
                        "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}.items():
        monkeypatch.setenv(name, value)
