"""One worker of `python -m helpers check-script`: runs the user's script unchanged, watched.

    python -m helpers.commands.check_script.worker OUT_DIR SCRIPT [SCRIPT_ARGS...]

That is how a Slurm task starts (`check-script --slurm`). Local workers are forked instead from
the command, which imported TensorFlow and put the wrappers on once (`prepare`), and each fork
calls `run` (one import of TensorFlow a check, not one a worker). Either way, before the script
runs as `__main__` (through `runpy`), `watch` has wrapped TensorFlow and Keras; the worker
hides the GPUs, keeps TensorFlow's own frames in tracebacks, fixes the seeds, points the
temporary directory into OUT_DIR (TensorFlow's autograph writes its traced code there, and
`os._exit` skips its clean-up), writes a progress mark per step to a side file (a worker
killed at a deadline is named by its last one) and, each second, the script line it is on. At
exit it writes OUT_DIR/worker-RANK.json and weights-RANK.npz; it never reads the script's output.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from .cwd import private_cwd
from .record import SEED, STATE, WHERE, audit, mark, start
from . import watch as check_watch

_INITIAL: dict = {}
_STEPS: dict = {}  # the trainable weights as each training step is fed, fed{stream}_{step}_{model}_{weight}
_STEPS_HELD = [0]  # the bytes _STEPS holds, counted as they are taken (not summed again at every step)
STEP_BYTES = 32 * 2 ** 20  # what those may hold (the first step always taken): 48 steps of a 173k-weight model
_FRAME = re.compile(r'^ +File "(.+)", line (\d+), in (\S+)')  # a frame of autograph's "in user code:" message


def rank_from_environment() -> int:
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
    from ...resolver import make_tf_config, resolve_step

    layout, _, workers = resolve_step()
    os.environ["TF_CONFIG"] = json.dumps(make_tf_config(workers, layout.rank))


def prepare() -> None:
    """Import TensorFlow and Keras and wrap them (once a process): no TensorFlow op runs, so a
    process forked afterwards can still make a MultiWorkerMirroredStrategy. The collector is off
    during the import and what it made is frozen after it (`gc.freeze`, as Python's gc docs advise
    before a fork): the collections the import set off took a third of it, and those at the
    command's exit, over TensorFlow's objects, most of a second (measured on 2 shared cores at a
    load of 5: the import 2.1-4.0 s before, 1.6-2.6 s after; import and exit 3.1-5.1 s, 1.7-2.8 s)."""
    import gc

    if not getattr(prepare, "done", False):
        gc.disable()
        try:
            check_watch.install()
        finally:
            gc.freeze()
            gc.enable()
        prepare.done = True


def _watch_where() -> None:
    """Every second, the line of the script the main thread is on, to where-RANK.txt: a worker
    ended at the deadline is named with the line it was stuck on (a TensorFlow call that waits in
    C++ releases the GIL, so this thread runs; the strategy's constructor does not, see marks)."""
    import linecache
    import threading

    main_id, script = threading.main_thread().ident, WHERE["script"]
    path, last = os.path.join(WHERE["out"], f"where-{WHERE['rank']}.txt"), None
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


# ---------------------------------------------------------------- what a worker leaves
def _layers(model) -> list:
    try:
        return list(model._flatten_layers(include_self=False, recursive=True))
    except Exception:
        return list(getattr(model, "layers", []))


def _unique_models() -> list:
    """(index, model, info) of the registered models, without the models that share another's
    weights (a Sequential builds a Functional of the same layers)."""
    seen, unique = set(), []
    for i, (model, info) in enumerate(zip(check_watch.MODELS, STATE["models"])):
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


def snapshot_weights(stream: int, step: int, phase: str) -> None:
    """As each step is fed: the trainable weights before the first step (init_), then as each
    training step of a stream is fed (fed{stream}_{step}_, after the steps before it), while they
    fit in STEP_BYTES. Keyed by the feed, not by the optimizer's step count: a step's
    `iterations.assign_add` waits for nothing the feed does, and read here it gave keys that did
    not match between the runs. The analysis compares the runs step by step: training amplifies
    float32 rounding, so the first steps are where the runs can be told equal or not."""
    if not _INITIAL:
        _INITIAL.update(_trainable("init_"), taken=1)
        return
    if step < 2 or "evaluate" in phase or "predict" in phase:  # a stream's first feed: no step of it before
        return
    if _STEPS_HELD[0] > STEP_BYTES:
        return
    taken = _trainable(f"fed{stream}_{step}_")
    _STEPS.update(taken)
    _STEPS_HELD[0] += sum(a.nbytes for a in taken.values())


def _trainable(prefix: str) -> dict:
    """{prefix + f"{model}_{weight}": array} of every registered model's trainable weights."""
    arrays = {}
    for i, model, _ in _unique_models():
        try:
            for j, weight in enumerate(model.trainable_weights):
                arrays[f"{prefix}{i}_{j}"] = weight.numpy()
        except Exception:
            continue
    return arrays


def _optimizer_steps() -> int | None:
    """The steps the script's optimizers took (the most of any), or None when none can be read."""
    steps = []
    for optimizer in check_watch.OPTIMIZERS:
        try:
            steps.append(int(optimizer.iterations.numpy()))
        except Exception:
            continue
    return max(steps) if steps else None


def _collect() -> dict:
    """Weights and facts of every model at exit (the arrays go to the npz file); optimizer steps;
    the value each worker's metrics made outside the scope hold (plain variables: a local read)."""
    import numpy as np
    import tensorflow as tf
    import keras

    arrays = {k: v for k, v in {**_INITIAL, **_STEPS}.items() if k != "taken"}
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
    STATE["steps"] = _optimizer_steps()
    for metric, info in zip(check_watch.METRICS, STATE["metrics"]):
        if not info["in_scope"]:  # a variable of the scope would be read summed over the workers: a collective
            try:
                info["result"] = float(np.asarray(metric.result()).ravel()[0])
                info["updated"] = any(float(np.abs(np.asarray(v.numpy())).sum()) > 0 for v in metric.variables)
            except Exception as exc:
                info["error"] = f"{type(exc).__name__}: {exc}"[:200]
    return arrays


def _full_tracebacks() -> None:
    """Keep TensorFlow's and Keras's own frames in the tracebacks they raise: both filter them out
    by default (tensorflow/python/util/traceback_utils.py, for the calling thread;
    keras/src/utils/traceback_utils.py), and the failure line names the innermost frame, where
    the error was raised, which is often theirs (a bare `assert` in TensorFlow's distribute code)."""
    import tensorflow as tf
    import keras

    tf.debugging.disable_traceback_filtering()
    keras.config.disable_traceback_filtering()


def _exception(exc: BaseException) -> dict:
    import traceback

    script = WHERE["script"]
    every = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in every if os.path.abspath(f.filename) == script]
    innermost = every[-1] if every else None  # where it was raised: a bare exception is named by its place
    traced, message = _traced(str(exc), script, type(exc).__name__)
    return {"type": type(exc).__name__, "message": message[:2000], "traced": traced,
            "line": f"{os.path.basename(script)}:{frames[-1].lineno}" if frames else None,
            "code": frames[-1].line if frames else None,
            "raised_at": (f"{_short_path(innermost.filename)}:{innermost.lineno}, in {innermost.name}"
                          + (f": {innermost.line.strip()[:160]}" if innermost.line else "")
                          if innermost and innermost not in frames[-1:] else None)}


