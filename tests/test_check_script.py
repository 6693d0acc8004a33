"""`python -m helpers check-script`: correct scripts pass, each planted mistake is named.

The correct scripts: lesson 08's take-home script (as the notebook writes it), a script written
as TensorFlow's multi-worker Keras tutorial writes it and one written as its custom-loop tutorial
does (tests/scripts/, data from a local .npz file). Each planted mistake is one edit of a copy,
and each test asserts the message that names it. A check runs the script as 1 worker and as 2
local workers (about 30-50 s here); the analysis itself is also tested on hand-made reports.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.tools import check_script as cs
from tests.conftest import ROOT, run_cli, squeue_empty
from tests.test_notebook_programs import written_program

SCRIPTS = Path(__file__).parent / "scripts"
TUTORIAL = (SCRIPTS / "keras_tutorial.py").read_text()
CUSTOM = (SCRIPTS / "custom_loop.py").read_text()
LESSON08 = written_program("08_batch_job.ipynb", "{script}")


# ------------------------------------------------------------------ fast: options and analysis
def test_a_missing_script_is_one_line(tmp_path):
    done = run_cli("check-script", str(tmp_path / "nope.py"), "--global-batch-flag", "batch", "--", "--x", "1")
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: no script {tmp_path / 'nope.py'}: give the path of your training script"


@pytest.mark.parametrize("args, message", [
    (["--global-batch-flag", "batch", "--global-batch", "12", "--workers", "5"], "does not split over 5 workers"),
    (["--global-batch-flag", "batch", "--workers", "two"], "give worker counts like 2 or 2,3"),
    (["--global-batch-flag", "batch", "--workers", "1"], "the comparison needs 2 or more workers"),
    (["--global-batch-flag", "batch", "--", "--batch", "8"], "--batch is set by check-script"),
])
def test_bad_options_are_one_line(tmp_path, args, message):
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    done = run_cli("check-script", str(script), *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def _run(workers: int, batches: dict, steps: int = 2, **report) -> cs.Run:
    """A hand-made run: `batches[rank]` the fingerprints of each step's batch."""
    run = cs.Run(workers=workers)
    for rank in range(workers):
        run.reports[rank] = {"steps": steps, "inputs": [{"iterators": [batches[rank]]}], **report}
    return run


def _options(**kw) -> cs.Options:
    return cs.Options(Path("train.py"), [], [2], 4, "--batch", True, **kw)


def test_the_analysis_tells_the_sharding_mistakes_apart():
    one = _run(1, {0: [list("abcd"), list("abcd")]})
    right = _run(2, {0: [list("ac"), list("ca")], 1: [list("bd"), list("db")]})
    assert cs.coverage_findings(one, right)[0][0].status == "PASS"
    unsharded = _run(2, {0: [list("ab"), list("cd")], 1: [list("ab"), list("cd")]})
    assert "not sharded" in cs.coverage_findings(one, unsharded)[0][0].detail
    twice = _run(2, {0: [list("aa"), list("aa")], 1: [list("bb"), list("bb")]})
    assert "sharded twice" in cs.coverage_findings(one, twice)[0][0].detail
    overlapping = _run(2, {0: [list("ab"), list("ab")], 1: [list("bc"), list("bc")]})
    detail = cs.coverage_findings(one, overlapping)[0][0].detail
    assert "each worker shuffled differently before a manual shard()" in detail
    # b read by both workers in a step; d missing from both steps: counted once over the 2 steps, not per epoch
    assert "over 2 steps, 1 of the 4 examples were read by two workers in one step, and 1 were missing" in detail, detail


def test_the_analysis_names_a_wrong_batch_either_way():
    one = _run(1, {0: [list("abcd"), list("abcd")]})
    global_as_local = _run(2, {0: [list("abcd")] * 2, 1: [list("abcd")] * 2})
    finding = cs.batch_findings(one, global_as_local, _options())[0][0]
    assert finding.status == "FAIL" and "each worker's batch is the global batch 4" in finding.detail
    local_as_global = _run(2, {0: [list("a")] * 2, 1: [list("b")] * 2})
    finding = cs.batch_findings(one, local_as_global, _options())[0][0]
    assert "batched by the per-worker batch" in finding.detail


