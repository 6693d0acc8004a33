"""The programs the notebooks write with %%writefile, tested as the notebooks write them."""

import json
from pathlib import Path

import nbformat
import pytest

from helpers.take_home import MODULE, copy_beside
from tests.support.notebooks import NOTEBOOKS, written_program, written_programs


def _backup(root: Path, worker: int, epoch: int, weights: str, record=None) -> None:
    directory = root / f"worker-{worker}"
    directory.mkdir(parents=True)
    (directory / "training_metadata.json").write_text(json.dumps({"epoch": epoch, "batch": 0}))
    (directory / "latest.weights.h5").write_text(weights)
    if record:  # the program's record of a whole backup (its weights' digest), as its callback writes it
        record(str(directory))


def test_fault_tolerance_workers_resume_from_the_oldest_backed_up_epoch(tmp_path, monkeypatch):
    """Notebook 06: a crash between two workers' end-of-epoch saves leaves backups one epoch
    apart; before `fit`, the newer worker takes the older worker's backup."""
    monkeypatch.syspath_prepend(str(MODULE.parent))  # the program imports mwms_slurm, beside it in the lesson
    program: dict = {}
    exec(compile(written_program("06_fault_tolerance.ipynb", "{worker_program}"), "06_worker.py", "exec"), program)
    agree, record = program["agree_on_backup"], program["record_backup"]

    _backup(tmp_path, 0, 3, "weights after epoch 3", record)
    _backup(tmp_path, 1, 2, "weights after epoch 2", record)
    assert agree(str(tmp_path), 1, 2) == {0: 3, 1: 2}  # the older one keeps its own
    assert (tmp_path / "worker-1" / "latest.weights.h5").read_text() == "weights after epoch 2"
    assert agree(str(tmp_path), 0, 2) == {0: 3, 1: 2}
    assert (tmp_path / "worker-0" / "latest.weights.h5").read_text() == "weights after epoch 2"
    assert json.loads((tmp_path / "worker-0" / "training_metadata.json").read_text())["epoch"] == 2

    fresh = tmp_path / "fresh"
    assert agree(str(fresh), 0, 2) == {0: 0, 1: 0}  # no backup yet: nothing to agree on
    assert not fresh.exists()

    # worker 1 died before its first save: it has no directory, so nobody resumes; worker 0 drops its epoch 1
    # (the program as first written listed worker-1/ to copy from it: NotFoundError on every restart)
    early = tmp_path / "early"
    _backup(early, 0, 1, "weights after epoch 1", record)
    assert agree(str(early), 1, 2) == {0: 1, 1: 0}
    assert agree(str(early), 0, 2) == {0: 1, 1: 0}
    assert not (early / "worker-0").exists() and not (early / "worker-1").exists()  # both start from scratch

    # worker 1 died between its weights and its metadata: a weights file alone is no backup (BackupAndRestore
    # would load it and start at epoch 0); both directories go, both start from scratch (as first written,
    # worker 0 copied the weights alone and kept its `epoch: 1`, worker 1 started at 0 from stray weights)
    half = tmp_path / "half"
    _backup(half, 0, 1, "weights after epoch 1", record)
    (half / "worker-1").mkdir()
    (half / "worker-1" / "latest.weights.h5").write_text("weights after epoch 1, no metadata")
    assert agree(str(half), 0, 2) == {0: 1, 1: 0}
    assert agree(str(half), 1, 2) == {0: 0, 1: 0}  # worker 0 already dropped its own
    assert not (half / "worker-0").exists() and not (half / "worker-1").exists()


def _requeue_runs(program: Path, data_dir: Path, state: Path, warn: bool) -> list[dict]:
    """Notebook 11's program in one process over 2 logical CPUs (2 local replicas, as a worker with
    2 GPUs): warned, it stops at a checkpoint (status 3) and a second run resumes; the EVENT lines."""
    import subprocess
    import sys

    events, statuses = [], []
    for restart in range(2):
        done = subprocess.run([sys.executable, str(program), "--data-dir", str(data_dir), "--state", str(state),
                               "--loop", "custom", "--epochs", "2", "--per-replica-batch", "8",
                               "--train-examples", "256", "--cpu-replicas", "2", "--restart", str(restart),
                               *(["--warn"] if warn else [])],
                              capture_output=True, text=True, timeout=300, cwd=program.parent)
        statuses.append(done.returncode)
        assert done.returncode in (0, 3), done.stdout[-1500:] + done.stderr[-3000:]
        events += [json.loads(line[6:]) for line in done.stdout.splitlines() if line.startswith("EVENT ")]
        if done.returncode == 0:
            break
    assert statuses == ([3, 0] if warn else [0]), statuses
    return events