def _traced(message: str, script: str, kind: str) -> tuple[str | None, str]:
    """(the script's innermost frame in a traced function, as 'train_step at train.py:47', the
    original message) of an error autograph re-raised, else (None, the message). An error raised
    while a tf.function's Python is traced comes back with the traced frames as its message: 'in
    user code:', a `File "...", line N, in NAME` line and a code line per frame, outermost first,
    then the original 'Type: message' (ErrorMetadataBase.get_message in
    tensorflow/python/autograph/pyct/error_utils.py); its first line alone would name no frame."""
    lines = message.splitlines()
    files = [(i, m) for i, m in ((i, _FRAME.match(line)) for i, line in enumerate(lines)) if m]
    if not message.startswith("in user code:") or not files:
        return None, message
    ours = [m for _, m in files if os.path.abspath(m[1]) == script]
    traced = f"{ours[-1][3]} at {os.path.basename(script)}:{ours[-1][2]}" if ours else None
    cause = "\n".join(line.strip() for line in lines[files[-1][0] + 2:] if line.strip())
    return traced, cause.removeprefix(f"{kind}:").strip()


def _short_path(path: str) -> str:
    """A library file as its package path (keras/src/...), anything else by its name."""
    parts = os.path.abspath(path).split(os.sep)
    if "site-packages" in parts:
        return "/".join(parts[parts.index("site-packages") + 1:])
    return os.path.basename(path)