def test_the_weight_comparison_names_a_loss_scaled_by_the_replica_batch():
    w0, update = np.zeros(10, np.float32), np.linspace(-1, 1, 10).astype(np.float32)
    ref, run = cs.Run(workers=1), cs.Run(workers=2)
    model = {"name": "m", "weights": 1, "batch_norm": []}
    ref.reports[0] = run.reports[0] = {"steps": 3, "models": [model]}
    ref.weights[0] = {"init_0_0": w0, "final_0_0": w0 + update}
    run.weights[0] = {"final_0_0": w0 + 2 * update}
    finding = cs.weight_findings(ref, run, True, _options())[0]
    assert finding.status == "FAIL" and "2.00 times as far" in finding.detail
    assert "compute_average_loss" in finding.fix
    run.weights[0] = {"final_0_0": w0 + update * (1 + 1e-6)}
    assert cs.weight_findings(ref, run, True, _options())[0].status == "PASS"
    assert cs.tolerance(3, 4) > 1e-6  # float32 rounding of a 4-example batch over 3 steps passes


def test_a_reference_run_that_fails_names_a_model_made_outside_the_scope():
    """In a custom loop, a model and optimizer made outside strategy.scope() fail the first step even
    with one worker (a bare AssertionError from Keras's optimizer): the report names the cause too."""
    model = {"name": "sequential", "where": "train.py:31", "in_scope": False, "weights": 4,
             "distributed": [False] * 4, "batch_norm": []}
    ref = cs.Run(workers=1)
    ref.reports[0] = {"strategies": [{"replicas": 1}], "models": [model],
                      "exception": {"type": "AssertionError", "message": "in user code:\n", "line": "train.py:53",
                                    "code": "loss = train_step(batch)"}}
    (label, findings), = cs.analyse(ref, [], _options())
    assert label == "1 worker (the reference)" and [f.what for f in findings] == ["strategy.scope()",
                                                                                  "the run with 1 worker"], findings
    assert findings[0].status == "FAIL" and "was built outside strategy.scope()" in findings[0].detail
    ref.reports[0]["models"] = [{**model, "in_scope": True, "distributed": [True] * 4}]
    assert [f.what for f in cs.analyse(ref, [], _options())[0][1]] == ["the run with 1 worker"]

def test_identical_weights_compares_the_non_trainable_arrays_too():
    """Moving statistics that differ between the workers (batch norm per replica) are no PASS."""
    run = cs.Run(workers=2)
    same = {"final_0_0": np.ones(3, np.float32), "other_0_0": np.zeros(2, np.float32)}
    run.weights = {0: same, 1: dict(same)}
    finding, = cs.identical_findings(run)
    assert finding.status == "PASS" and "1 trainable and 1 non-trainable arrays" in finding.detail, finding
    run.weights[1] = {**same, "other_0_0": np.array([0.0, 0.025], np.float32)}
    finding, = cs.identical_findings(run)
    assert finding.status == "FAIL" and "worker 1's non-trainable weights (e.g. batch norm's" in finding.detail, finding
    assert "synchronized=True" in finding.fix, finding


def test_a_failure_line_names_where_the_exception_was_raised():
    run = cs.Run(workers=1)
    run.reports[0] = {"exception": {"type": "AssertionError", "message": "", "line": "train.py:53",
                                    "code": "loss = train_step(batch)",
                                    "raised_at": "keras/src/backend/tensorflow/optimizer.py:134, in "
                                                 "_distributed_tf_update_step"}}
    finding, = cs.crash_findings(run, "1 worker")
    assert finding.detail == ("worker 0 failed at train.py:53 (loss = train_step(batch)): AssertionError (raised at "
                              "keras/src/backend/tensorflow/optimizer.py:134, in _distributed_tf_update_step)"), finding


def test_the_worker_records_the_innermost_frame_of_an_exception(tmp_path, monkeypatch):
    from helpers.tools import check_worker

    script = tmp_path / "train.py"
    script.write_text("import json\njson.loads('{')\n")
    monkeypatch.setitem(check_worker._STATE, "script", str(script))
    try:
        exec(compile(script.read_text(), str(script), "exec"), {})
    except ValueError as exc:
        found = check_worker._exception(exc)
    assert found["line"] == "train.py:2" and found["raised_at"].startswith("decoder.py:") \
        and found["raised_at"].endswith(", in raw_decode"), found