def test_requeue_resume_skips_the_batches_of_every_local_replica(prepared_dir, tmp_path, report):
    """Notebook 11: a run that resumes at step s on a worker with R local replicas must skip s x R
    per-replica batches. With 2 replicas the resumed run ends bit-identical to the uninterrupted one;
    the same program skipping s batches only (one replica's worth) does not."""
    source = written_program("11_checkpoints_requeue.ipynb", "{program}")
    copy_beside(tmp_path)  # mwms_slurm.py, which the program imports
    right = tmp_path / "right.py"
    right.write_text(source)
    wrong_source = source.replace(".skip(start * local_replicas)", ".skip(start)")
    assert wrong_source != source, "the program no longer skips `start * local_replicas` batches"
    wrong = tmp_path / "wrong.py"
    wrong.write_text(wrong_source)

    def final(events):
        return {e["weights"] for e in events if e["event"] == "finished"}

    # the digest covers all weights: a resumed run whose batch normalization statistics were reset after the
    # restore trains the same trainable weights (training uses each batch's statistics) but must not pass as equal
    restored = "    checkpoint.restore(manager.latest_checkpoint)  # nothing to restore on the first run\n"
    reset_source = source.replace(restored, restored + (
        "    for layer in model.layers:  # broken: the moving statistics start again after the restore\n"
        "        if hasattr(layer, 'moving_mean'):\n"
        "            layer.moving_mean.assign(tf.zeros_like(layer.moving_mean))\n"
        "            layer.moving_variance.assign(tf.ones_like(layer.moving_variance))\n"))
    assert reset_source != source, "the custom loop no longer restores with `checkpoint.restore(manager.latest_checkpoint)`"
    reset = tmp_path / "reset.py"
    reset.write_text(reset_source)

    reference = _requeue_runs(right, prepared_dir, tmp_path / "reference", warn=False)
    plan = next(e for e in reference if e["event"] == "plan")
    assert plan["replicas"] == 2 and plan["steps"] == 2 * plan["steps_per_epoch"], plan
    resumed = _requeue_runs(right, prepared_dir, tmp_path / "resumed", warn=True)
    skipped_too_few = _requeue_runs(wrong, prepared_dir, tmp_path / "wrong", warn=True)
    statistics_reset = _requeue_runs(reset, prepared_dir, tmp_path / "reset", warn=True)
    start = [e["step"] for e in resumed if e["event"] == "start"]
    assert start[0] == 0 and 0 < start[1] < plan["steps"], start
    assert len(final(reference)) == 1 and final(resumed) == final(reference), (final(resumed), final(reference))
    assert final(skipped_too_few) != final(reference), "skipping one batch per step should have changed the data"
    assert final(statistics_reset) != final(reference), "the digest should see batch normalization's moving statistics"
    report(f"lesson 11 resume on 2 local replicas: {plan['steps']} steps, resumed at step {start[1]}, "
           f"final weights {final(resumed)} = uninterrupted; skipping `start` only gave {final(skipped_too_few)}, "
           f"moving statistics reset after the restore {final(statistics_reset)}")


def _plan_program() -> dict:
    """The program's functions; its `import mwms_slurm` finds the module where the caller put it on sys.path."""
    namespace: dict = {"__name__": "train_requeue"}
    exec(compile(written_program("11_checkpoints_requeue.ipynb", "{program}"), "train_requeue.py", "exec"), namespace)
    return namespace


