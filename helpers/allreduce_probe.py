"""All-reduce time for several message sizes between workers: the bandwidth the scaling model needs.

Run as every worker of one cluster (local processes with TF_CONFIG, or the tasks of an srun step):

    python -m helpers.allreduce_probe --sizes-mb 1 4 16 94     # prints one ALLREDUCE line per size

or, in one process over the GPUs of one node (MirroredStrategy, NCCL; logical CPUs without GPUs):

    python -m helpers.allreduce_probe --devices 8

Each worker times the same all-reduce (ring on CPU, NCCL on GPUs: `helpers.strategy`'s choice)
after one warm-up, and prints its median. The slowest worker's time is the step's: a
synchronous all-reduce ends when the last worker has its result. `measure_local` runs it as
local processes and `helpers.scaling_model.fit_link` turns the times into bandwidth and latency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from .errors import CourseError

PREFIX = "ALLREDUCE "
DEFAULT_SIZES_MB = (1.0, 4.0, 16.0, 94.0)  # 94 MB: ResNet50's gradients in float32


def allreduce_seconds(strategy, elements: int, repeats: int = 5) -> float:
    """Median seconds of an all-reduce of `elements` float32 values under `strategy`, after a warm-up
    (it traces the function and sets up the ring). Also what `doctor`'s bandwidth check times."""
    import tensorflow as tf

    x = tf.ones([elements], tf.float32)

    @tf.function(jit_compile=False)  # the all-reduce alone: TF_FUNCTION_JIT_COMPILE_DEFAULT=true would give it XLA
    def step():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("SUM", x))

    strategy.experimental_local_results(step())[0].numpy()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        strategy.experimental_local_results(step())[0].numpy()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def machine_id() -> str:
    """This kernel's boot id: equal for workers on one machine, also for emulated nodes in
    network namespaces (the local Slurm's), which share its cores."""
    import socket
    from pathlib import Path

    boot = Path("/proc/sys/kernel/random/boot_id")
    return boot.read_text().strip() if boot.exists() else socket.gethostname()


def probe(sizes_mb: list[float], repeats: int) -> list[dict]:
    """On this worker: the median all-reduce time of each message size."""
    import socket

    from .strategy import make_strategy

    strategy = make_strategy("multiworker", timeout_seconds=60)
    resolver = strategy.cluster_resolver
    rows = []
    for size in sizes_mb:
        elements = max(1, int(size * 1e6 / 4))
        rows.append({"host": socket.gethostname(), "machine": machine_id(), "rank": resolver.task_id,
                     "workers": resolver.cluster_spec().num_tasks("worker"), "bytes": elements * 4,
                     "seconds": allreduce_seconds(strategy, elements, repeats)})
    return rows


def probe_devices(devices: int, sizes_mb: list[float], repeats: int) -> list[dict]:
    """In this process: the median all-reduce time of each size over `devices` local GPUs
    (MirroredStrategy; NCCL within the node), or logical CPUs when the node has no GPU."""
    import socket

    from .environment import split_cpu
    from .gpus import gpu_count_without_tf
    from .host import import_tensorflow

    gpus = gpu_count_without_tf()
    if gpus and gpus < devices:
        raise CourseError(f"{devices} devices asked for, but this node shows {gpus} GPUs")
    if not gpus:
        split_cpu(devices)
    else:  # memory as the probe needs it, not nearly all of every GPU (engines may share them)
        from .gpus import GROWTH_ENV

        os.environ.setdefault(GROWTH_ENV, "true")
    tf = import_tensorflow()
    kind = "GPU" if gpus else "CPU"
    strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices(kind)][:devices])
    return [{"host": socket.gethostname(), "machine": machine_id(), "rank": 0, "workers": devices, "bytes": max(1, int(size * 1e6 / 4)) * 4,
             "seconds": allreduce_seconds(strategy, max(1, int(size * 1e6 / 4)), repeats)} for size in sizes_mb]


def parse(output: str) -> dict[int, float]:
    """Message bytes -> the slowest worker's median seconds, from the workers' ALLREDUCE lines."""
    slowest: dict[int, float] = {}
    for line in output.splitlines():
        if line.startswith(PREFIX):
            row = json.loads(line[len(PREFIX):])
            slowest[row["bytes"]] = max(slowest.get(row["bytes"], 0.0), row["seconds"])
    return dict(sorted(slowest.items()))


def measure_local(workers: int = 2, sizes_mb: tuple[float, ...] = DEFAULT_SIZES_MB, repeats: int = 5,
                  deadline_s: float = 300.0) -> dict[int, float]:
    """All-reduce times between `workers` local processes (ring over loopback on CPU)."""
    from .local_workers import run_local_workers

    outcomes = run_local_workers(["-m", "helpers.allreduce_probe", "--repeats", str(repeats), "--sizes-mb",
                                  *(str(s) for s in sizes_mb)], workers, deadline_s=deadline_s)
    failed = [o for o in outcomes if o.returncode != 0]
    if failed:
        tail = (failed[0].output.strip().splitlines() or ["no output"])[-1]
        raise CourseError(f"the all-reduce probe failed on rank {failed[0].rank} "
                          f"({failed[0].killed_because or f'exit status {failed[0].returncode}'}): {tail}")
    times = parse("".join(o.output for o in outcomes))
    if len(times) != len(sizes_mb):
        raise CourseError(f"the all-reduce probe reported {len(times)} of {len(sizes_mb)} message sizes")
    return times


def measure_devices(devices: int, sizes_mb: tuple[float, ...] = DEFAULT_SIZES_MB, repeats: int = 5,
                    timeout_s: float = 300.0) -> dict[int, float]:
    """All-reduce times over `devices` GPUs of this node in one fresh process (see `probe_devices`)."""
    import os
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-m", "helpers.allreduce_probe", "--devices", str(devices), "--repeats",
                               str(repeats), "--sizes-mb", *(str(s) for s in sizes_mb)], capture_output=True, text=True,
                              timeout=timeout_s, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    except subprocess.TimeoutExpired:
        raise CourseError(f"the all-reduce probe over {devices} devices did not finish within {timeout_s:.0f} s") from None
    times = parse(done.stdout)
    if done.returncode != 0 or len(times) != len(sizes_mb):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CourseError(f"the all-reduce probe over {devices} devices failed (exit status {done.returncode}): {tail}")
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.allreduce_probe", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=list(DEFAULT_SIZES_MB))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--devices", type=int, default=0,
                        help="one process over this many local GPUs (or logical CPUs) instead of one worker")
    args = parser.parse_args(argv)
    rows = probe_devices(args.devices, args.sizes_mb, args.repeats) if args.devices else probe(args.sizes_mb, args.repeats)
    for row in rows:
        print(PREFIX + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