# ------------------------------------------------------------------ slow: real scripts
@pytest.fixture(scope="module")
def mnist(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("mnist") / "mnist.npz"
    np.savez(path, x=rng.integers(0, 256, (64, 28, 28), dtype=np.uint8), y=rng.integers(0, 10, 64))
    return path


def check(tmp_path: Path, source: str, *args: str, env: dict | None = None) -> tuple[int, str]:
    script = tmp_path / "train.py"
    script.write_text(source)
    began = time.monotonic()
    done = run_cli("check-script", str(script), *args, timeout=900, env=env)
    print(done.stdout, done.stderr[-2000:], f"one check: {time.monotonic() - began:.0f} s", sep="\n")
    return done.returncode, done.stdout


def options(base: str, tmp_path: Path, data: Path) -> tuple[list[str], list[str]]:
    """(check-script's options, the script's own options) of each correct script."""
    if base == "tutorial":
        return (["--per-replica-batch-flag", "per-worker-batch", "--examples-flag", "examples"],
                ["--data", str(data), "--epochs", "3", "--steps-per-epoch", "1", "--model-dir", str(tmp_path / "model")])
    if base == "custom":
        return (["--global-batch-flag", "global-batch", "--examples-flag", "examples"],
                ["--data", str(data), "--epochs", "3", "--steps-per-epoch", "1",
                 "--checkpoint-dir", str(tmp_path / "ckpt")])
    return (["--per-replica-batch-flag", "per-replica-batch", "--examples-flag", "train-examples"],
            ["--data-dir", str(data), "--out", str(tmp_path / "run"), "--epochs", "3", "--test-examples", "12"])


SOURCES = {"tutorial": TUTORIAL, "custom": CUSTOM, "lesson08": LESSON08}
SHARD = "dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)\n"
# name: (correct script, [(old, new) edits], check-script options, lines the output must hold)
PLANTED = {
    "outside_scope": ("tutorial", [("with strategy.scope():\n    # Model building/compiling need to be within "
                                    "`strategy.scope()`.\n    multi_worker_model", "if True:\n    multi_worker_model")],
                      [], ["FAIL     strategy.scope(): model 'sequential' (made at train.py:",
                           "was built outside strategy.scope()"]),
    "per_worker_batch_as_global": ("tutorial", [("mnist_dataset(args.data, global_batch_size, args.examples)",
                                                 "mnist_dataset(args.data, per_worker_batch_size, args.examples)")],
                                   [], ["FAIL     batch per replica: each worker's steps hold 3 examples, 1/2 of the 6",
                                        "batched by the per-worker batch"]),
    "loss_over_replica_batch": ("custom", [("loss = tf.nn.compute_average_loss(per_example_loss, "
                                            "global_batch_size=global_batch_size)",
                                            "loss = tf.reduce_mean(per_example_loss)")],
                                [], ["FAIL     same weights as one worker: the 2 workers moved the weights",
                                     "the loss is averaged over each replica's batch"]),
    "not_sharded": ("lesson08", [("ds = examples.shard(context.num_input_pipelines, context.input_pipeline_id)",
                                  "ds = examples")],
                    [], ["FAIL     input sharding: all 2 workers read the same examples in every step"]),
    # a manual shard() before experimental_distribute_dataset is no mistake: auto-sharding leaves such a
    # pipeline alone (measured with the tutorial copy); sharding twice happens in a dataset function
    "sharded_twice": ("custom", [(SHARD, SHARD + "    " + SHARD)],
                      [], ["FAIL     input sharding:", "the input is sharded twice"]),
    "shuffled_per_worker_then_shard": ("lesson08", [("ds = examples.shard(", "ds = examples.shuffle(1000, "
                                                     "seed=context.input_pipeline_id).shard(")],
                                       [], ["FAIL     input sharding: the workers' shards overlap",
                                            "each worker shuffled differently before a manual shard()"]),
    "same_checkpoint": ("custom", [('write_dir = args.checkpoint_dir if task_id == 0 else os.path.join('
                                    'args.checkpoint_dir, f"workertemp_{task_id}")', "write_dir = args.checkpoint_dir"),
                                   ("if task_id != 0:\n    tf.io.gfile.rmtree(write_dir)\n", "")],
                        [], ["FAIL     who writes: workers 0, 1 all write ", "ckpt (write)", "write only on the chief"]),
    "batch_norm_per_replica": ("tutorial", [('keras.layers.Conv2D(8, 3, activation="relu"),',
                                             'keras.layers.Conv2D(8, 3, activation="relu"),\n'
                                             '        keras.layers.BatchNormalization(),')],
                               [], ["FAIL     batch norm: layers batch_normalization compute their statistics over "
                                    "each replica's batch alone (6 examples here, not the global 12)",
                                    "NOT SEEN same weights as one worker: not exact: batch-norm layers "
                                    "batch_normalization"]),
    "fit_without_the_keras_fix": ("tutorial", [("\nfix_keras_fit_for_multiworker()\n", "\n")],
                                  [], ["FAIL     model.fit with 2 workers: worker",  # one line, whichever workers failed "this script does not carry the fix",
                                       "docs/keras3-fit.md"]),
    "worker_never_joins": ("custom", [("strategy = tf.distribute.MultiWorkerMirroredStrategy()",
                                       "import time\nif json.loads(os.environ['TF_CONFIG'])['task']['index'] == 1:\n"
                                       "    time.sleep(3600)\nstrategy = tf.distribute.MultiWorkerMirroredStrategy()")],
                           # 25 s: worker 0 only has to import TensorFlow and enter the strategy
                           ["--deadline", "25"], ["FAIL     hang: worker(s) 1 never joined",
                                                  "its last step 'MultiWorkerMirroredStrategy() entered",
                                                  "worker 1: still running at train.py:26 (time.sleep(3600))"]),
    "step_only_the_chief_runs": ("custom", [("checkpoint.write(", "if task_id == 0:\n    train_step(iterator)\n"
                                             "checkpoint.write(")],
                                 ["--deadline", "40"], ["FAIL     a collective only some workers enter: worker 0 failed "
                                                        "at train.py:", "worker(s) 1 had already ended the script"]),
}
CHECKS = ("strategy.scope()", "batch per replica", "input sharding", "same weights as one worker",
          "identical weights on every worker", "who writes")


def planted(name: str) -> str:
    base, edits, _, _ = PLANTED[name]
    return plant_edits(SOURCES[base], edits)


def plant_edits(source: str, edits: list[tuple[str, str]]) -> str:
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def _data(request, base: str) -> Path:
    return request.getfixturevalue("prepared_dir" if base == "lesson08" else "mnist")


def passes(code: int, out: str) -> bool:
    return code == 0 and all(f"PASS     {name}" in out for name in CHECKS) and "FAIL" not in out


@pytest.mark.multiprocess
@pytest.mark.parametrize("base", ["lesson08", "tutorial", "custom"])
def test_a_correct_script_passes(tmp_path, request, base):
    ours, theirs = options(base, tmp_path, _data(request, base))
    code, out = check(tmp_path, SOURCES[base], *ours, "--", *theirs)
    assert passes(code, out), out


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_each_planted_mistake_is_named(tmp_path, request, name):
    base, _, more, expected = PLANTED[name]
    ours, theirs = options(base, tmp_path, _data(request, base))
    code, out = check(tmp_path, planted(name), *ours, *more, "--", *theirs)
    assert code == 1 and all(line in out for line in expected), out
    assert out.count("FAIL     " + expected[0].split("FAIL     ")[1].split(":")[0] + ":") == 1, out


# On Slurm, the mistakes whose evidence the workers gather on their own nodes: what each read (the
# fingerprints), what each wrote, and each one's weights. The others are found by the same analysis of
# the same reports whatever started the workers, and run once, above, as local processes (about
# 100 s of CI saved); the hangs have their own test below.
SLURM_PLANTED = ["batch_norm_per_replica", "not_sharded", "same_checkpoint"]


@pytest.mark.slurm
@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["lesson08", "tutorial", "custom", *SLURM_PLANTED])
def test_on_two_nodes_of_the_local_slurm(slurm, tmp_path, request, name):
    """The checks with the workers as tasks of srun steps on node1 and node2."""
    base = PLANTED[name][0] if name in PLANTED else name
    more = PLANTED[name][2] if name in PLANTED else []
    ours, theirs = options(base, tmp_path, _data(request, base))
    code, out = check(tmp_path, planted(name) if name in PLANTED else SOURCES[base], *ours, *more, "--slurm",
                      "--", *theirs, env=slurm["env"])
    assert "Slurm tasks" in out and "2 workers: " in out and " s on node1, node2" in out, out
    if name in PLANTED:
        assert code == 1 and all(line in out for line in PLANTED[name][3]), out
    else:
        assert passes(code, out), out


