"""One training run, as a Slurm batch job or a benchmark runs it: `python -m helpers train`.

Every worker of a multi-worker run executes the same function; only the chief writes the
results file. Each worker prints one `RESULT {json}` line (with a digest of its weights),
which is how tests check that all workers end with identical weights.
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import CourseError

if TYPE_CHECKING:
    from ..mode import Sizes

LOOPS = ("fit", "custom")


PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


@dataclass
class TrainConfig:
    """What one run trains; the command line (`helpers.commands.cli`) builds its options from
    these fields and their help texts, so the defaults are declared here only."""

    strategy: str = field(default="auto", metadata={"choices": ("auto", "mirrored", "multiworker", "default")})
    model: str = field(default="cnn", metadata={"choices": ("cnn", "resnet50")})
    sync_bn: bool = field(default=False, metadata={"help": "synchronized batch normalisation"})
    loop: str = field(default="fit", metadata={"choices": LOOPS})
    data_dir: str | None = field(default=None, metadata={
        "help": "prepared CIFAR-10 (default: COURSE_DATA_DIR, or synthetic in quick mode)"})
    mode: str | None = field(default=None, metadata={"choices": ("quick", "workshop", "full", "auto"),
                                                     "help": "default: COURSE_MODE or auto"})
    epochs: int | None = None
    per_replica_batch: int | None = field(default=None, metadata={"flag": "--batch", "help": "per-replica batch"})
    steps_per_epoch: int | None = None
    train_examples: int | None = None
    cpu_replicas: int = field(default=1, metadata={
        "help": "logical CPU devices for MirroredStrategy on a CPU-only node"})
    learning_rate: float = field(default=0.05, metadata={"flag": "--lr"})
    seed: int = 42
    results: str | None = field(default=None, metadata={"help": "JSON file the chief writes the results to"})
    evaluate: bool = field(default=True, metadata={"flag": "--skip-eval",
                                                   "help": "no evaluation after training (benchmarks)"})
    precision: str = field(default="float32", metadata={
        "choices": PRECISIONS, "help": "Keras dtype policy: mixed_float16 (GPUs with tensor cores, "
        "loss scaling) or mixed_bfloat16 (Ampere and later, no loss scaling)"})
    xla: bool = field(default=False, metadata={
        "help": "compile fit's train step with XLA (jit_compile=True); with --strategy default and "
                "--loop fit only"})


XLA_REFUSED = (
    "with jit_compile=True Keras 3 compiles the whole distributed step (strategy.run and the all-reduce "
    "inside it) as one XLA function, and under a tf.distribute strategy that is not offered here: over 2 "
    "logical CPUs it fails for every precision (InvalidArgumentError, 'Trying to access resource ... "
    "located in device CPU:1'), and on GPUs with mixed_float16 upstream reports a merge_call RuntimeError "
    "from the LossScaleOptimizer (keras-team/keras#21366, closed unfixed). Without a strategy there is no "
    "merge_call at all. The course never ran XLA on a GPU")


def xla_refusal(xla: bool, loop: str, strategy: str) -> str | None:
    """Why `--xla` cannot run as asked, or None: XLA only for fit with no distribution strategy
    (`--strategy default`, one device). Decided before TensorFlow starts, so a run fails in one line
    instead of a deep traceback after tracing."""
    if not xla:
        return None
    if loop != "fit":
        return "--xla compiles fit's step only; the custom loop's tf.function is not compiled with XLA"
    if strategy != "default":
        return f"--xla needs --strategy default (one device, no tf.distribute strategy), not {strategy!r}: " + XLA_REFUSED
    return None


@dataclass(frozen=True)
class JobSizes:
    """What one run trains on, resolved once: the option when given, else the mode's size."""

    epochs: int
    per_replica_batch: int
    train_limit: int | None
    test_limit: int | None


def job_sizes(config: TrainConfig, sizes: Sizes) -> JobSizes:
    resnet = config.model == "resnet50"
    return JobSizes(
        epochs=config.epochs or (sizes.resnet_epochs if resnet else sizes.epochs),
        per_replica_batch=config.per_replica_batch or sizes.per_replica_batch,
        train_limit=config.train_examples or (sizes.resnet_train_examples if resnet
                                              else sizes.train_examples),
        test_limit=sizes.test_examples)


