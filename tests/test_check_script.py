"""`python -m helpers check-script`: correct scripts pass, each planted mistake is named.

The correct scripts: lesson 08's take-home script (as the notebook writes it), a script written
as TensorFlow's multi-worker Keras tutorial writes it and one written as its custom-loop tutorial
does (tests/scripts/, data from a local .npz file). Each planted mistake is one edit of a copy,
and each test asserts the message that names it. A check runs the script as 1 worker and as 2
local workers (about 30-50 s here); the analysis itself is also tested on hand-made reports.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.tools import check_script as cs
from tests.conftest import run_cli
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
    assert "each worker shuffled differently before a manual shard()" in cs.coverage_findings(one, overlapping)[0][0].detail


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


# ------------------------------------------------------------------ slow: real scripts
@pytest.fixture(scope="module")
def mnist(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("mnist") / "mnist.npz"
    np.savez(path, x=rng.integers(0, 256, (64, 28, 28), dtype=np.uint8), y=rng.integers(0, 10, 64))
    return path


def check(tmp_path: Path, source: str, *args: str, deadline: int = 240) -> tuple[int, str]:
    script = tmp_path / "train.py"
    script.write_text(source)
    began = time.monotonic()
    done = run_cli("check-script", str(script), *args, timeout=3 * deadline + 60)
    print(done.stdout, done.stderr[-2000:], f"one check: {time.monotonic() - began:.0f} s", sep="\n")
    return done.returncode, done.stdout


def tutorial(tmp_path, mnist, source=TUTORIAL, *more):
    return check(tmp_path, source, "--per-replica-batch-flag", "per-worker-batch", "--examples-flag", "examples",
                 *more, "--", "--data", str(mnist), "--epochs", "3", "--steps-per-epoch", "1",
                 "--model-dir", str(tmp_path / "model"))


def custom(tmp_path, mnist, source=CUSTOM, *more):
    return check(tmp_path, source, "--global-batch-flag", "global-batch", "--examples-flag", "examples", *more,
                 "--", "--data", str(mnist), "--epochs", "3", "--steps-per-epoch", "1",
                 "--checkpoint-dir", str(tmp_path / "ckpt"))


def lesson08(tmp_path, prepared_dir, source=LESSON08):
    return check(tmp_path, source, "--per-replica-batch-flag", "per-replica-batch", "--examples-flag",
                 "train-examples", "--", "--data-dir", str(prepared_dir), "--out", str(tmp_path / "run"),
                 "--epochs", "3", "--test-examples", "12")


def plant(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, old
    return source.replace(old, new)


CHECKS = ("strategy.scope()", "batch per replica", "input sharding", "same weights as one worker",
          "identical weights on every worker", "who writes")


def passes(code: int, out: str) -> bool:
    return code == 0 and all(f"PASS     {name}" in out for name in CHECKS) and "FAIL" not in out


@pytest.mark.multiprocess
def test_lesson_08s_script_passes(tmp_path, prepared_dir):
    code, out = lesson08(tmp_path, prepared_dir)
    assert passes(code, out), out


@pytest.mark.multiprocess
def test_the_keras_tutorial_script_passes(tmp_path, mnist):
    code, out = tutorial(tmp_path, mnist)
    assert passes(code, out), out


@pytest.mark.multiprocess
def test_the_custom_loop_script_passes(tmp_path, mnist):
    code, out = custom(tmp_path, mnist)
    assert passes(code, out), out


@pytest.mark.multiprocess
def test_a_model_built_outside_the_scope(tmp_path, mnist):
    source = plant(TUTORIAL, "with strategy.scope():\n    # Model building/compiling need to be within `strategy.scope()`.\n"
                   "    multi_worker_model", "if True:\n    multi_worker_model")
    code, out = tutorial(tmp_path, mnist, source)
    assert code == 1 and "FAIL     strategy.scope(): model 'sequential' (made at train.py:" in out, out
    assert "was built outside strategy.scope()" in out, out


@pytest.mark.multiprocess
def test_a_per_worker_batch_used_as_the_global_batch(tmp_path, mnist):
    source = plant(TUTORIAL, "mnist_dataset(args.data, global_batch_size, args.examples)",
                   "mnist_dataset(args.data, per_worker_batch_size, args.examples)")
    code, out = tutorial(tmp_path, mnist, source)
    assert code == 1 and "FAIL     batch per replica: each worker's steps hold 3 examples, 1/2 of the 6" in out, out
    assert "batched by the per-worker batch" in out, out


@pytest.mark.multiprocess
def test_a_loss_divided_by_the_per_replica_batch(tmp_path, mnist):
    source = plant(CUSTOM, "loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)",
                   "loss = tf.reduce_mean(per_example_loss)")
    code, out = custom(tmp_path, mnist, source)
    assert code == 1 and "FAIL     same weights as one worker: the 2 workers moved the weights" in out, out
    assert "the loss is averaged over each replica's batch" in out, out


@pytest.mark.multiprocess
def test_data_not_sharded(tmp_path, prepared_dir):
    source = plant(LESSON08, "ds = examples.shard(context.num_input_pipelines, context.input_pipeline_id)",
                   "ds = examples")
    code, out = lesson08(tmp_path, prepared_dir, source)
    assert code == 1 and "FAIL     input sharding: all 2 workers read the same examples in every step" in out, out


@pytest.mark.multiprocess
def test_data_sharded_twice(tmp_path, mnist):
    """Sharded in the dataset function, then again (a manual shard() before experimental_distribute_dataset
    is not a mistake: TensorFlow's auto-sharding leaves a pipeline that shards alone, measured here)."""
    line = "dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)\n"
    source = plant(CUSTOM, line, line + "    " + line)
    code, out = custom(tmp_path, mnist, source)
    assert code == 1 and "FAIL     input sharding:" in out and "the input is sharded twice" in out, out


@pytest.mark.multiprocess
def test_a_shuffle_seeded_per_worker_before_a_manual_shard(tmp_path, prepared_dir):
    source = plant(LESSON08, "ds = examples.shard(", "ds = examples.shuffle(1000, seed=context.input_pipeline_id)"
                   ".shard(")
    code, out = lesson08(tmp_path, prepared_dir, source)
    assert code == 1 and "FAIL     input sharding: the workers' shards overlap" in out, out
    assert "each worker shuffled differently before a manual shard()" in out, out


@pytest.mark.multiprocess
def test_every_worker_writing_the_same_checkpoint(tmp_path, mnist):
    source = plant(CUSTOM, 'write_dir = args.checkpoint_dir if task_id == 0 else os.path.join(args.checkpoint_dir, '
                   'f"workertemp_{task_id}")', "write_dir = args.checkpoint_dir")
    source = plant(source, "if task_id != 0:\n    tf.io.gfile.rmtree(write_dir)\n", "")
    code, out = custom(tmp_path, mnist, source)
    assert code == 1 and "FAIL     who writes: workers 0, 1 all write " in out, out
    assert "ckpt (write)" in out and "write only on the chief" in out, out


@pytest.mark.multiprocess
def test_batch_norm_per_replica(tmp_path, mnist):
    source = plant(TUTORIAL, 'keras.layers.Conv2D(8, 3, activation="relu"),',
                   'keras.layers.Conv2D(8, 3, activation="relu"),\n        keras.layers.BatchNormalization(),')
    code, out = tutorial(tmp_path, mnist, source)
    assert code == 1 and "FAIL     batch norm: layers batch_normalization compute their statistics over each " \
                         "replica's batch alone (6 examples here, not the global 12)" in out, out
    assert "NOT SEEN same weights as one worker: not exact: batch-norm layers batch_normalization" in out, out


@pytest.mark.multiprocess
def test_fit_without_the_keras_fix(tmp_path, mnist):
    source = plant(TUTORIAL, "\nfix_keras_fit_for_multiworker()\n", "\n")
    code, out = tutorial(tmp_path, mnist, source)
    assert code == 1 and "FAIL     model.fit with 2 workers: worker" in out, out
    assert "this script does not carry the fix" in out and "docs/keras3-fit.md" in out, out


@pytest.mark.multiprocess
def test_a_worker_that_never_joins_is_named(tmp_path, mnist):
    source = plant(CUSTOM, "strategy = tf.distribute.MultiWorkerMirroredStrategy()",
                   "import time\nif json.loads(os.environ['TF_CONFIG'])['task']['index'] == 1:\n    time.sleep(3600)\n"
                   "strategy = tf.distribute.MultiWorkerMirroredStrategy()")
    began = time.monotonic()
    code, out = custom(tmp_path, mnist, source, "--deadline", "40")
    assert code == 1 and "FAIL     hang: worker(s) 1 never joined" in out, out
    assert time.monotonic() - began < 200


@pytest.mark.multiprocess
def test_a_collective_only_the_chief_enters_ends_at_the_deadline(tmp_path, mnist):
    source = plant(CUSTOM, "checkpoint.write(", "if task_id == 0:\n    train_step(iterator)\ncheckpoint.write(")
    code, out = custom(tmp_path, mnist, source, "--deadline", "40")
    assert code == 1 and "FAIL     a collective only some workers enter: worker 0 failed at train.py:" in out, out
    assert "worker(s) 1 had already ended the script" in out, out
