"""One worker of `python -m helpers check-script`: runs the user's script unchanged, watched.

    python -m helpers.tools.check_worker OUT_DIR SCRIPT [SCRIPT_ARGS...]

Before the script runs (as `__main__`, through `runpy`), this module wraps a few public entry
points of TensorFlow and Keras, so that nothing in the script has to change:
- every batch each worker's input pipeline yields is fingerprinted (one hash per example), by a
  `map` added to the per-worker datasets the strategy builds (after its sharding and rebatching);
- models and optimizers are registered when they are constructed (in `strategy.scope()` or not),
  and their weights, layers and steps are written at exit;
- files written are recorded (Python `open` through an audit hook, Keras `save`/`save_weights`,
  `tf.train.Checkpoint`, `tf.summary.create_file_writer`, `tf.io.gfile.GFile`);
- progress marks go to a side file line by line, so a worker killed at a deadline is named with
  the last thing it did; seeds are fixed and dropout is turned off (named in the report).
It writes OUT_DIR/worker-RANK.json and weights-RANK.npz; it never reads the script's output.
Nothing heavy is imported until the script is about to run.
"""

from __future__ import annotations

import json
import os
import sys
import time

SEED = 1234
_OUT = ""
_RANK = 0
_STATE: dict = {"marks": 0, "writes": [], "summary_dirs": [], "inputs": [], "models": [], "optimizers": [],
                "strategies": [], "dropout_off": [], "exception": None, "exit_code": 0}
_MODELS: list = []
_OPTIMIZERS: list = []
_INPUTS: list = []  # (distributed dataset, record) in creation order
_INITIAL: dict = {}


def _rank() -> int:
    config = os.environ.get("TF_CONFIG")
    if config:
        try:
            return int(json.loads(config)["task"]["index"])
        except (ValueError, KeyError, TypeError):
            pass
    return int(os.environ.get("SLURM_PROCID", "0"))


def _tf_config_from_slurm() -> None:
    """A task of `check-script --slurm`: the course's TF_CONFIG for this Slurm step (ports in
    COURSE_PORT_RANGE), which a script that reads TF_CONFIG uses and one that reads Slurm ignores."""
    from ..resolver import make_tf_config, resolve_step

    layout, _, workers = resolve_step()
    os.environ["TF_CONFIG"] = json.dumps(make_tf_config(workers, layout.rank))


def mark(text: str) -> None:
    """One progress line, written through at once (a worker killed with SIGKILL keeps it)."""
    _STATE["marks"] += 1
    with open(os.path.join(_OUT, f"marks-{_RANK}.txt"), "a") as f:
        f.write(f"{time.time():.3f} {text}\n")


def _watch_where() -> None:
    """Every second, the line of the script the main thread is on, to where-RANK.txt: a worker
    ended at the deadline is named with the line it was stuck on (a TensorFlow call that waits in
    C++ releases the GIL, so this thread runs; the strategy's constructor does not, see marks)."""
    import linecache
    import threading

    main_id, script = threading.main_thread().ident, os.path.abspath(_STATE["script"])
    path, last = os.path.join(_OUT, f"where-{_RANK}.txt"), None
    while True:
        time.sleep(1.0)
        frame = sys._current_frames().get(main_id)
        while frame is not None and os.path.abspath(frame.f_code.co_filename) != script:
            frame = frame.f_back
        if frame is None:
            continue
        where = f"{os.path.basename(script)}:{frame.f_lineno} ({linecache.getline(script, frame.f_lineno).strip()})"
        if where != last:
            with open(path, "w") as f:
                f.write(where)
            last = where


def _script_line() -> str:
    """Where in the user's script the current call comes from (file:line)."""
    frame = sys._getframe(1)
    script = os.path.abspath(_STATE["script"])
    while frame is not None:
        if os.path.abspath(frame.f_code.co_filename) == script:
            return f"{os.path.basename(script)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