@pytest.mark.multiprocess
def test_three_workers_where_asked(tmp_path, mnist):
    ours, theirs = options("custom", tmp_path, mnist)
    code, out = check(tmp_path, CUSTOM, *ours, "--workers", "2,3", "--", *theirs)
    assert passes(code, out) and "3 workers:\n" in out, out
    assert "each of the 3 workers' steps held 4 examples" in out, out


# the chief runs one step more while worker 1, alive, waits elsewhere: the chief's all-reduce never completes
COLLECTIVE_HANG = ("custom", [("checkpoint.write(", "if task_id == 0:\n    train_step(iterator)\nelse:\n"
                                                    "    import time\n    time.sleep(3600)\ncheckpoint.write(")],
                   ["--deadline", "40"], ["FAIL     hang: worker(s) 0, 1 did not finish within the deadline",
                                          "worker 0: still running at train.py:79 (train_step(iterator))",
                                          "worker 1: still running at train.py:82 (time.sleep(3600))"])


@pytest.mark.multiprocess
def test_a_collective_that_never_completes_ends_at_the_deadline(tmp_path, mnist):
    """The chief's all-reduce never completes; the deadline ends both and names them with their last steps."""
    base, edits, more, expected = COLLECTIVE_HANG
    ours, theirs = options(base, tmp_path, mnist)
    began = time.monotonic()
    code, out = check(tmp_path, plant_edits(SOURCES[base], edits), *ours, *more, "--", *theirs)
    assert code == 1 and all(line in out for line in expected), out
    assert time.monotonic() - began < 200


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_a_hang_on_the_local_slurm_ends_at_the_deadline_with_the_worker_named(slurm, tmp_path, mnist):
    """A hang with the workers as srun tasks on node1 and node2: at the deadline check-script
    interrupts srun twice (srun then ends the step), and names the workers from their marks and the
    script line each was on (files the tasks write beside the command's). One hang is enough here:
    how the deadline ends a Slurm step and reads the marks is the same for both; the collective that
    never completes is told apart by the same analysis, run above with local workers (44 s of CI)."""
    name = "worker_never_joins"
    base, edits, more, expected = PLANTED[name]
    ours, theirs = options(base, tmp_path, mnist)
    began = time.monotonic()
    code, out = check(tmp_path, plant_edits(SOURCES[base], edits), *ours, *more, "--slurm", "--", *theirs,
                      env=slurm["env"])
    took = time.monotonic() - began
    deadline = int(more[more.index("--deadline") + 1])
    print(f"{name} on the local Slurm, deadline {deadline} s: the check ended in {took:.0f} s")
    assert "Slurm tasks" in out and code == 1 and all(line in out for line in expected), out
    hung_run = re.search(r"2 workers: (\d+) s", out)
    assert hung_run and int(hung_run[1]) <= deadline + 30, out  # the deadline, then srun ends the step
    assert took < 240, f"the hang took {took:.0f} s to end"
    assert squeue_empty(slurm["env"]), "the hung step outlived the check"


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_three_workers_on_the_local_slurm(slurm, tmp_path, mnist):
    """`--workers 2,3` inside an allocation of 2 nodes: the third worker shares node1 (its own port
    of the step's block); the custom-loop script passes with 2 and with 3 workers."""
    ours, theirs = options("custom", tmp_path, mnist)
    script = tmp_path / "train.py"
    script.write_text(CUSTOM)
    began = time.monotonic()
    done = subprocess.run(["salloc", "-N", "2", "-n", "3", "--time=10", sys.executable, "-m", "helpers",
                           "check-script", str(script), *ours, "--workers", "2,3", "--slurm", "--", *theirs],
                          env={**os.environ, **slurm["env"]}, capture_output=True, text=True, timeout=900, cwd=ROOT)
    print(done.stdout, done.stderr[-2000:], f"one check: {time.monotonic() - began:.0f} s", sep="\n")
    out = done.stdout
    assert passes(done.returncode, out) and "3 workers:\n" in out, out
    assert re.search(r"2 workers: \d+ s on node1, node2; 3 workers: \d+ s on node1, node2", out), out
    assert "each of the 3 workers' steps held 4 examples" in out, out
    assert squeue_empty(slurm["env"])