def _stops(plan: dict) -> dict:
    """Where each loop stops when warned after step warn_at (--warn): the custom loop and fit at the first
    checkpoint at or after it; the handler at its run call warn_at + 2 (it publishes its count + 1 and
    saves at the call after: failure_handling.py, _check_preemption_and_maybe_checkpoint). None: never."""
    saves = [s for s in range(plan["save_every"], plan["steps"] + 1, plan["save_every"]) if s >= plan["warn_at"]]
    return {"checkpoint": saves[0] if saves else None,
            "handler": plan["warn_at"] + 1 if plan["warn_at"] + 2 <= plan["steps"] else None}


@pytest.mark.parametrize("epochs", [1, 2, 3])
@pytest.mark.parametrize("max_steps", [1, 2, 3, 0])
def test_requeue_plan_leaves_every_loop_room_to_stop_after_the_warning(max_steps, epochs, monkeypatch):
    """Notebook 11's plan at COURSE_MAX_STEPS 1, 2, 3 and unlimited: every loop, warned at warn_at, still
    stops before the run ends (the handler needs warn_at + 2 steps), and with 2 epochs or more the stop is in
    the second epoch or later, with steps of it done (what the proof asks of fit). The old floor of 4 steps
    in all left the handler no room at 2 epochs of 1 or 2 steps."""
    from types import SimpleNamespace

    monkeypatch.syspath_prepend(str(MODULE.parent))  # the program imports mwms_slurm, beside it in the lesson
    program = _plan_program()
    args = SimpleNamespace(epochs=epochs, max_steps=max_steps, save_every=0)
    examples = SimpleNamespace(cardinality=lambda: 256)
    plan = program["make_plan"](args, examples, 16)
    stops = _stops(plan)
    assert stops["checkpoint"] is not None and stops["handler"] is not None, (plan, stops)
    if epochs > 1:
        assert stops["checkpoint"] > plan["steps_per_epoch"], (plan, stops)  # fit: in epoch 1 or later
    if max_steps in (1, 2) and epochs == 2:
        source = written_program("11_checkpoints_requeue.ipynb", "{program}")
        assert "-(-6 // args.epochs)" in source
        weak: dict = {"__name__": "train_requeue"}
        exec(compile(source.replace("-(-6 // args.epochs)", "-(-4 // args.epochs)"), "old.py", "exec"), weak)
        assert _stops(weak["make_plan"](args, examples, 16))["handler"] is None, "the old floor should leave no room"


