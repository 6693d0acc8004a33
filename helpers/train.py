"""One training run, as a Slurm batch job or a benchmark runs it: `python -m helpers train`.

Every worker of a multi-worker run executes the same function; only the chief writes the
results file. Each worker prints one `RESULT {json}` line (with a digest of its weights),
which is how tests check that all workers end with identical weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import CourseError

LOOPS = ("fit", "custom")


@dataclass
class TrainConfig:
    strategy: str = "auto"
    model: str = "cnn"
    sync_bn: bool = False
    loop: str = "fit"
    data_dir: str | None = None
    mode: str | None = None
    epochs: int | None = None
    per_replica_batch: int | None = None
    steps_per_epoch: int | None = None
    train_examples: int | None = None
    cpu_replicas: int = 1
    learning_rate: float = 0.05
    seed: int = 42
    results: str | None = None
    evaluate: bool = True
    mixed_precision: bool = False
    xla: bool = False


def weights_digest(model, trainable_only: bool = True) -> str:
    """A short hash of the weights: equal digests mean bit-identical weights.

    Trainable weights by default: those are what the all-reduce keeps in sync. Ordinary
    batch-norm moving statistics are updated from each worker's own examples and differ
    between workers unless batch normalisation is synchronized (notebook 05).
    """
    digest = hashlib.sha256()
    for variable in (model.trainable_weights if trainable_only else model.weights):
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()[:16]


def run(config: TrainConfig) -> dict:
    """Train as configured and return the results (also printed as a RESULT line)."""
    from . import environment
    from .data import check_divisible, ensure_data, global_batch_size, make_pipeline
    from .mode import settings
    from .resolver import cluster_resolver

    if config.loop not in LOOPS:
        raise CourseError(f"unknown loop {config.loop!r}: use one of {', '.join(LOOPS)}")
    environment.remove_proxies()
    run_settings = settings(config.mode)
    multi = cluster_resolver() is not None and config.strategy in ("auto", "multiworker")
    if not multi and environment.gpu_count_without_tf() == 0 and config.strategy != "default":
        environment.split_cpu(config.cpu_replicas)
    from .strategy import is_chief, make_strategy, strategy_name, worker_rank

    strategy = make_strategy(config.strategy)
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    import keras

    keras.utils.set_random_seed(config.seed)
    replicas = strategy.num_replicas_in_sync
    per_replica = config.per_replica_batch or run_settings.per_replica_batch
    global_batch = global_batch_size(per_replica, replicas)
    check_divisible(global_batch, replicas)
    data = ensure_data(run_settings.quick, config.data_dir)
    limit = config.train_examples or (run_settings.resnet_train_examples if config.model == "resnet50"
                                      else run_settings.train_examples)
    train_ds = make_pipeline("train", global_batch, data_dir=data.data_dir, limit=limit, seed=config.seed)
    test_ds = make_pipeline("test", global_batch, data_dir=data.data_dir, training=False,
                            limit=run_settings.test_examples, seed=config.seed)
    epochs = config.epochs or (run_settings.resnet_epochs if config.model == "resnet50" else run_settings.epochs)

    from .models import build_model, compile_for_classification, use_mixed_precision
    from .throughput import StepTimer, keras_callback

    use_mixed_precision(config.mixed_precision)
    with strategy.scope():
        model = build_model(config.model, sync_bn=config.sync_bn, seed=config.seed)
    timer = StepTimer(global_batch)
    started = time.perf_counter()
    if config.loop == "fit":
        with strategy.scope():
            compile_for_classification(model, config.learning_rate, xla=config.xla)
        history = model.fit(train_ds, epochs=epochs, steps_per_epoch=config.steps_per_epoch,
                            callbacks=[keras_callback(timer)], verbose=0)
        loss = accuracy = None
        if config.evaluate:
            evaluation = model.evaluate(test_ds, verbose=0, return_dict=True)
            loss, accuracy = evaluation["loss"], evaluation["accuracy"]
        train_loss = history.history["loss"]
    else:
        from .training import DistributedLoop

        with strategy.scope():
            optimizer = keras.optimizers.SGD(config.learning_rate, momentum=0.9)
        loop = DistributedLoop(strategy, model, optimizer, global_batch)
        dist_train = strategy.experimental_distribute_dataset(train_ds)
        train_loss = [loop.train_epoch(dist_train, config.steps_per_epoch, timer).loss
                      for _ in range(epochs)]
        loss = accuracy = None
        if config.evaluate:
            result = loop.evaluate(strategy.experimental_distribute_dataset(test_ds))
            loss, accuracy = result.loss, result.accuracy
    results = {
        "model": config.model, "sync_bn": config.sync_bn, "loop": config.loop,
        "mixed_precision": config.mixed_precision, "xla": config.xla,
        "strategy": strategy_name(strategy), "replicas": replicas,
        "workers": _worker_count(strategy), "rank": worker_rank(strategy),
        "host": platform.node(), "mode": run_settings.mode, "data": data.label,
        "epochs": epochs, "train_loss": [float(v) for v in train_loss],
        "test_loss": None if loss is None else float(loss),
        "test_accuracy": None if accuracy is None else float(accuracy),
        "seconds": time.perf_counter() - started, "weights": weights_digest(model),
        "all_weights": weights_digest(model, trainable_only=False),
        **timer.summary(),
    }
    print("RESULT " + json.dumps(results), flush=True)
    if config.results and is_chief(strategy):
        write_results(results, config.results)
    return results


def _worker_count(strategy) -> int:
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    return max(1, sum(len(v) for k, v in spec.items() if k in ("worker", "chief")))


def write_results(results: dict, path: str | os.PathLike) -> Path:
    """Write one run's results as JSON, atomically (temporary name, then rename)."""
    from .atomic import write_text

    return write_text(path, json.dumps(results, indent=2))


def load_results(directory: str | os.PathLike) -> list[dict]:
    """The results files of batch runs in `directory` (what notebook 07 and the sweep show).

    Files that are not run results (half-written ones never are: see `write_results`) are
    skipped with a note, so one stray file does not hide the others.
    """
    runs = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            run = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"skipped {path.name}: not JSON ({exc})")
            continue
        if isinstance(run, dict) and {"images_per_s", "workers", "replicas"} <= run.keys():
            runs.append({**run, "file": path.name})
    return runs


def results_table(runs: list[dict]) -> str:
    """A plain-text table of batch runs, sorted by workers."""
    header = f"{'file':<28} {'model':<9} {'workers':>7} {'replicas':>8} {'images/s':>10} {'step s':>8} {'accuracy':>8}"
    lines = [header, "-" * len(header)]
    for r in sorted(runs, key=lambda r: (r["model"], r["workers"], r["replicas"])):
        accuracy = "-" if r.get("test_accuracy") is None else f"{r['test_accuracy']:.3f}"
        step = "-" if r.get("median_step_s") is None else f"{r['median_step_s']:.3f}"
        lines.append(f"{r['file'][:28]:<28} {r['model']:<9} {r['workers']:>7} {r['replicas']:>8} "
                     f"{r['images_per_s']:>10.1f} {step:>8} {accuracy:>8}")
    return "\n".join(lines)


def parse_result_lines(text: str) -> list[dict]:
    """The RESULT lines that workers printed, in order."""
    return [json.loads(line[len("RESULT "):]) for line in text.splitlines() if line.startswith("RESULT ")]