KERAS2_PROBE = r'''
import json, os, tempfile
import numpy as np, tensorflow as tf, keras

d = tempfile.mkdtemp()
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
model.compile("sgd", "mse")
x, y = np.zeros((4, 3), "float32"), np.zeros((4, 2), "float32")
tf.saved_model.save(model, os.path.join(d, "sm"))
calls = {
    "reset_states": lambda: keras.metrics.Mean().reset_states(),
    "save_dir": lambda: model.save(os.path.join(d, "saved")),
    "save_weights": lambda: model.save_weights(os.path.join(d, "ckpt")),
    "load_savedmodel": lambda: keras.models.load_model(os.path.join(d, "sm")),
    "checkpoint_path": lambda: keras.callbacks.ModelCheckpoint(os.path.join(d, "ck")),
    "sync_bn": lambda: tf.keras.layers.experimental.SyncBatchNormalization,
    "legacy_optimizer": lambda: tf.keras.optimizers.legacy.SGD(),
    "lr": lambda: model.optimizer.lr,
    "fit_workers": lambda: model.fit(x, y, workers=2, use_multiprocessing=True, verbose=0),
    "fit_generator": lambda: model.fit_generator,
    "compile_option": lambda: model.compile("sgd", "mse", experimental_run_tf_function=False),
    "tf_op_on_input": lambda: tf.reduce_sum(keras.Input((3,))),
    "dataset_creator": lambda: tf.keras.utils.experimental.DatasetCreator,
}
found = {}
for name, call in calls.items():
    try:
        call()
        found[name] = "no error"
    except Exception as exc:
        found[name] = f"{type(exc).__name__}: {exc}"
found["fixes"] = [type(keras.layers.BatchNormalization(synchronized=True)).__name__,
                  keras.layers.TFSMLayer(os.path.join(d, "sm"), call_endpoint="serving_default").built]
print("FOUND " + json.dumps(found))
'''
# what docs/check-your-script.md "Keras 2 code under Keras 3" says each Keras 2 call raises
KERAS2_ERRORS = {
    "reset_states": "AttributeError: 'Mean' object has no attribute 'reset_states'",
    "save_dir": "ValueError: Invalid filepath extension for saving",
    "save_weights": "ValueError: The filename must end in `.weights.h5`",
    "load_savedmodel": "Keras 3 only supports V3 `.keras` files",
    "checkpoint_path": "ValueError: The filepath provided must end in `.keras`",
    "sync_bn": "AttributeError:",
    "legacy_optimizer": "ImportError: `keras.optimizers.legacy` is not supported in Keras 3",
    "lr": "AttributeError: 'SGD' object has no attribute 'lr'",
    "fit_workers": "TypeError: TensorFlowTrainer.fit() got an unexpected keyword argument 'workers'",
    "fit_generator": "AttributeError:",
    "compile_option": "TypeError: Trainer.compile() got an unexpected keyword argument",
    "tf_op_on_input": "ValueError: A KerasTensor cannot be used as input to a TensorFlow function",
    "dataset_creator": "AttributeError:",
}


def test_the_keras3_changes_the_guide_names_are_what_this_keras_does():
    """Each row of the guide's Keras 2 -> Keras 3 table, run on the installed Keras: the Keras 2
    call fails with the error the guide quotes, and the replacement it names exists."""
    from tests.conftest import run_python

    done = run_python(KERAS2_PROBE, timeout=300)
    line = next((l for l in done.stdout.splitlines() if l.startswith("FOUND ")), None)
    assert line, done.stdout[-2000:] + done.stderr[-2000:]
    found = json.loads(line[len("FOUND "):])
    wrong = {name: found[name] for name, error in KERAS2_ERRORS.items() if not found[name].startswith(error)
             and error not in found[name]}
    assert not wrong, wrong
    assert found["fixes"] == ["BatchNormalization", True]
    guide = (ROOT / "docs" / "check-your-script.md").read_text()
    for error in KERAS2_ERRORS.values():
        assert error.split(": ", 1)[-1].replace("`", "").rstrip(":") in guide.replace("`", ""), error