@pytest.mark.parametrize("max_steps", [1, 2])
def test_requeue_handler_stops_when_warned_at_one_or_two_steps_per_epoch(max_steps, prepared_dir, tmp_path, report):
    """Notebook 11's handler loop, one process, 2 epochs at --max-steps 1 and 2 (COURSE_MAX_STEPS): warned
    (--warn), it saves and stops with the requeue status; the second run resumes there and finishes."""
    import subprocess
    import sys

    program = tmp_path / "train_requeue.py"
    program.write_text(written_program("11_checkpoints_requeue.ipynb", "{program}"))
    copy_beside(tmp_path)
    events, statuses = [], []
    for restart in range(2):
        done = subprocess.run([sys.executable, str(program), "--data-dir", str(prepared_dir), "--state", str(tmp_path / "state"),
                               "--loop", "handler", "--epochs", "2", "--max-steps", str(max_steps), "--per-replica-batch", "8",
                               "--train-examples", "256", "--restart", str(restart), "--warn"],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        statuses.append(done.returncode)
        events += [json.loads(line[6:]) for line in done.stdout.splitlines() if line.startswith("EVENT ")]
        if done.returncode != 3:
            break
    plan = next(e for e in events if e["event"] == "plan")
    stopped = [e for e in events if e["event"] == "stopped"]
    assert statuses == [3, 0], (statuses, done.stdout[-1500:] + done.stderr[-3000:])
    assert len(stopped) == 1 and stopped[0]["iterations"] == plan["warn_at"] + 1, (stopped, plan)
    finished = [e for e in events if e["event"] == "finished"]
    assert finished and finished[0]["iterations"] == plan["steps"], finished
    report(f"lesson 11 handler at --max-steps {max_steps}: {plan['steps']} steps, warned at {plan['warn_at']}, "
           f"stopped after step {stopped[0]['iterations']}, resumed and finished")


def _rank_args(args: list[str], rank: int) -> list[str]:
    """The chief never gets the warning here, so it does not wait for one (--wait-for-warning): unwarned, it
    waited its full 60 s whenever the test's signal reached worker 1 after the warning window began (a loaded
    machine: 114 s for the handler's run, 20 s unloaded). Worker 1 still waits, and the chief cannot pass the
    next all-reduce without it, so the signal still lands in the run."""
    if rank != 0 or "--wait-for-warning" not in args:
        return args
    at = args.index("--wait-for-warning")
    return args[:at] + args[at + 2:]


def _two_workers(program: Path, args: list[str], logs: Path, signal_rank1_after_save: bool) -> list[dict]:
    """Notebook 11's program as 2 MultiWorkerMirroredStrategy workers (local processes, TF_CONFIG);
    optionally SIGUSR1 to worker 1 only (not the chief) once it has logged its first checkpoint.
    Returns each worker's exit status and EVENT lines; every process is killed by the deadline."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from helpers.resolver import free_port, make_tf_config

    addresses = [f"localhost:{free_port()}" for _ in range(2)]
    outs = [logs / f"worker-{r}.log" for r in range(2)]
    procs = [subprocess.Popen([sys.executable, str(program), *_rank_args(args, r)], stdout=outs[r].open("w"), stderr=subprocess.STDOUT,
                              cwd=program.parent, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                                                       "TF_CONFIG": json.dumps(make_tf_config(addresses, r))})
             for r in range(2)]
    deadline, signalled = time.monotonic() + 300, not signal_rank1_after_save
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if not signalled and '"event": "saved"' in outs[1].read_text():
                procs[1].send_signal(signal.SIGUSR1)  # what Slurm's --signal would send, to this task only
                signalled = True
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    return [{"status": p.returncode, "events": [json.loads(l[6:]) for l in out.read_text().splitlines() if l.startswith("EVENT ")],
             "tail": out.read_text()[-2000:]} for p, out in zip(procs, outs)]


@pytest.mark.parametrize("loop", ["handler", "custom"])
def test_every_worker_stops_at_one_step_when_only_one_is_signalled(loop, prepared_dir, tmp_path, report):
    """Notebook 11's handler loop and custom loop under MultiWorkerMirroredStrategy with 2 local workers:
    worker 1 alone gets SIGUSR1; PreemptionCheckpointHandler (its watcher reads the program's note), or the
    custom loop's all-reduce of the notes at each checkpoint, has both workers save at the same step, with
    the same weights, and exit with the requeue status; a second run resumes there and both finish with
    identical weights."""
    source = written_program("11_checkpoints_requeue.ipynb", "{program}")
    program = tmp_path / "train_requeue.py"
    program.write_text(source)
    copy_beside(tmp_path)
    args = ["--loop", loop, "--data-dir", str(prepared_dir), "--state", str(tmp_path / "state"), "--epochs", "2",
            "--per-replica-batch", "16"]
    first_logs, second_logs = tmp_path / "first", tmp_path / "second"
    first_logs.mkdir(), second_logs.mkdir()
    # --wait-for-warning: a worker that reaches its checkpoint after warn_at unwarned waits there (60 s at most),
    # so a signal the test sends late (a loaded machine finishes the 18 steps in a blink) still lands in the run
    first = _two_workers(program, [*args, "--restart", "0", "--wait-for-warning", "60"], first_logs,
                         signal_rank1_after_save=True)
    assert [w["status"] for w in first] == [3, 3], [w["tail"] for w in first]
    stops = [next(e for e in w["events"] if e["event"] == "stopped") for w in first]
    saves = [[e for e in w["events"] if e["event"] == "saved"][-1] for w in first]
    assert [s["warnings"] for s in stops] == [[], ["SIGUSR1"]], stops  # the chief was never signalled
    assert stops[0]["iterations"] == stops[1]["iterations"] == saves[0]["step"] == saves[1]["step"], (stops, saves)
    assert stops[0]["weights"] == stops[1]["weights"] == saves[0]["weights"], (stops, saves)
    second = _two_workers(program, [*args, "--restart", "1"], second_logs, signal_rank1_after_save=False)
    assert [w["status"] for w in second] == [0, 0], [w["tail"] for w in second]
    starts = [next(e for e in w["events"] if e["event"] == "start") for w in second]
    ends = [next(e for e in w["events"] if e["event"] == "finished") for w in second]
    assert [s["step"] for s in starts] == [saves[0]["step"]] * 2 and starts[0]["weights"] == saves[0]["weights"], starts
    plan = next(e for e in first[0]["events"] if e["event"] == "plan")
    assert 0 < saves[0]["step"] < plan["steps"], (saves, plan)
    assert ends[0]["weights"] == ends[1]["weights"] and ends[0]["iterations"] == ends[1]["iterations"] == plan["steps"], ends
    report(f"lesson 11 {loop} loop, 2 MWMS workers, SIGUSR1 to worker 1 only (after its checkpoint at step "
           f"{plan['save_every']}): both saved and stopped at step {saves[0]['step']} (status 3), resumed there, "
           f"finished at step {ends[0]['iterations']} of {plan['steps']} with identical weights")


def test_lesson_15_serving_program_runs_without_keras_and_helpers_and_the_proof_catches_either(tmp_path):
    """Notebook 15's serving program writes beside the logits the TF32 setting it ran with; the lesson's
    runner makes Keras, tf_keras and `helpers` unimportable and reports every import statement outside
    TensorFlow that asked for one of them. Run as the lesson runs it, it serves with TF32 off and asks
    for none; without its enable_tensor_float_32_execution(False) line it reports TF32 on (TensorFlow's
    default, on a CPU too); with an `import helpers`, `import keras` or `import tf_keras` added it fails
    (exit status 1); with the import of Keras or tf_keras in a `try` it serves (exit status 0) and the
    runner reports the import asked for, and so with `importlib.import_module`, `importlib.__import__`
    or `__import__` in a `try` (the first two passed the old runner: no import statement), and so with
    `tf.keras.models.load_model` or `from tensorflow import keras` in a `try` (TensorFlow's lazy Keras loader: the
    runner of the second review passed both, ASKED [] and exit status 0, skipping every import a tensorflow.* module
    made). The lesson's proof fails on each. And `import tensorflow` alone, Keras importable, loads Keras (the reason
    the runner refuses it). The program reads raw uint8 pixels and scales them as the training pipeline did
    (helpers.lesson.normalize): it serves the logits the model gives the scaled images, bit for bit; without its
    division by 255 it serves other logits."""
    import ast
    import json
    import math
    import subprocess
    import sys

    import keras
    import numpy as np

    from tests.support.proof_cases import OK
    from tests.support.proof_cells import run_proof

    from helpers.lesson import normalize

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.export(str(tmp_path / "exported"), verbose=False)
    raw = np.array([[0, 255, 17, 128], [3, 3, 200, 90], [255, 0, 0, 1]], np.uint8)  # raw pixels, as the lesson saves them
    np.save(tmp_path / "probe.npy", raw)
    kernel = model(normalize(raw, 0)[0]).numpy()  # the logits of the images as training scaled them
    program = written_program("15_models_you_keep.ipynb")
    cell = next(c.source for c in nbformat.read(NOTEBOOKS / "15_models_you_keep.ipynb", as_version=4).cells
                if c.cell_type == "code" and "RUNNER = " in c.source)
    assert all(isinstance(n, ast.Assign) and isinstance(n.value, (ast.Constant, ast.Tuple)) for n in ast.parse(cell).body)
    literals = {}
    exec(cell, literals)  # two assignments of literals: the names it blocks and the runner's source
    without, blocked = literals["RUNNER"], literals["BLOCKED"]
    assert blocked == ("keras", "tf_keras", "helpers")
    line = "tf.config.experimental.enable_tensor_float_32_execution(False)"
    assert program.count(line) == 1
    without_line = "\n".join(s for s in program.splitlines() if line not in s)

    def adding(line: str) -> str:
        changed = program.replace("import tensorflow as tf\n", f"import tensorflow as tf\n\n{line}\n", 1)
        assert changed != program
        return changed

    refused = "helpers unimportable, asking for none"
    variants = {"as the lesson runs it": (program, None), "without the TF32 line": (without_line, "float32 without XLA"),
                "with import helpers": (adding("import helpers"), refused),
                "with import keras": (adding("import keras"), refused),
                "with import tf_keras": (adding("import tf_keras"), refused),
                "with import keras in a try": (adding("try:\n    import keras\nexcept ImportError:\n    pass"), refused),
                "with import tf_keras in a try": (adding("try:\n    import tf_keras\nexcept ImportError:\n    keras = None"),
                                                  refused),
                # lesson 15's 2026-11-30 review, finding 2c: imports that are no import statement
                "with importlib.import_module in a try": (adding("import importlib\ntry:\n    importlib.import_module("
                                                                 "'helpers')\nexcept ImportError:\n    pass"), refused),
                "with importlib.__import__ in a try": (adding("import importlib\ntry:\n    importlib.__import__('keras')"
                                                              "\nexcept ImportError:\n    pass"), refused),
                "with __import__ in a try": (adding("try:\n    __import__('tf_keras')\nexcept ImportError:\n    pass"),
                                             refused),
                # the second review of 2026-11-30, finding 1: Keras asked for through TensorFlow's lazy loader
                "with tf.keras in a try": (adding("try:\n    tf.keras.models.load_model\nexcept ImportError:\n    pass"),
                                           refused),
                "with from tensorflow import keras in a try": (adding("try:\n    from tensorflow import keras\n"
                                                                      "    keras.models.load_model\nexcept ImportError:\n"
                                                                      "    pass"), refused),
                "without the scaling": (program.replace(" / 255.0", ""), None)}
    expected = {"as the lesson runs it": (0, [], False), "without the TF32 line": (0, [], True),
                "with import helpers": (1, [["helpers", "__main__"]], None),
                "with import keras": (1, [["keras", "__main__"]], None),
                "with import tf_keras": (1, [["tf_keras", "__main__"]], None),
                "with import keras in a try": (0, [["keras", "__main__"]], False),
                "with import tf_keras in a try": (0, [["tf_keras", "__main__"]], False),
                "with importlib.import_module in a try": (0, [["helpers", "__main__"]], False),
                "with importlib.__import__ in a try": (0, [["keras", "__main__"]], False),
                "with __import__ in a try": (0, [["tf_keras", "__main__"]], False),
                "with tf.keras in a try": (0, [["keras", "__main__"]], False),
                "with from tensorflow import keras in a try": (0, [["keras", "__main__"]], False),
                "without the scaling": (0, [], False)}
    for name, (source, match) in variants.items():
        script, out = tmp_path / f"{name.replace(' ', '_')}.py", tmp_path / f"{name.replace(' ', '_')}.npz"
        script.write_text(source)
        done = subprocess.run([sys.executable, "-c", without, ",".join(blocked), str(script), str(tmp_path / "exported"),
                               str(tmp_path / "probe.npy"), str(out)], capture_output=True, text=True, timeout=300)
        asked = next((json.loads(l[6:]) for l in done.stdout.splitlines() if l.startswith("ASKED ")), "no report")
        tf32 = None
        if done.returncode == 0:
            with np.load(out) as answer:
                assert answer["logits"].shape == (3, 2)
                tf32 = bool(answer["tf32"])
                assert np.array_equal(answer["logits"], kernel) == (name != "without the scaling"), (name, answer["logits"])
        assert (done.returncode, asked, tf32) == expected[name], (name, done.stdout[-1000:], done.stderr[-3000:])
        assert done.returncode == 0 or "ModuleNotFoundError" in done.stderr, (name, done.stderr[-3000:])
        reported = {"tf32_on": {"workers": False, "here": False, "serving program": tf32}, "served_status": done.returncode,
                    "served_asked": asked}
        namespace = {"math": math, **OK["15_models_you_keep.ipynb"], **reported}
        if match:
            with pytest.raises(AssertionError, match=match):
                run_proof("15_models_you_keep.ipynb", namespace)
        else:
            run_proof("15_models_you_keep.ipynb", namespace)
    plain = subprocess.run([sys.executable, "-c", "import sys, tensorflow; print(sys.modules.get('keras') is not None)"],
                           capture_output=True, text=True, timeout=300)
    assert plain.stdout.strip().splitlines()[-1] == "True", plain.stderr[-2000:]


_COURSE_USE = __import__("re").compile(r"^\s*(from\s+helpers\b|import\s+helpers\b)|-m\s+helpers\b", __import__("re").M)
_WRITES = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if written_programs(p.name))
# Lessons whose written files still use the course (fix them, then drop them here: strict xfail fails once they pass)
_STILL_IMPORT: set[str] = set()


def course_uses(source: str) -> list[str]:
    """The lines of a written file that import the course's `helpers` or run `python -m helpers`."""
    return [m.group(0).strip() for m in _COURSE_USE.finditer(source)]


def test_course_uses_finds_imports_anywhere_in_a_file_and_the_cli():
    found = course_uses("import os\ndef main():\n    from helpers.data import load_split\nimport helpers\n"
                        'unset $("$PYTHON" -m helpers proxies)\nimport helpers_other\n')
    assert found == ["from helpers", "import helpers", "-m helpers"], found


@pytest.mark.parametrize("notebook", [pytest.param(n, marks=pytest.mark.xfail(
    strict=True, reason="its written files still import the course")) if n in _STILL_IMPORT else n for n in _WRITES])
def test_files_a_lesson_writes_import_nothing_from_the_course(notebook):
    """Scripts and sbatch files a lesson writes for a job are take-home: no `helpers` import, no
    `python -m helpers` (the course is not installed where a learner takes them)."""
    uses = {name: course_uses(body) for name, body in written_programs(notebook).items()}
    assert not any(uses.values()), f"{notebook}: {uses}"


@pytest.mark.parametrize("shuffle", [True, False], ids=["as written", "shuffle=False"])
def test_lesson_16_worker_reports_a_new_file_order_only_when_its_file_list_is_shuffled(tmp_path, shuffle):
    """Notebook 16's read_shards.py as one worker (MWMS alone, no TF_CONFIG) on 8 small files: as written
    its passes, one file after the other, report orders not all the same (3 passes for 8! = 40,320
    orders: all one order by chance 1 in 40,320**2); with sharded_dataset(..., shuffle=False) it
    reports one order every pass, which the lesson's proof fails (`reshuffled`)."""
    import os
    import subprocess
    import sys

    import tensorflow as tf

    programs = written_programs("16_input_at_scale.ipynb")
    program = programs['"read_shards.py"}']
    if not shuffle:
        call = "global_batch, cycle_length=1)"  # its one pipeline
        assert program.count(call) == 1, call
        program = program.replace(call, call.replace("global_batch", "global_batch, shuffle=False"))
    (tmp_path / "read_shards.py").write_text(program)
    (tmp_path / "shards.py").write_text(programs['"shards.py"}'])
    copy_beside(tmp_path)
    files = tmp_path / "files"
    files.mkdir()
    for k in range(8):
        with tf.io.TFRecordWriter(str(files / f"part-{k}.tfrecord")) as writer:
            for i in range(k, 32, 8):
                ints = {"label": 0, "index": i, "shard": k}
                feature = {n: tf.train.Feature(int64_list=tf.train.Int64List(value=[v])) for n, v in ints.items()}
                feature["image"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(32 * 32 * 3)]))
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("SLURM_")}
    done = subprocess.run([sys.executable, str(tmp_path / "read_shards.py"), "--files", str(files), "--out",
                           str(tmp_path / "out"), "--per-replica-batch", "4"], env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "worker-0.json").read_text())
    assert [sorted(order) for order in report["orders"]] == [list(range(8))] * 3, report["orders"]
    assert (len({tuple(order) for order in report["orders"]}) > 1) == shuffle, report["orders"]


@pytest.mark.parametrize("notebook", sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")))
def test_job_scripts_a_lesson_writes_parse_in_bash(notebook, tmp_path):
    """Every .sbatch/.sh file a lesson writes parses (`bash -n`): a quote out of place otherwise shows
    only on a cluster, as the job's first line of output."""
    import subprocess

    for name, body in written_programs(notebook).items():
        if name.rstrip('"}').endswith((".sbatch", ".sh")):
            script = tmp_path / "script"
            script.write_text(body)
            parsed = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
            assert parsed.returncode == 0, f"{notebook} {name}: {parsed.stderr}"