def run(config: TrainConfig) -> dict:
    """Train as configured and return the results (also printed as a RESULT line)."""
    from .. import environment
    from ..gpus import gpu_count_without_tf
    from ..host import import_tensorflow
    from ..data import ensure_data, load_split
    from ..mode import mode_sizes

    if config.loop not in LOOPS:
        raise CourseError(f"unknown loop {config.loop!r}: use one of {', '.join(LOOPS)}")
    if config.precision not in PRECISIONS:
        raise CourseError(f"unknown precision {config.precision!r}: use one of {', '.join(PRECISIONS)}")
    refused = xla_refusal(config.xla, config.loop, config.strategy)
    if refused:
        raise CourseError(refused)
    environment.remove_proxies()
    import_tensorflow()  # quietly, before the resolver imports it with its start-up lines
    sizes = mode_sizes(config.mode)
    job = job_sizes(config, sizes)
    from ..resolver import cluster_resolver

    multi = cluster_resolver() is not None and config.strategy in ("auto", "multiworker")
    if not multi and gpu_count_without_tf() == 0 and config.strategy != "default":
        environment.split_cpu(config.cpu_replicas)
    from ..strategy import describe_strategy, make_strategy

    strategy = make_strategy(config.strategy)
    about = describe_strategy(strategy)  # rank, chief, workers, name: asked once, here
    import keras
    import numpy as np

    from .. import lesson
    from ..throughput import StepTimer, keras_callback

    keras.utils.set_random_seed(config.seed)
    replicas = strategy.num_replicas_in_sync
    global_batch = job.per_replica_batch * replicas
    data = ensure_data(sizes.quick, config.data_dir)
    train_examples = load_split("train", data.data_dir, limit=job.train_limit, seed=config.seed)
    test_examples = load_split("test", data.data_dir, limit=job.test_limit, seed=config.seed)
    steps = config.steps_per_epoch or sizes.steps_per_epoch(int(train_examples.cardinality()), global_batch)
    repeat = config.loop == "fit"  # fit counts epochs in steps: the data repeats, steps_per_epoch ends an epoch
    train_ds = strategy.distribute_datasets_from_function(
        lambda context: lesson.training_dataset(train_examples, global_batch, context, seed=config.seed).repeat(
            -1 if repeat else 1))
    test_ds = strategy.distribute_datasets_from_function(
        lambda context: lesson.evaluation_dataset(test_examples, global_batch, context))
    epochs = job.epochs

    keras.mixed_precision.set_global_policy(config.precision)
    with strategy.scope():
        model = lesson.build_model(config.model, synchronized=config.sync_bn, seed=config.seed)
    timer = StepTimer(global_batch)
    started = time.perf_counter()
    loss = accuracy = examples = None
    if config.loop == "fit":
        with strategy.scope():
            lesson.compile_model(model, config.learning_rate, jit_compile=config.xla)
        history = model.fit(train_ds, epochs=epochs, steps_per_epoch=steps,
                            callbacks=[keras_callback(timer)], verbose=0)
        train_loss = history.history["loss"]
    else:
        with strategy.scope():
            optimizer = keras.optimizers.SGD(config.learning_rate, momentum=0.9)
            if config.precision == "mixed_float16":
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        train_step = lesson.make_train_step(strategy, model, optimizer, global_batch)
        train_loss = [lesson.train_epoch(train_step, train_ds, global_batch, steps, timer)["loss"]
                      for _ in range(epochs)]
    if config.evaluate:  # the custom evaluation counts every test example exactly once, for both loops
        result = lesson.evaluate(lesson.make_eval_step(strategy, model), test_ds)
        loss, accuracy, examples = result["loss"], result["accuracy"], result["examples"]
    results = {
        "model": config.model, "sync_bn": config.sync_bn, "loop": config.loop,
        "precision": config.precision, "xla": config.loop == "fit" and bool(model.jit_compile),  # as Keras ran it
        "strategy": about.name, "replicas": replicas, "workers": about.workers, "rank": about.rank,
        "host": platform.node(), "mode": sizes.mode, "data": data.label,
        "epochs": epochs, "train_loss": [float(v) for v in train_loss],
        "test_loss": None if loss is None else float(loss),
        "test_accuracy": None if accuracy is None else float(accuracy), "test_examples": examples,
        "seconds": time.perf_counter() - started, "weights": lesson.weights_digest(model),
        "gradient_bytes": sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in model.trainable_variables),
        "all_weights": lesson.weights_digest(model, trainable_only=False),
        **timer.summary(),
    }
    print("RESULT " + json.dumps(results), flush=True)
    if config.results and about.chief:
        from ..results import write_results

        write_results(results, config.results)
    return results