# ---------------------------------------------------------------- writes
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _record_write(path, how: str) -> None:
    try:
        path = os.path.abspath(os.fspath(path))
    except TypeError:
        return
    if path.startswith((_OUT, "/dev/", "/proc/", "/sys/")) or os.path.isdir(path) \
            or os.path.basename(path).startswith("__autograph_generated"):
        return  # the command's own files, devices, anonymous temporary files, TensorFlow's traced code
    entry = [path, how]
    if entry not in _STATE["writes"]:
        _STATE["writes"].append(entry)


def _audit(event: str, args) -> None:
    if event != "open" or not _STATE.get("running"):
        return
    path, mode, flags = (tuple(args) + (None, None, None))[:3]
    if isinstance(path, int) or path is None:
        return
    writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
    if writing:
        _record_write(path, "open")


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


# ---------------------------------------------------------------- install
def _install_tensorflow() -> None:
    import hashlib

    import numpy as np
    import tensorflow as tf
    import keras
    from tensorflow.python.distribute import input_lib

    # strategies: marks around the rendezvous, seeds right after it (before any model exists)
    mwms = tf.distribute.MultiWorkerMirroredStrategy

    def strategy_made(result, self, *args, **kwargs):
        _STATE["strategies"].append({"class": type(self).__name__, "replicas": int(self.num_replicas_in_sync),
                                     "where": _script_line()})
        keras.utils.set_random_seed(SEED)
        mark(f"MultiWorkerMirroredStrategy() returned: {self.num_replicas_in_sync} replicas")

    _wrap(mwms, "__init__", before=lambda *a, **k: mark("MultiWorkerMirroredStrategy() entered: waiting for every "
                                                        "worker"), after=strategy_made)

    # inputs: tag every distributed dataset with where the script made it
    def distributed(kind):
        def after(result, self, *args, **kwargs):
            record = {"kind": kind, "where": _script_line(), "iterators": []}
            _INPUTS.append((result, record))
            _STATE["inputs"].append(record)
            mark(f"{kind} at {record['where']}")
        return after

    _wrap(tf.distribute.Strategy, "experimental_distribute_dataset",
          after=distributed("experimental_distribute_dataset"))
    _wrap(tf.distribute.Strategy, "distribute_datasets_from_function",
          after=distributed("distribute_datasets_from_function"))

    original_iterators = input_lib._create_iterators_per_worker

    def iterators_per_worker(worker_datasets, *args, **kwargs):
        record = next((r for d, r in _INPUTS if worker_datasets is getattr(d, "_cloned_datasets", None)
                       or worker_datasets is getattr(d, "_datasets", None)), None)
        if record is not None:
            if not _INITIAL:
                _snapshot_initial()
            batches: list = []
            record["iterators"].append(batches)
            number = len(record["iterators"])
            worker_datasets = [_fingerprinted(d, batches, f"{record['where']} iterator {number}")
                               for d in worker_datasets]
        return original_iterators(worker_datasets, *args, **kwargs)

    def _fingerprinted(dataset, batches, label):
        def record(*flat):
            arrays = [t.numpy() for t in flat]
            count = arrays[0].shape[0] if arrays and arrays[0].ndim else 1
            rows = []
            for i in range(count):
                digest = hashlib.blake2b(digest_size=8)
                for array in arrays:
                    digest.update(np.ascontiguousarray(array[i] if array.ndim else array).tobytes())
                rows.append(digest.hexdigest())
            batches.append(rows)
            mark(f"read batch {len(batches)} of the input made at {label}")
            return np.int64(0)

        def observe(*element):
            flat = tf.nest.flatten(element)
            token = tf.py_function(record, flat, Tout=tf.int64)
            with tf.control_dependencies([token]):
                same = tf.nest.map_structure(tf.identity, element)
            return same[0] if len(element) == 1 else same

        try:
            return dataset.map(observe)
        except Exception as exc:  # e.g. sparse components: say it cannot see, never break the script
            _STATE.setdefault("not_seen", []).append(f"input fingerprints at {label}: {type(exc).__name__}")
            return dataset

    input_lib._create_iterators_per_worker = iterators_per_worker

    # models and optimizers: who was built where
    def model_made(result, self, *args, **kwargs):
        if any(m is self for m in _MODELS):
            return
        _MODELS.append(self)
        _STATE["models"].append({"name": self.name, "class": type(self).__name__, "where": _script_line(),
                                 "in_scope": tf.distribute.has_strategy(),
                                 "strategy_before": bool(_STATE["strategies"])})

    _wrap(keras.Model, "__init__", after=model_made)

    def compiled(result, self, *args, **kwargs):
        for model, info in zip(_MODELS, _STATE["models"]):
            if model is self:
                info["compiled_in_scope"] = tf.distribute.has_strategy()
                info["compiled_where"] = _script_line()

    _wrap(keras.Model, "compile", after=compiled)

    def optimizer_made(result, self, *args, **kwargs):
        if not any(o is self for o in _OPTIMIZERS):
            _OPTIMIZERS.append(self)

    _wrap(keras.optimizers.Optimizer, "__init__", after=optimizer_made)
    for name in ("fit", "evaluate", "predict"):
        _wrap(keras.Model, name, before=lambda *a, _n=name, **k: mark(f"model.{_n} started at {_script_line()}"),
              after=lambda r, *a, _n=name, **k: mark(f"model.{_n} ended"))

    # dropout: off for the comparison, named in the report
    dropout = keras.layers.Dropout

    def no_dropout(self, inputs, training=False):
        if self.name not in _STATE["dropout_off"]:
            _STATE["dropout_off"].append(self.name)
        return inputs

    dropout.call = no_dropout

    # writes that do not go through Python's open
    for owner, name in ((keras.Model, "save"), (keras.Model, "save_weights"), (tf.train.Checkpoint, "write"),
                        (tf.train.Checkpoint, "save")):
        _wrap(owner, name, before=lambda *a, _n=name, **k: _record_write(_first_path(*a, **k) or "?", _n))

    def gfile(self, name, mode="r"):
        if any(c in mode for c in "wa"):
            _record_write(name, "tf.io.gfile")

    _wrap(tf.io.gfile.GFile, "__init__", before=gfile)
    import tensorflow.summary as summary_module  # Keras's TensorBoard imports it by this name: maybe a new module

    original_writer = summary_module.create_file_writer

    def create_file_writer(logdir, *args, **kwargs):
        path = os.path.abspath(os.fspath(logdir))
        if path not in _STATE["summary_dirs"]:
            _STATE["summary_dirs"].append(path)
        return original_writer(logdir, *args, **kwargs)

    summary_module.create_file_writer = tf.summary.create_file_writer = create_file_writer


