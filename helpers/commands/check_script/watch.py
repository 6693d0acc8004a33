"""The wrappers a check-script worker puts on TensorFlow and Keras: what the script builds, feeds its steps, writes.

`install()` wraps public entry points before the script runs, so the script runs unchanged:
- every `strategy.run` fingerprints the batch it is handed (one hash per example) as the step
  runs, so what is counted is what the steps consumed: Keras's `fit`, `evaluate` and `predict`
  and custom loops alike, each stream named by what was running (`fit`, `fit>evaluate` for the
  validation, ...) and the step function; batches a pipeline read ahead, or that Keras read to
  build the model (`_maybe_symbolic_build`) and never trained on, are not counted;
- models, optimizers and metrics are registered as they are made (in `strategy.scope()` or not);
- writes are recorded whatever API makes them in Python: `open` (the audit hook in
  `record`), `tf.io.gfile`/`file_io` (which `tf.train.Checkpoint`, `CheckpointManager`'s
  `checkpoint` file and SavedModel's `saved_model.pb` go through), `rename`/`copy`; where C++ writes
  the bytes (checkpoint shards, SavedModel variables, event files, a dataset cache), the
  destination the script gave is recorded (`Checkpoint._write`, `model.save`/`save_weights`/
  `export`, `tf.saved_model.save`, `tf.summary.create_file_writer`, `Dataset.cache`/`save`/
  `snapshot`); the command also compares the files before and after a run (`files`);
- dropout, noise and random augmentation layers compute as in inference (`_without_randomness`),
  Keras's XLA compilation is turned off (a py_function cannot run in XLA), and
  GPUs are hidden through TensorFlow's own device visibility (`hide_gpus`), so a script that
  lists and pins GPUs still finds them listed.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from typing import Callable

from .record import STATE, SEED, WHERE, called_by_script, mark, note_not_seen, phase, record_made_dir, record_write, \
    script_line

MODELS: list = []
OPTIMIZERS: list = []
METRICS: list = []
_EACH_STEP: list = []  # what to call as each step is fed (the worker's weights: initial, then after each step)
# Keras layers that draw random numbers in training, besides Dropout (and its subclasses) and every Random* layer
RANDOM_LAYERS = ("AlphaDropout", "GaussianDropout", "GaussianNoise", "AugMix", "CutMix", "MixUp", "RandAugment",
                 "Solarization")
WITH_DROPOUT = ("Attention", "GRUCell", "LSTMCell", "SimpleRNNCell")  # random when their dropout is above 0


def install() -> None:
    """Wrap TensorFlow and Keras (imported here) before the script runs; no TensorFlow op runs."""
    import tensorflow as tf
    import keras

    _strategies(tf, keras)
    _steps(tf)
    _models(tf, keras)
    _writes(tf, keras)


def _wrap(owner, name: str, before=None, after=None) -> None:
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if before:
            before(*args, **kwargs)
        result = original(*args, **kwargs)
        if after:
            after(result, *args, **kwargs)
        return result

    wrapper.__wrapped__ = original
    wrapper.__name__ = getattr(original, "__name__", name)
    wrapper.__doc__ = getattr(original, "__doc__", None)
    setattr(owner, name, wrapper)


def _first_path(*args, **kwargs):
    for value in list(args[1:]) + list(kwargs.values()):
        if isinstance(value, (str, os.PathLike)):
            return value
    return None


# ---------------------------------------------------------------- strategies and inputs
def _strategies(tf, keras) -> None:
    """Marks around the rendezvous, seeds right after it (before any model exists), the inputs made."""
    def made(result, self, *args, **kwargs):
        STATE["strategies"].append({"class": type(self).__name__, "replicas": int(self.num_replicas_in_sync),
                                    "where": script_line()})
        keras.utils.set_random_seed(SEED)
        mark(f"MultiWorkerMirroredStrategy() returned: {self.num_replicas_in_sync} replicas")

    def entered(self, cluster_resolver=None, *args, **kwargs):
        replaced = None if cluster_resolver is not None else _replaced_tf_config()
        if replaced:
            mark(f"{TF_CONFIG_REPLACED} {replaced}")
        mark("MultiWorkerMirroredStrategy() entered: waiting for every worker")

    _wrap(tf.distribute.MultiWorkerMirroredStrategy, "__init__", before=entered, after=made)

    def distributed(kind):
        def after(result, self, data=None, *args, **kwargs):
            STATE["inputs"].append({"kind": kind, "where": script_line(), "phase": phase()})
            endless = isinstance(data, tf.data.Dataset) and _endless(tf, data)
            mark(f"{kind} at {STATE['inputs'][-1]['where']}" + (f" {ENDLESS}" if endless else ""))
        return after

    for kind in ("experimental_distribute_dataset", "distribute_datasets_from_function"):
        _wrap(tf.distribute.Strategy, kind, after=distributed(kind))


TF_CONFIG_REPLACED = "TF_CONFIG replaced by the script:"  # a progress line's start (read by the analysis)
ENDLESS = "(an endless data set)"  # said of an input whose cardinality is infinite (read by the analysis)


def _replaced_tf_config() -> str:
    """How the TF_CONFIG the strategy reads differs from the one check-script gave this worker ("" when it does
    not): a script that writes its own (hosts, ports or a fixed rank) waits for peers that never come."""
    given, now = WHERE.get("given_tf_config", ""), os.environ.get("TF_CONFIG", "")

    def described(text: str) -> str:
        try:
            config = json.loads(text)
            return f"workers {config['cluster']['worker']}, index {config['task']['index']}"
        except (ValueError, KeyError, TypeError):
            return repr(text[:120]) if text else "none"

    try:
        same = json.loads(given) == json.loads(now)
    except ValueError:
        same = given == now
    return "" if same or not given else f"{described(now)} (check-script gave {described(given)})"


def _endless(tf, data) -> bool:
    try:
        return int(data.cardinality()) == int(tf.data.INFINITE_CARDINALITY)
    except Exception:  # noqa: BLE001 - a data set TensorFlow cannot size: not known to be endless
        return False


def hide_gpus() -> None:
    """Every worker on the CPU, without changing what the script lists: GPUs stay physical devices
    (`tf.config.list_physical_devices("GPU")`, so `gpus[local_rank]` exists), but none is made
    visible, whatever the script asks (`set_visible_devices` drops GPUs). CUDA_VISIBLE_DEVICES=""
    would empty the list instead. Called in the worker's own process, before the script."""
    import tensorflow as tf

    original = tf.config.set_visible_devices

    def set_visible_devices(devices, device_type=None):
        one = hasattr(devices, "device_type")  # a PhysicalDevice is a namedtuple itself
        listed = [devices] if one or not isinstance(devices, (list, tuple)) else list(devices)
        gpus = [d for d in listed if getattr(d, "device_type", "") == "GPU"]
        if gpus:
            STATE["notes"].append(f"the script made {len(gpus)} GPU(s) visible; the check keeps every worker on "
                                  "the CPU")
        kept = [d for d in listed if getattr(d, "device_type", "") != "GPU"]
        if device_type == "GPU" or (device_type is None and not kept):
            return original([], "GPU")
        return original(kept, device_type)

    set_visible_devices.__wrapped__ = original
    try:
        original([], "GPU")
    except (RuntimeError, ValueError) as exc:  # e.g. devices already initialised
        note_not_seen(f"GPUs not hidden: {type(exc).__name__}: {exc}"[:200])
    tf.config.set_visible_devices = tf.config.experimental.set_visible_devices = set_visible_devices


