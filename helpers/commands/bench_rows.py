"""The pieces every section of the bench shares: a row of the table, medians, progress lines,
and one training point timed in fresh processes (`python -m helpers train`).

`bench` (engines, distribution, overhead, pipeline, course, GPU) and `bench_scaling` (the
scaling model against measured steps) both build their rows from these.
"""

from __future__ import annotations

import operator
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

from ..errors import CourseError
from ..results import parse_result_lines

MODEL_NAMES = {"cnn": "small CNN", "resnet50": "ResNet50"}
_OPS = {"<=": operator.le, ">=": operator.ge}


@dataclass
class Row:
    figure: str
    ours: float
    baseline: float | None
    unit: str
    higher_is_better: bool
    target: str = ""  # e.g. "<= 2", ">= 0.97" (checked against `target_on`), "beat the baseline", "report"
    note: str = ""
    target_on: str = "ours"  # "ours" or "ratio" (ours / baseline)
    versus_defaults: bool = True  # False: the baseline is another quantity (pipeline vs training)

    @property
    def ratio(self) -> float | None:
        return None if not self.baseline else self.ours / self.baseline

    @property
    def met(self) -> str:
        """"yes", "no", or "-" for figures that are only reported."""
        if self.target == "beat the baseline":
            if self.baseline is None:
                return "-"
            better = self.ours > self.baseline if self.higher_is_better else self.ours < self.baseline
            return "yes" if better else "no"
        parts = self.target.split()
        if len(parts) != 2 or parts[0] not in _OPS:
            return "-"
        value = self.ratio if self.target_on == "ratio" else self.ours
        if value is None:
            return "-"
        return "yes" if _OPS[parts[0]](value, float(parts[1])) else "no"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def say(text: str) -> None:
    print(text, flush=True)


def run_result(args: list[str], timeout: float = 900, env: dict | None = None) -> dict:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})})
    results = parse_result_lines(done.stdout)
    if done.returncode != 0 or not results:
        raise RuntimeError(f"benchmark run {' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return results[-1]


WARM_BATCHES = 2  # training data of 2 global batches: cached after the second step
STEPS_FACTOR = {"resnet50": 1, "cnn": 8}  # the CNN's 25 ms steps need more of them for a stable median


def model_steps(model: str, steps: int) -> int:
    return steps * STEPS_FACTOR.get(model, 1)


def model_repeats(model: str, repeats: int) -> int:
    """Small-CNN runs take seconds: one more repeat, so one slow run (this VM has some, 37
    instead of 24 ms/step for a whole run) cannot move the median of two."""
    return repeats + 1 if model == "cnn" else repeats


def warm_cache_args(global_batch: int, steps: int) -> list[str]:
    """Arguments for `helpers train` that time `steps` steps after the tracing step on data
    that is cached after its first pass: otherwise every timed step would also read and decode
    the data (the first epoch fills the cache), which the small CNN's 25 ms steps show."""
    epochs = -(-(steps + 1) // WARM_BATCHES)
    return ["--train-examples", str(global_batch * WARM_BATCHES), "--epochs", str(epochs),
            "--steps-per-epoch", str(WARM_BATCHES)]


# Every training run the bench compares sets jit_compile itself: `helpers train` passes
# jit_compile=False unless asked for --xla (and refuses --xla under a strategy), and the plain-Keras
# baseline passes False too. Left at Keras 3's default, "auto", XLA is on for a model built outside
# any strategy when TensorFlow sees a GPU and off under every strategy, so a 1-GPU run without a
# strategy against N-GPU runs would compare XLA with no XLA, not 1 device with N.
def same_jit_compile(runs: dict[str, dict]) -> bool:
    """The jit_compile every compared run reported (its `xla` field: what Keras ran with), or a
    CourseError naming each run's value when they differ or one did not say."""
    values = {name: run.get("xla") for name, run in runs.items()}
    if None in values.values() or len(set(values.values())) != 1:
        raise CourseError(f"the compared runs did not all use the same jit_compile: {values}")
    return next(iter(values.values()))


def training_point(kind: str, n: int, model: str, data_dir: str, steps: int = 10,
                   per_replica_batch: int = 32, extra: tuple[str, ...] = (),
                   env: dict | None = None) -> dict:
    """Train `steps` timed steps in fresh process(es); the chief's results plus a label.

    kind: "single" (one process, no distribution), "mirrored" (one process, n replicas:
    GPUs, or logical CPU devices) or "multiworker" (n local worker processes). `env` adds
    to the environment (e.g. `DEFAULTS_ENV` for TensorFlow's defaults).
    """
    from ..local_workers import run_local_workers

    args = ["-m", "helpers", "train", "--model", model, "--batch", str(per_replica_batch), "--skip-eval",
            *warm_cache_args(per_replica_batch * n, steps), "--data-dir", data_dir, *extra]
    if kind == "single":
        result = run_result(args + ["--strategy", "default"], env=env)
        label = "1 process"
    elif kind == "mirrored":
        result = run_result(args + ["--strategy", "mirrored", "--cpu-replicas", str(n)], env=env)
        label = "MirroredStrategy"
    elif kind == "multiworker":
        outcomes = run_local_workers(args + ["--strategy", "multiworker"], n, deadline_s=900,
                                     env={**os.environ, **(env or {})})
        failed = [o for o in outcomes if o.returncode != 0]
        if failed:
            raise RuntimeError(f"worker {failed[0].rank} failed:\n{failed[0].output[-2000:]}")
        results = [parse_result_lines(o.output)[-1] for o in outcomes]
        same_jit_compile({f"worker {r.get('rank')}": r for r in results})
        result = {**results[0], "weights_agree": len({r["weights"] for r in results}) == 1}
        label = "MultiWorkerMirroredStrategy"
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return {**result, "label": label, "kind": kind}
