"""`python -m helpers bench`: measured figures, compared side by side in one run.

Each compared pair runs interleaved (ours, baseline, ours, baseline, ...) and reports
medians, so a busy machine slows both sides alike. Training runs each take a fresh process
(TensorFlow's threads and memory are per process). Writes bench.json and bench.csv for
notebook 07. Nothing here is asserted by tests: it prints figures for people to read.
"""

from __future__ import annotations

import csv
import json
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .environment import cpu_count
from .train import parse_result_lines

ROWS = ("engines", "cnn", "resnet50", "pipeline")


@dataclass
class Row:
    figure: str
    ours: float
    baseline: float | None
    unit: str
    higher_is_better: bool
    target: str = ""
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return None if not self.baseline else self.ours / self.baseline


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# ------------------------------------------------------------------------------ engines
def bench_engines(repeats: int = 2) -> list[Row]:
    """2 local engines: ready for %%px, and stopped while holding TensorFlow."""
    from .cluster import start_engines

    ours_start, ours_stop, base_start, base_stop = [], [], [], []
    for _ in range(repeats):
        started = time.perf_counter()
        engines = start_engines(2, activate=False)
        ours_start.append(time.perf_counter() - started)
        engines.client[:].execute("import tensorflow", block=True)
        ours_stop.append(engines.stop())
        start_s, stop_s = _ipyparallel_defaults()
        base_start.append(start_s)
        base_stop.append(stop_s)
    return [Row("2 local engines ready (s)", _median(ours_start), _median(base_start), "s", False,
                "<= 3 s (issue 2), <= 2 s (issue 7)", "ipyparallel defaults as baseline"),
            Row("2 engines holding TensorFlow stopped (s)", _median(ours_stop), _median(base_stop),
                "s", False, "<= 2 s (issue 2), <= 1 s (issue 7)", "baseline: stop_cluster")]


def _ipyparallel_defaults() -> tuple[float, float]:
    import ipyparallel as ipp

    started = time.perf_counter()
    cluster = ipp.Cluster(n=2, log_level=40)
    cluster.start_cluster_sync()
    client = cluster.connect_client_sync()
    client.wait_for_engines(2, timeout=120, interactive=False)
    start_s = time.perf_counter() - started
    client[:].execute("import tensorflow", block=True)
    client.close()
    started = time.perf_counter()
    cluster.stop_cluster_sync()
    return start_s, time.perf_counter() - started