def _finish() -> None:
    STATE["running"] = False
    arrays = {}
    if "tensorflow" in sys.modules:
        try:
            arrays = _collect()
        except Exception as exc:
            STATE["collect_error"] = f"{type(exc).__name__}: {exc}"[:300]
    out, rank = WHERE["out"], WHERE["rank"]
    if arrays:
        import numpy as np

        np.savez(os.path.join(out, f"weights-{rank}.npz"), **arrays)
    report = {k: v for k, v in STATE.items() if k not in ("running", "phase")}
    with open(os.path.join(out, f"worker-{rank}.json.tmp"), "w") as f:
        json.dump(report, f)
    os.replace(os.path.join(out, f"worker-{rank}.json.tmp"), os.path.join(out, f"worker-{rank}.json"))
    mark("report written")


def run(out: str, script: str, argv: list[str], real_cwd: str = "") -> int:
    """Run `script` with `argv` as this process's worker (TF_CONFIG set, `prepare` done, in a
    working directory of its own standing for `real_cwd`); write its report. Returns the script's
    exit status; the caller ends with os._exit (no interpreter teardown: TensorFlow's collective
    threads can hang it)."""
    import random
    import socket
    import tempfile
    import threading

    rank = rank_from_environment()
    start(out, rank, script, real_cwd)
    WHERE["given_tf_config"] = os.environ.get("TF_CONFIG", "")  # what the strategy should read (the script may not)
    STATE.update(script=script, rank=rank, argv=argv,
                 host=os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    tempfile.tempdir = None  # TMPDIR (the worker's own, inside OUT) is read again
    random.seed(SEED)
    mark("script starting")
    check_watch.hide_gpus()
    _full_tracebacks()
    check_watch.on_each_step(snapshot_weights)
    sys.addaudithook(audit)
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    sys.dont_write_bytecode = True  # a module beside the script makes no __pycache__ there: the check watches it
    STATE["running"] = True
    threading.Thread(target=_watch_where, name="check-script-where", daemon=True).start()
    code = 0
    try:
        import runpy

        runpy.run_path(script, run_name="__main__")
        mark("script ended")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            STATE["exception"] = {"type": "SystemExit", "message": str(exc.code)[:2000], "line": None, "code": None}
        mark(f"script exited with status {code}")
    except BaseException as exc:  # the script's failure is a finding, reported by the command
        code = 1
        STATE["exception"] = _exception(exc)
        mark(f"script raised {type(exc).__name__}")
    STATE["exit_code"] = code
    _finish()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m helpers.commands.check_script.worker OUT_DIR SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    out, script = os.path.abspath(argv[0]), argv[1]
    if not os.path.isdir(out):  # e.g. a scratch directory on another node's own disk
        print(f"check-script worker: the scratch directory {out} is not visible here", file=sys.stderr)
        return 3
    if os.environ.get("CHECK_SCRIPT_SLURM") == "1":  # the check's, over any the task inherited
        _tf_config_from_slurm()
    rank = rank_from_environment()
    tmp = os.path.join(out, f"tmp-{rank}")
    os.makedirs(tmp, exist_ok=True)
    os.environ["TMPDIR"] = tmp
    real = os.getcwd()
    script = os.path.abspath(script)
    os.chdir(private_cwd(Path(out), rank, Path(real)))
    prepare()
    os._exit(run(out, script, argv[2:], real_cwd=real))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