def _layers(model) -> list:
    try:
        return list(model._flatten_layers(include_self=False, recursive=True))
    except Exception:
        return list(getattr(model, "layers", []))


def _unique_models() -> list:
    """(index, model, info) of the registered models, without the models that share another's
    weights (a Sequential builds a Functional of the same layers)."""
    seen, unique = set(), []
    for i, (model, info) in enumerate(zip(_MODELS, _STATE["models"])):
        try:
            key = tuple(id(v) for v in model.weights)
        except Exception:
            key = ()
        if key and key in seen:
            info["same_weights_as_another"] = True
            continue
        seen.add(key)
        unique.append((i, model, info))
    return unique


def _snapshot_initial() -> None:
    for i, model, _ in _unique_models():
        try:
            for j, weight in enumerate(model.trainable_weights):
                _INITIAL[f"init_{i}_{j}"] = weight.numpy()
        except Exception:
            continue
    _INITIAL.setdefault("taken", 1)


def _collect() -> dict:
    """Weights and facts of every model at exit (the arrays go to the npz file)."""
    import numpy as np
    import tensorflow as tf
    import keras

    arrays = {k: v for k, v in _INITIAL.items() if k != "taken"}
    for i, model, info in _unique_models():
        try:
            trainable, other = model.trainable_weights, model.non_trainable_weights
            info["weights"] = len(trainable)
            info["distributed"] = [isinstance(getattr(v, "value", v), tf.distribute.DistributedValues)
                                   for v in trainable + other]
            for j, weight in enumerate(trainable):
                arrays[f"final_{i}_{j}"] = np.asarray(weight.numpy())
            for j, weight in enumerate(other):
                arrays[f"other_{i}_{j}"] = np.asarray(weight.numpy())
            info["batch_norm"] = [{"name": layer.name, "synchronized": bool(getattr(layer, "synchronized", False))}
                                  for layer in _layers(model) if isinstance(layer, keras.layers.BatchNormalization)]
            info["dropout"] = [layer.name for layer in _layers(model) if isinstance(layer, keras.layers.Dropout)]
        except Exception as exc:
            info["error"] = f"{type(exc).__name__}: {exc}"[:300]
    steps = []
    for optimizer in _OPTIMIZERS:
        try:
            steps.append(int(optimizer.iterations.numpy()))
        except Exception:
            continue
    _STATE["steps"] = max(steps) if steps else None
    return arrays