# ---------------------------------------------------------------- what each step consumes
def on_each_step(call: Callable[[int, int, str], object]) -> None:
    """Call `call(stream, step, phase)` as each step of the script is fed (before it runs, after the
    steps before it): the stream's place in STATE["fed"], the step's number in it (from 1)."""
    _EACH_STEP.append(call)


def rows_of(arrays: list) -> list[str]:
    """One hash per example: the rows of every array whose first axis has the batch's length."""
    import numpy as np

    batched = [a for a in arrays if getattr(a, "ndim", 0) >= 1]
    if not batched:
        return []
    count = batched[0].shape[0]
    rows = []
    for i in range(count):
        digest = hashlib.blake2b(digest_size=8)
        for array in batched:
            if array.shape[0] != count:
                continue
            row = array[i]
            if row.dtype == object:  # strings: their bytes, not the objects' addresses
                digest.update(b"\0".join(x if isinstance(x, bytes) else str(x).encode() for x in np.ravel(row)))
            else:
                digest.update(np.ascontiguousarray(row).tobytes())
        rows.append(digest.hexdigest())
    return rows


def stream(key_phase: str, fn: str) -> dict:
    """The record of the batches fed to strategy.run(fn) while the script was in `key_phase`."""
    for entry in STATE["fed"]:
        if entry["phase"] == key_phase and entry["fn"] == fn:
            return entry
    entry = {"phase": key_phase, "fn": fn, "batches": []}
    STATE["fed"].append(entry)
    return entry