# ----------------------------------------------------------------------------- training
def _run_result(args: list[str], timeout: float = 900) -> dict:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    results = parse_result_lines(done.stdout)
    if done.returncode != 0 or not results:
        raise RuntimeError(f"benchmark run {' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return results[-1]


def bench_training(model: str, data_dir: str, steps: int, batch: int = 64, repeats: int = 2) -> list[Row]:
    """images/s of the helpers' fit path against hand-written Keras, same model/data/strategy."""
    ours_args = ["-m", "helpers", "train", "--strategy", "default", "--model", model, "--batch", str(batch),
                 "--epochs", "1", "--steps-per-epoch", str(steps + 1), "--skip-eval",
                 "--train-examples", str(batch * (steps + 2)), "--data-dir", data_dir]
    base_args = ["-m", "helpers.bench_baseline", "--model", model, "--data-dir", data_dir,
                 "--batch", str(batch), "--steps", str(steps)]
    ours, base, first = [], [], []
    for _ in range(repeats):
        result = _run_result(ours_args)
        ours.append(result["images_per_s"])
        first.append(result["first_step_s"])
        base.append(_run_result(base_args)["images_per_s"])
    name = {"cnn": "small CNN", "resnet50": "ResNet50"}[model]
    return [Row(f"{name} fit images/s, batch {batch}, 1 process: helpers / plain Keras",
                _median(ours), _median(base), "images/s", True, ">= 0.97",
                f"first step (tracing) {_median(first):.1f} s")]


def training_point(kind: str, n: int, model: str, data_dir: str, steps: int = 10,
                   per_replica_batch: int = 32, extra: tuple[str, ...] = ()) -> dict:
    """Train `steps` timed steps in fresh process(es); the chief's results plus a label.

    kind: "single" (one process, no distribution), "mirrored" (one process, n replicas:
    GPUs, or logical CPU devices) or "multiworker" (n local worker processes).
    """
    from .launch import run_local_workers

    args = ["-m", "helpers", "train", "--model", model, "--batch", str(per_replica_batch),
            "--epochs", "1", "--steps-per-epoch", str(steps + 1), "--skip-eval",
            "--train-examples", str(per_replica_batch * n * (steps + 2)), "--data-dir", data_dir, *extra]
    if kind == "single":
        result = _run_result(args + ["--strategy", "default"])
        label = "1 process"
    elif kind == "mirrored":
        result = _run_result(args + ["--strategy", "mirrored", "--cpu-replicas", str(n)])
        label = "MirroredStrategy"
    elif kind == "multiworker":
        outcomes = run_local_workers(args + ["--strategy", "multiworker"], n, deadline_s=900)
        failed = [o for o in outcomes if o.returncode != 0]
        if failed:
            raise RuntimeError(f"worker {failed[0].rank} failed:\n{failed[0].output[-2000:]}")
        results = [parse_result_lines(o.output)[-1] for o in outcomes]
        result = {**results[0], "weights_agree": len({r["weights"] for r in results}) == 1}
        label = "MultiWorkerMirroredStrategy"
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return {**result, "label": label, "kind": kind}


# ----------------------------------------------------------------------------- pipeline
def bench_pipeline(data_dir: str, consumed: float | None, consumer: str, batch: int = 64,
                   epochs: int = 5) -> Row:
    """The input pipeline alone (after its cache is warm) against what training consumes."""
    from .data import make_pipeline

    ds = make_pipeline("train", batch, data_dir=data_dir)
    for _ in ds:  # fill the cache
        pass
    count, started = 0, time.perf_counter()
    for _ in range(epochs):
        for images, _ in ds:
            count += int(images.shape[0])
    rate = count / (time.perf_counter() - started)
    return Row(f"input pipeline images/s / {consumer} training images/s", rate, consumed, "images/s", True,
               ">= 10x", "pipeline alone, cached, batch 64")


# --------------------------------------------------------------------------------- main
def format_table(rows: list[Row]) -> str:
    lines = [f"{'figure':<66} {'ours':>10} {'baseline':>10} {'ratio':>7}  target"]
    for r in rows:
        base = f"{r.baseline:10.2f}" if r.baseline is not None else f"{'-':>10}"
        ratio = f"{r.ratio:7.2f}" if r.ratio is not None else f"{'-':>7}"
        lines.append(f"{r.figure:<66} {r.ours:10.2f} {base} {ratio}  {r.target}  {r.note}")
    return "\n".join(lines)


def main(out: str = "build/bench", steps: int = 12, only: str | None = None) -> int:
    from .data import ensure_data

    wanted = set(only.split(",")) if only else set(ROWS)
    unknown = wanted - set(ROWS)
    if unknown:
        from .errors import CourseError

        raise CourseError(f"unknown bench rows {sorted(unknown)}: choose from {', '.join(ROWS)}")
    data_dir = str(ensure_data(quick=True).data_dir)
    rows: list[Row] = []
    print(f"bench on {platform.node()}: {cpu_count()} CPUs, {platform.processor() or platform.machine()}; "
          "SYNTHETIC CIFAR-10-format data", flush=True)
    if "engines" in wanted:
        print("engines: ours and ipyparallel defaults, interleaved ...", flush=True)
        rows += bench_engines()
    consumed, consumer = None, "-"
    for model in ("cnn", "resnet50"):
        if model in wanted:
            print(f"{model}: helpers fit and plain Keras, interleaved ...", flush=True)
            rows += bench_training(model, data_dir, steps)
            consumed, consumer = rows[-1].ours, model
    if "pipeline" in wanted:
        print("input pipeline ...", flush=True)
        rows.append(bench_pipeline(data_dir, consumed, consumer))
    table = format_table(rows)
    print(table)
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    records = [{**asdict(r), "ratio": r.ratio} for r in rows]
    meta = {"host": platform.node(), "cpus": cpu_count(), "python": platform.python_version(),
            "data": "SYNTHETIC CIFAR-10-format data"}
    (target / "bench.json").write_text(json.dumps({"machine": meta, "rows": records}, indent=2))
    with open(target / "bench.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(records[0]) if records else ["figure"])
        writer.writeheader()
        writer.writerows(records)
    print(f"wrote {target / 'bench.json'} and {target / 'bench.csv'}")
    return 0