def _exception(exc: BaseException) -> dict:
    import traceback

    script = os.path.abspath(_STATE["script"])
    every = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in every if os.path.abspath(f.filename) == script]
    innermost = every[-1] if every else None  # where it was raised: a bare exception is named by its place
    return {"type": type(exc).__name__, "message": str(exc)[:2000],
            "line": f"{os.path.basename(script)}:{frames[-1].lineno}" if frames else None,
            "code": frames[-1].line if frames else None,
            "raised_at": (f"{_short_path(innermost.filename)}:{innermost.lineno}, in {innermost.name}"
                          if innermost and innermost not in frames[-1:] else None)}


def _short_path(path: str) -> str:
    """A library file as its package path (keras/src/...), anything else by its name."""
    parts = os.path.abspath(path).split(os.sep)
    if "site-packages" in parts:
        return "/".join(parts[parts.index("site-packages") + 1:])
    return os.path.basename(path)


def _finish() -> None:
    _STATE["running"] = False
    arrays = {}
    if "tensorflow" in sys.modules:
        try:
            arrays = _collect()
        except Exception as exc:
            _STATE["collect_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if arrays:
        import numpy as np

        np.savez(os.path.join(_OUT, f"weights-{_RANK}.npz"), **arrays)
    report = {k: v for k, v in _STATE.items() if k != "running"}
    with open(os.path.join(_OUT, f"worker-{_RANK}.json.tmp"), "w") as f:
        json.dump(report, f)
    os.replace(os.path.join(_OUT, f"worker-{_RANK}.json.tmp"), os.path.join(_OUT, f"worker-{_RANK}.json"))
    mark("report written")


def main(argv: list[str]) -> int:
    global _OUT, _RANK
    if len(argv) < 2:
        print("usage: python -m helpers.tools.check_worker OUT_DIR SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    _OUT, script = os.path.abspath(argv[0]), argv[1]
    if os.environ.get("CHECK_SCRIPT_SLURM") == "1" and not os.environ.get("TF_CONFIG"):
        _tf_config_from_slurm()
    _RANK = _rank()
    import socket

    _STATE.update(script=script, rank=_RANK, argv=argv[2:],
                  host=os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
    os.environ.setdefault("PYTHONHASHSEED", str(SEED))
    import random

    random.seed(SEED)
    mark("script starting")
    sys.addaudithook(_audit)
    _install_tensorflow()
    sys.argv = [script, *argv[2:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    _STATE["running"] = True
    import threading

    threading.Thread(target=_watch_where, name="check-script-where", daemon=True).start()
    code = 0
    try:
        import runpy

        runpy.run_path(script, run_name="__main__")
        mark("script ended")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            _STATE["exception"] = {"type": "SystemExit", "message": str(exc.code)[:2000], "line": None, "code": None}
        mark(f"script exited with status {code}")
    except BaseException as exc:  # the script's failure is a finding, reported by the command
        code = 1
        _STATE["exception"] = _exception(exc)
        mark(f"script raised {type(exc).__name__}")
    _STATE["exit_code"] = code
    _finish()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: TensorFlow's collective threads can hang it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