def _steps(tf) -> None:
    """strategy.run fingerprints what each step is handed; reduce and friends are counted."""
    import numpy as np
    from tensorflow.python.distribute import distribute_lib
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import control_flow_util

    base = distribute_lib.StrategyBase
    original_run = base.run

    def fingerprinted(structure, fn: str):
        flat = tf.nest.flatten(structure, expand_composites=True)
        places = [i for i, t in enumerate(flat) if isinstance(t, tf.Tensor) and t.dtype not in (tf.resource, tf.variant)]
        if not places:
            note_not_seen(f"the examples of strategy.run({fn}): it was handed no tensor (its step reads its input "
                          "itself)")
            return structure

        def record(*values):
            rows = rows_of([v.numpy() for v in values])
            entry = stream(phase(), fn)
            entry["batches"].append(rows)
            for call in _EACH_STEP:
                call(STATE["fed"].index(entry), len(entry["batches"]), phase())
            mark(f"step {len(entry['batches'])} of strategy.run({fn}) in {phase() or 'the script'}: "
                 f"{len(rows)} examples")
            return np.int64(0)

        token = tf.py_function(record, [flat[i] for i in places], Tout=tf.int64)
        with tf.control_dependencies([token]):
            for i in places:
                flat[i] = tf.identity(flat[i])
        return tf.nest.pack_sequence_as(structure, flat, expand_composites=True)

    def run(self, fn, args=(), kwargs=None, options=None):
        if type(self).__name__.startswith("_Default"):
            return original_run(self, fn, args, kwargs, options)
        name = getattr(fn, "__name__", type(fn).__name__)
        if control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()):
            note_not_seen(f"the examples of strategy.run({name}): it runs in a jit_compile=True function")
        else:
            args, kwargs = fingerprinted((tuple(args), dict(kwargs or {})), name)
        result = original_run(self, fn, args, kwargs, options)
        if result is not None and not phase() and called_by_script():
            STATE["runs"] += 1  # the script's own loop got values back
        return result

    run.__wrapped__ = original_run
    base.run = run

    def reduced(*args, **kwargs):
        if not phase() and called_by_script():
            STATE["reduces"] += 1

    for name in ("reduce", "experimental_local_results"):
        _wrap(base, name, before=reduced)
    _wrap(tf.distribute.Strategy, "gather", before=reduced)


# ---------------------------------------------------------------- models, optimizers, metrics
def _models(tf, keras) -> None:
    def model_made(self, *args, **kwargs):
        if any(m is self for m in MODELS):
            return
        MODELS.append(self)
        STATE["models"].append({"name": self.name, "class": type(self).__name__, "where": script_line(),
                                "in_scope": tf.distribute.has_strategy(),
                                "strategy_before": bool(STATE["strategies"])})

    keras.Model.__init__ = _in_phase(keras.Model.__init__, "init", after=model_made)

    def compiled(result, self, *args, **kwargs):
        for model, info in zip(MODELS, STATE["models"]):
            if model is self:
                info["compiled_in_scope"] = tf.distribute.has_strategy()
                info["compiled_where"] = script_line()
        if getattr(self, "jit_compile", False):  # the fingerprints are py_functions: no XLA in a check
            self.jit_compile = False
            if "XLA (jit_compile)" not in STATE["notes"]:
                STATE["notes"].append("XLA (jit_compile)")

    keras.Model.compile = _in_phase(keras.Model.compile, "compile", after=lambda self, *a, **k: compiled(None, self))

    def optimizer_made(result, self, *args, **kwargs):
        if not any(o is self for o in OPTIMIZERS):
            OPTIMIZERS.append(self)

    _wrap(keras.optimizers.Optimizer, "__init__", after=optimizer_made)

    def metric_made(result, self, *args, **kwargs):
        if not any(m is self for m in METRICS) and not phase() and called_by_script():  # not Keras's own
            METRICS.append(self)
            STATE["metrics"].append({"name": self.name, "class": type(self).__name__, "where": script_line(),
                                     "in_scope": tf.distribute.has_strategy()})

    _wrap(keras.metrics.Metric, "__init__", after=metric_made)
    for name in ("fit", "evaluate", "predict"):
        setattr(keras.Model, name, _in_phase(getattr(keras.Model, name), name, marks=True))

    _without_randomness(keras)
    _build_from_shapes()


def _without_randomness(keras) -> None:
    """Keras's random layers compute as in inference during a check: one worker draws for the whole
    batch, each of N replicas for its share, so the draws, and the weights, differ with no mistake
    (the tutorial's model with RandomFlip failed 'same weights as one worker' by 3.0e-01 of the
    update after the first step, with GaussianNoise by 6.8e-01). Dropout is skipped, the others are
    called with training=False (RandomCrop then crops the centre: the same shape); each is named in
    the weights line."""
    def no_dropout(self, inputs, training=False):
        _turned_off(self)
        return inputs

    keras.layers.Dropout.call = no_dropout
    names = [n for n in dir(keras.layers) if n.startswith("Random")] + [*RANDOM_LAYERS, *WITH_DROPOUT]
    for name in dict.fromkeys(names):
        layer = getattr(keras.layers, name, None)
        if isinstance(layer, type) and issubclass(layer, keras.layers.Layer) \
                and "training" in inspect.signature(layer.call).parameters:
            layer.call = _in_inference(layer.call, name in WITH_DROPOUT)


def _in_inference(original, only_with_dropout: bool):
    """`original` (a layer's call) with training=False, however the caller passed it; the layer
    named as turned off unless it draws nothing (`only_with_dropout`: its dropout is 0)."""
    signature = inspect.signature(original)

    def call(self, *args, **kwargs):
        if not only_with_dropout or getattr(self, "dropout", 0) or getattr(self, "recurrent_dropout", 0):
            _turned_off(self)
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["training"] = False
        return original(*bound.args, **bound.kwargs)

    call.__wrapped__, call.__signature__ = original, signature  # Keras reads the call's arguments
    return call


def _turned_off(layer) -> None:
    if layer.name not in STATE["dropout_off"]:
        STATE["dropout_off"].append(layer.name)


def _build_from_shapes() -> None:
    """Keras's fit and evaluate under a strategy build the model on a batch they read from a first
    iterator and then start the data again (`_maybe_symbolic_build`, then `epoch_iterator.reset()`):
    with one replica it runs (with several it fails, keras-team/keras#20585), and a dataset that
    reshuffles each iteration then trains on its second order, the N-worker run (fixed, building
    from shapes) on its first. In a check both build from the data's shapes (dtypes and shapes are
    all the build reads), so both runs train on the same order."""
    try:
        from keras.src import tree
        from keras.src.backend.tensorflow import trainer
    except ImportError:  # another Keras: its own build stays
        return
    original = trainer.TensorFlowTrainer._maybe_symbolic_build

    def build(self, iterator=None, data_batch=None):
        spec = getattr(getattr(iterator, "_distributed_dataset", None), "element_spec", None)
        if self._distribute_strategy is None or spec is None or data_batch is not None:
            return original(self, iterator, data_batch)
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=tree.map_structure(lambda s: getattr(s, "_value_specs", [s])[0], spec))

    build.__wrapped__ = original
    trainer.TensorFlowTrainer._maybe_symbolic_build = build


def _in_phase(original, name: str, after=None, marks: bool = False):
    """`original` run with `name` on the phase stack (Keras's own work: fit, evaluate, predict,
    a model's construction, compile), then `after(*args)`."""
    def wrapper(*args, **kwargs):
        if marks:
            mark(f"model.{name} started at {script_line()}")
        STATE["phase"].append(name)
        try:
            result = original(*args, **kwargs)
        finally:
            STATE["phase"].pop()
            if marks:
                mark(f"model.{name} ended")
        if after is not None and not phase():  # the outermost call: a Sequential calls Model.__init__ again
            after(*args, **kwargs)
        return result

    wrapper.__wrapped__ = original
    wrapper.__name__ = name
    wrapper.__doc__ = original.__doc__
    return wrapper


# ---------------------------------------------------------------- writes
def _writes(tf, keras) -> None:
    from tensorflow.python.checkpoint import checkpoint as checkpoint_lib
    from tensorflow.python.lib.io import file_io

    for owner, name, how in ((keras.Model, "save", "model.save"), (keras.Model, "save_weights", "model.save_weights"),
                             (keras.Model, "export", "model.export"),
                             (checkpoint_lib.Checkpoint, "_write", "tf.train.Checkpoint")):
        _wrap(owner, name, before=lambda *a, _how=how, **k: record_write(_first_path(*a, **k) or "?", _how))
    _wrap(tf.saved_model, "save", before=lambda *a, **k: record_write(
        k.get("export_dir", a[1] if len(a) > 1 else "?"), "tf.saved_model.save"))

    def prewrite(self):
        if not getattr(self, "_writable_file", None):
            record_write(self.name, "tf.io.gfile")

    _wrap(file_io.FileIO, "_prewrite_check", before=prewrite)
    for module_name, public in (("rename_v2", "rename"), ("copy_v2", "copy")):
        def moved(src, dst, *args, **kwargs):
            record_write(dst, "tf.io.gfile")
        _wrap(file_io, module_name, before=moved)
        setattr(tf.io.gfile, public, getattr(file_io, module_name))
    for module_name, public in (("recursive_create_dir_v2", "makedirs"), ("create_dir_v2", "mkdir")):
        _wrap(file_io, module_name, before=lambda path, *a, **k: record_made_dir(path))
        setattr(tf.io.gfile, public, getattr(file_io, module_name))
    for method in ("cache", "save", "snapshot"):
        def cached(self, path="", *args, _method=method, **kwargs):
            path = path or kwargs.get("filename") or kwargs.get("path")
            if path:
                record_write(path, f"Dataset.{_method}")
        _wrap(tf.data.Dataset, method, before=cached)
    import tensorflow.summary as summary_module  # Keras's TensorBoard imports it by this name

    original_writer = summary_module.create_file_writer

    def create_file_writer(logdir, *args, **kwargs):
        path = os.path.abspath(os.fspath(logdir))
        if path not in STATE["summary_dirs"]:
            STATE["summary_dirs"].append(path)
        return original_writer(logdir, *args, **kwargs)

    summary_module.create_file_writer = tf.summary.create_file_writer = create_file_writer
