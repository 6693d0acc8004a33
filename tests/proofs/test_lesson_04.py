"""Lesson 04's proof cell (notebooks/04_custom_training_loop.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from tests.conftest import ROOT
from tests.support.proof_cases import OK, planted_strategy
from tests.support.proof_cells import (
    PlantedEngines, assignment_source, code_cells, gather_and_prove, holds_unless, run_proof, solution_source,
)


def _run_script(script: str, *args: str, timeout: float = 400) -> dict:
    """`script` run in a fresh Python (its own logical CPU devices), the JSON it printed after RESULT."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])


LESSON_04_PRECISION = """
import json, sys
import nbformat
from helpers import environment
environment.local_replicas(2)
import keras, numpy as np, tensorflow as tf
from helpers.lesson import small_cnn

nb = nbformat.read("notebooks/04_custom_training_loop.ipynb", as_version=4)
code = [c.source for c in nb.cells if c.cell_type == "code"]
step = next(s for s in code if s.startswith("def make_train_step"))
if sys.argv[1] in ("unscaled", "through the inner optimizer"):
    step = step.replace("to_differentiate = optimizer.scale_loss(loss) if scaled else loss", "to_differentiate = loss")
if sys.argv[1] == "through the inner optimizer":  # nothing scaled, nothing divided back
    applied = "optimizer.apply_gradients(zip(gradients, model.trainable_variables))"
    assert applied in step
    step = step.replace(applied, "(optimizer.inner_optimizer if scaled else optimizer).apply_gradients("
                                 "zip(gradients, model.trainable_variables))")
if sys.argv[1] == "conv kernels not updated":  # scaled float16 with the convolutions' gradients lost (review r04c)
    taken = "        gradients = tape.gradient(to_differentiate, model.trainable_variables)\\n"
    assert taken in step
    step = step.replace(taken, taken + "        if scaled:\\n            gradients = [tf.zeros_like(g) if 'conv2d' in v.path "
                                       "else g for g, v in zip(gradients, model.trainable_variables)]\\n")
if sys.argv[1] == "first batch norm not updated":  # scaled float16, the first batch norm's gradients lost (review r04d)
    taken = "        gradients = tape.gradient(to_differentiate, model.trainable_variables)\\n"
    assert taken in step
    step = step.replace(taken, taken + "        if scaled:\\n            gradients = [tf.zeros_like(g) if any(v is w for w in "
                                       "model.layers[1].trainable_variables) else g for g, v in "
                                       "zip(gradients, model.trainable_variables)]\\n")
ns = {"keras": keras, "np": np, "tf": tf, "small_cnn": small_cnn,
      "strategy": tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")]),
      "print": lambda *a, **k: None}
exec(step, ns)
exec(next(s for s in code if s.startswith("def correct_predictions")), ns)
rng = np.random.default_rng(0)
ns.update(images=rng.uniform(size=(16, 32, 32, 3)).astype("float32"), labels=rng.integers(0, 10, size=16).astype("int32"),
          examples=16)
first = next(i for i, s in enumerate(code) if s.startswith("underflow = "))
last = next(i for i, s in enumerate(code) if "precision = {}" in s)
for cell in code[first:last + 1]:  # the mixed-precision cells, in order
    if sys.argv[1] == "gradients not small":  # the steps at their ordinary size: nothing underflows
        assert "SMALL = 1e-5" in cell or "SMALL = " not in cell
        cell = cell.replace("SMALL = 1e-5", "SMALL = 1.0")
    exec(cell, ns)
sys.stdout.write("PRECISION " + json.dumps(ns["precision"]) + "\\n")
"""


@pytest.mark.parametrize("variant,match", [("unscaled", "about as far"),
                                           ("through the inner optimizer", "unscaled one step"),
                                           ("gradients not small", "lose small gradients"),
                                           ("conv kernels not updated", "about as far"),
                                           ("first batch norm not updated", "each variable")])
def test_lesson_04_proof_fails_when_the_float16_step_does_not_scale_its_loss(variant, match):
    """Notebook 04's own step and mixed-precision cells, run; then its proof on what they measured. The
    step with `to_differentiate = loss` (the loss not scaled, the gradients still divided) must fail, and
    so must the step that also applies through `optimizer.inner_optimizer` (nothing scaled, nothing divided
    back: the scale still reads 32768, but the optimizer unscaled nothing), and so must the steps taken at their
    ordinary size (SMALL = 1.0: float16 without loss scaling then moves as far as float32, 1.0017x in the first
    review, so nothing shows that float16 needs the scaling), and so must a scaled float16 step whose convolution
    kernels get no update (0.633x float32's step: the old band, 0.5 to 2, passed it; correct runs 1.002-1.010x). As written these cells are the nbval pass's, on the
    same 16 images and 2 replicas, and its proof passes there: no control run here (it was one, 17 s)."""
    done = subprocess.run([sys.executable, "-c", LESSON_04_PRECISION, variant], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**__import__("os").environ})
    assert done.returncode == 0, done.stderr[-3000:]
    precision = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("PRECISION "))[10:])
    namespace = {**OK["04_custom_training_loop.ipynb"], "precision": precision}
    holds_unless(match, run_proof, "04_custom_training_loop.ipynb", namespace)


@pytest.mark.parametrize("seen,tested,local,fingerprints,match", [
    ([[0, 2, 4], [1, 3, 5]], [511, 511], [1, 1], [["t0", "t2"], ["t1", "t3"]], None),
    ([[0, 2, 4], [4, 5, 6]], [511, 511], [1, 1], [["t0", "t2"], ["t1", "t3"]], "shared examples"),  # example 4 on both
    # review r04 (this round), finding 5: a split holding image 4 twice (two examples, the same pixels), one copy in
    # each shard, as sharding gives it: the old cell (shared fingerprints between two workers) failed this correct run
    ([[0, 2, 4], [1, 3, 4]], [511, 511], [1, 1], [["t0", "t2"], ["t1", "t3"]], None),
    ([[0, 2, 4, 4], [1, 3, 4]], [511, 511], [1, 1], [["t0", "t2"], ["t1", "t3"]], "shared examples"),  # 3 copies of 2
    ([[0, 2, 4], [1, 3, 5]], [511, 448], [1, 1], [["t0", "t2"], ["t1", "t3"]], "evaluation counted"),  # a remainder dropped
    # first review P1: two engines of 2 GPUs, each its own MirroredStrategy (no TF_CONFIG): 2 in sync, 2 local
    ([[0, 2, 4], [1, 3, 5]], [511, 511], [2, 2], [["t0", "t2"], ["t1", "t3"]], "not one cluster"),
    # first review P2: a worker-seeded shuffle before the shard: t1 evaluated twice, t2 never; the count still right
    ([[0, 2, 4], [1, 3, 5]], [511, 511], [1, 1], [["t0", "t1"], ["t1", "t3"]], "the workers' evaluation")],
    ids=["disjoint", "one example shared", "a duplicate split", "a duplicate delivered 3 times", "remainder dropped",
         "a MirroredStrategy per engine", "one image twice"])
def test_lesson_04_gathering_cell_finds_shared_examples_in_what_the_engines_return(seen, tested, local, fingerprints, match):
    ok = OK["04_custom_training_loop.ipynb"]
    in_split = Counter([0, 1, 2, 3, 4, 5, 6, *([4] if [1, 3, 4] in seen else [])])  # the split's copies of each image
    pulled = {"digest": ["d", "d"], "initial": ["i", "i"], "strategy.num_replicas_in_sync": [2, 2], "local_replicas": local,
              "examples_seen": seen, "in_split": [in_split, in_split], "test_counted": tested, "worker_tested": fingerprints}
    computed = ("digests", "initial", "in_sync", "local", "seen", "in_split", "overlap", "worker_test_counts", "tested_by_workers")
    raw = {k: v for k, v in ok.items() if k not in computed}
    holds_unless(match, gather_and_prove, "04_custom_training_loop.ipynb",
                 {**raw, "Counter": Counter, "engines": PlantedEngines(pulled)})


@pytest.mark.parametrize("dropping,match", [(False, None), (True, "evaluation counted")],
                         ids=["padded", "remainder dropped"])
def test_lesson_04_evaluation_count_fails_when_the_remainder_is_dropped(dropping, match):
    """Lesson 04's data cell (its odd test split: 511 quick images) and evaluation loop, run in this
    process on one replica (global batch 32); an evaluation dataset that drops its last partial batch
    instead of padding it counts 480 images, and the proof must fail (review item 24: with 512 test
    images, whole batches, it passed all the same)."""
    import keras
    import tensorflow as tf

    from helpers import lesson
    from helpers.data import ensure_data, load_split
    from helpers.mode import mode_sizes

    def dropped(examples, global_batch, input_context=None):  # no padding: the remainder is dropped
        batch = input_context.get_per_replica_batch_size(global_batch) if input_context else global_batch
        return examples.map(lambda i, l: (*lesson.normalize(i, l), 1.0)).batch(batch, drop_remainder=True)

    strategy = tf.distribute.MirroredStrategy(devices=["/cpu:0"])
    ns = {"tf": tf, "keras": keras, "strategy": strategy, "sizes": mode_sizes("quick"), "ensure_data": ensure_data,
          "load_split": load_split, "training_dataset": lesson.training_dataset, "print": lambda *a, **k: None,
          "evaluation_dataset": dropped if dropping else lesson.evaluation_dataset}
    code = code_cells("04_custom_training_loop.ipynb")
    for start in ("def correct_predictions", "def make_eval_step", "def train_epoch", "dataset = ensure_data"):
        exec(compile(next(c for c in code if c.startswith(start)), "04 cell", "exec"), ns)
    with strategy.scope():
        model = lesson.small_cnn()
    test = ns["evaluate"](ns["make_eval_step"](strategy, model), ns["test_dist"])
    measured = {"test": test, "test_images": int(ns["test_examples"].cardinality()), "global_batch": ns["global_batch"],
                "worker_test_counts": [test["examples"]] * 2}  # the workers run this same evaluate
    assert measured["test_images"] == 511
    holds_unless(match, run_proof, "04_custom_training_loop.ipynb", {**OK["04_custom_training_loop.ipynb"], **measured})


def _lesson_04_data_and_fingerprints(strategy, evaluation_dataset) -> dict:
    """Lesson 04's data cell (its odd test split: 511 quick images) and fingerprint cells, run in this
    process on `strategy` with `evaluation_dataset` as its pipeline: the namespace they leave."""
    import keras
    import numpy as np
    import tensorflow as tf

    from helpers import lesson
    from helpers.data import ensure_data, load_split
    from helpers.mode import mode_sizes

    ns = {"tf": tf, "keras": keras, "np": np, "strategy": strategy, "sizes": mode_sizes("quick"), "ensure_data": ensure_data,
          "load_split": load_split, "training_dataset": lesson.training_dataset, "print": lambda *a, **k: None,
          "evaluation_dataset": evaluation_dataset}
    code = code_cells("04_custom_training_loop.ipynb")
    for start in ("dataset = ensure_data", "import hashlib", "def fingerprints", "from helpers.lesson import normalize"):
        exec(compile(next(c for c in code if c.startswith(start)), "04 cell", "exec"), ns)
    return ns


@pytest.mark.parametrize("shuffled,match", [(False, None), (True, "the workers' evaluation")],
                         ids=["sharded as written", "shuffled by worker before the shard"])
def test_lesson_04_fingerprints_find_a_worker_seeded_shuffle_before_the_shard(shuffled, match, capsys):
    """First review, P2: two workers' evaluation pipelines (notebook 02's `evaluation_dataset` with the input
    context each worker of a two-worker MultiWorkerMirroredStrategy gets, one replica each, global batch 64),
    each run through a one-device MirroredStrategy here, fingerprinted by the lesson's own `fingerprints`, then
    its gathering cell and proof. Each worker's pipeline shuffled with its own seed before the shard makes one
    worker evaluate some images the other also evaluates and leaves others out: the weighted count can still be
    511, which the old proof took for every image; the fingerprints must fail it."""
    import tensorflow as tf

    from helpers import lesson

    strategy = tf.distribute.MirroredStrategy(devices=["/cpu:0"])
    ns = _lesson_04_data_and_fingerprints(strategy, lesson.evaluation_dataset)
    test_examples, tested = ns["test_examples"], []
    for rank in (0, 1):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=rank, num_replicas_in_sync=2)
        examples = test_examples.shuffle(511, seed=rank) if shuffled else test_examples
        dist = strategy.distribute_datasets_from_function(lambda _: lesson.evaluation_dataset(examples, 64, context))
        tested.append(ns["fingerprints"](strategy, dist))
    counted = sum(map(len, tested))  # what every worker's all-reduced weight sum would be
    with capsys.disabled():
        print(f"\n[04 P2, {'shuffled' if shuffled else 'as written'}] weight-1 images {[len(t) for t in tested]}, "
              f"counted {counted} of 511")
    pulled = {"digest": ["d", "d"], "initial": ["i", "i"], "strategy.num_replicas_in_sync": [2, 2], "local_replicas": [1, 1],
              "examples_seen": [["a"], ["b"]], "in_split": [Counter("ab")] * 2, "test_counted": [counted, counted],
              "worker_tested": tested}
    computed = ("digests", "initial", "in_sync", "local", "seen", "in_split", "overlap", "worker_test_counts", "tested_by_workers")
    raw = {k: v for k, v in OK["04_custom_training_loop.ipynb"].items() if k not in computed}
    measured = {"test_set": ns["test_set"], "tested_here": ns["tested_here"], "test_images": 511, "global_batch": ns["global_batch"]}
    assert sum(ns["test_set"].values()) == 511 and ns["tested_here"] == ns["test_set"]  # the kernel's own pass
    holds_unless(match, gather_and_prove, "04_custom_training_loop.ipynb",
                 {**raw, **measured, "Counter": Counter, "engines": PlantedEngines(pulled)})


LESSON_04_REPLICAS = """
import json, sys
import nbformat
from helpers import environment
environment.local_replicas(int(sys.argv[1]))
import keras, numpy as np, tensorflow as tf
from helpers.lesson import small_cnn

nb = nbformat.read("notebooks/04_custom_training_loop.ipynb", as_version=4)
code = [c.source for c in nb.cells if c.cell_type == "code"]
devices = [d.name for d in tf.config.list_logical_devices("CPU")]
ns = {"keras": keras, "np": np, "tf": tf, "small_cnn": small_cnn, "devices": devices, "gpus": [],
      "strategy": tf.distribute.MirroredStrategy(devices=devices), "print": lambda *a, **k: None}
for mark in ("def correct_predictions", "def make_train_step", "rng = np.random.default_rng(0)", "def one_step(",
             "right_gap = max_difference", "step_size = max_difference"):  # the comparison's cells, in order
    cell = next(s for s in code if mark in s)
    if sys.argv[2:] == ["half the batch"]:  # the wrong run divides by half the global batch, whatever N
        assert "divisor=examples // len(devices)" in cell or mark != "right_gap = max_difference"
        cell = cell.replace("divisor=examples // len(devices)", "divisor=examples // 2")
    exec(cell, ns)
print("RESULT " + json.dumps({k: ns.get(k) for k in ("right_gap", "wrong_gap", "step_size", "examples")}))
"""


@pytest.mark.parametrize("replicas,variant,match", [(3, "as written", None), (4, "as written", None),
                                                    (4, "half the batch", "N times as large")])
def test_lesson_04_one_step_comparison_holds_on_three_and_four_replicas(replicas, variant, match, capsys):
    """First review, finding 1: the comparison's cells run for real on 3 logical CPU replicas, then the proof on
    what they measured. With a batch of 16 the replicas got 6, 5 and 5 examples while the wrong run divided by
    16 // 3 = 5: its step came out 2.200 one-replica steps off, not N - 1 = 2, and the proof failed a correct
    run. The batch is now the least multiple of 16 that N divides (48 here).
    Review r04 (this round), finding 1: on 2 replicas "N times" is "twice", so a wrong run that divides by half the
    global batch whatever N cannot be told from the per-replica divisor there; on 4 replicas it must fail (1 step off,
    not 3), and the lesson as written must pass (3.000)."""
    measured = _run_script(LESSON_04_REPLICAS, str(replicas), variant)
    with capsys.disabled():
        print(f"\n[04 on {replicas} replicas, {variant}] {measured}, wrong gap / step "
              f"{measured['wrong_gap'] / measured['step_size']:.3f}")
    holds_unless(match, run_proof, "04_custom_training_loop.ipynb",
                 {**OK["04_custom_training_loop.ipynb"], "strategy": planted_strategy(replicas),
                  **{k: measured[k] for k in ("right_gap", "wrong_gap", "step_size")}})


def test_lesson_04_proof_fails_when_auto_clustering_is_on(monkeypatch):
    """First review, finding 2: the setup's `xla_flags` line and the comparison cell's `xla_auto` line, run with
    TF_XLA_FLAGS set as the reviewer set them (TensorFlow then logged 'Compiled cluster using XLA!' for the
    jit_compile=False step, and the old proof passed), must fail the proof; with TF_XLA_FLAGS unset it must pass.
    Second review, finding G: TensorFlow parses the flags once, at first use, so flags set when the setup ran and
    removed from the environment before the comparison still compile; the proof must fail then too (it read
    os.environ at the comparison, and passed)."""
    import tensorflow as tf

    from helpers.xla_flags import auto_clustering

    setup, line = (assignment_source("04_custom_training_loop.ipynb", name) for name in ("xla_flags", "xla_auto"))
    on = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
    for flags, later, match in (("", "", None), (on, on, "auto-clustering"), (on, "", "auto-clustering")):
        monkeypatch.setenv("TF_XLA_FLAGS", flags)  # as the setup cell finds them, before TensorFlow starts
        ns = {"auto_clustering": auto_clustering, "os": os, "tf": tf, "gpus": []}
        exec(setup, ns)
        monkeypatch.setenv("TF_XLA_FLAGS", later)  # changed before the comparison: TensorFlow has parsed them
        exec(line, ns)
        holds_unless(match, run_proof, "04_custom_training_loop.ipynb",
                     {**OK["04_custom_training_loop.ipynb"], "xla_auto": ns["xla_auto"]})


LESSON_04_LAZY_BUILD = """
import json, sys
import nbformat
from helpers import environment
environment.local_replicas(2)
import keras, numpy as np, tensorflow as tf
from helpers.lesson import small_cnn

code = [c.source for c in nbformat.read(sys.argv[1], as_version=4).cells if c.cell_type == "code"]
strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
rng = np.random.default_rng(0)
ns = {"keras": keras, "np": np, "tf": tf, "small_cnn": small_cnn, "strategy": strategy, "examples": 16, "re": __import__("re"),
      "images": rng.uniform(size=(16, 32, 32, 3)).astype("float32"), "labels": rng.integers(0, 10, size=16).astype("int32"),
      "print": lambda *a, **k: None}
exec(next(s for s in code if "def max_difference" in s), ns)
cell = next(s for s in code if "lazy_build = " in s)
if sys.argv[2] == "built up front":  # SGD without slots built in the scope, as make_train_step builds it: nothing left to build
    made = "keras.optimizers.SGD(0.1, momentum=momentum)  # opt.built is False"
    assert made in cell
    cell = cell.replace(made, made.split("  #")[0] + "\\n        if not momentum:\\n            opt.build(m.trainable_variables)")
exec(cell, ns)
print("RESULT " + json.dumps(ns["lazy_build"]))
"""


@pytest.mark.parametrize("variant,match", [("as written", None), ("built up front", "slots built inside")])
def test_lesson_04_lazy_build_proof_fails_when_sgd_without_slots_was_built_up_front(variant, match, capsys):
    """Review r04 (this round), finding 2: the lazy-build cell, run for real on 2 logical CPU replicas, then the proof.
    The proof asked of SGD without momentum only that its step raised nothing, so an SGD built up front in the scope
    (nothing left to build in the step) passed: on the old cell it gave None, as the lazy build does, and the old
    proof passed it. The cell now reports whether the optimizer was built before and after the step, the variables its
    build added, its steps and whether the weights moved; the proof must fail the SGD built up front."""
    measured = _run_script(LESSON_04_LAZY_BUILD, "notebooks/04_custom_training_loop.ipynb", variant)
    with capsys.disabled():
        print(f"\n[04 lazy build, {variant}] {measured}")
    holds_unless(match, run_proof, "04_custom_training_loop.ipynb", {**OK["04_custom_training_loop.ipynb"], "lazy_build": measured})


# the lesson's overflow cell run on 2 logical CPU replicas with a fixed batch of 16 (the scripts below: `code` is the
# lesson's code cells)
_OVERFLOW_ON_TWO_REPLICAS = """strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
rng = np.random.default_rng(0)
images, labels = rng.uniform(size=(16, 32, 32, 3)).astype("float32"), rng.integers(0, 10, size=16).astype("int32")
batch = next(iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((images, labels)).batch(16))))
ns = {"keras": keras, "np": np, "tf": tf, "small_cnn": small_cnn, "strategy": strategy, "examples": 16, "batch": batch,
      "print": lambda *a, **k: None}
exec(next(s for s in code if s.startswith("def overflow_on")), ns)
"""

LESSON_04_OVERFLOW = """
import json, sys
import nbformat
from helpers import environment
environment.local_replicas(2)
import keras, numpy as np, tensorflow as tf
from helpers.lesson import small_cnn
from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer

if sys.argv[1] == "checked across replicas":  # a Keras whose finiteness flag is all-reduced: no replica's overflow missed
    check = LossScaleOptimizer.check_finite
    LossScaleOptimizer.check_finite = lambda self, grads: tf.distribute.get_replica_context().all_reduce(
        "SUM", tf.cast(tf.logical_not(check(self, grads)), tf.float32)) == 0  # no replica's gradients non-finite
code = [c.source for c in nbformat.read("notebooks/04_custom_training_loop.ipynb", as_version=4).cells if c.cell_type == "code"]
""" + _OVERFLOW_ON_TWO_REPLICAS + """print("RESULT " + json.dumps(list(ns["overflow"].values())))
"""


@pytest.mark.parametrize("variant,match", [("as installed", None), ("checked across replicas", "replica 1 alone")])
def test_lesson_04_proof_fails_when_the_loss_scale_sees_every_replicas_overflow(variant, match, capsys):
    """Second review, finding A: the overflow cell, run for real on 2 logical CPU replicas. As installed (Keras 3.15,
    `_tf_apply` taking `finite` from replica 0) replica 0's overflow is skipped (scale 16384) and replica 1's applied
    (weights non-finite, scale 32768), and the proof passes; with `check_finite` all-reduced across the replicas
    (the claim false: replica 1's overflow seen too) the proof must fail."""
    measured = _run_script(LESSON_04_OVERFLOW, variant)
    with capsys.disabled():
        print(f"\n[04 overflow, {variant}] {measured}")
    holds_unless(match, run_proof, "04_custom_training_loop.ipynb",
                 {**OK["04_custom_training_loop.ipynb"], "overflow": dict(enumerate(measured))})


LESSON_04_GUARD = """
import json, sys
import nbformat
from helpers import environment
environment.local_replicas(2)
import keras, numpy as np, tensorflow as tf
from helpers.lesson import small_cnn

code = [c.source for c in nbformat.read("notebooks/04_custom_training_loop.ipynb", as_version=4).cells if c.cell_type == "code"]
guard = next(s for s in code if s.startswith("def all_finite_or_nan"))
if sys.argv[1] == "flag not all-reduced":  # each replica's own flag: replica 1 poisons only its own gradients
    reduced = "context.all_reduce(tf.distribute.ReduceOp.SUM, bad_here)"
    assert reduced in guard
    guard = guard.replace(reduced, "bad_here")
""" + _OVERFLOW_ON_TWO_REPLICAS + """exec(guard, ns)
print("RESULT " + json.dumps({"overflow": list(ns["overflow"].values()), "guarded": ns["guarded"]}))
"""


@pytest.mark.parametrize("variant,match", [("as written", None), ("flag not all-reduced", "flag all-reduced")])
def test_lesson_04_all_reduced_finiteness_flag_skips_replica_1s_overflow(variant, match, capsys):
    """Second review of the round, finding 1: cell 48 advised an all-reduced finiteness flag but showed none (the
    obvious tf.cond around apply_gradients fails: merge_call inside control flow). The new cell all-reduces the flag
    and makes every replica's gradients NaN when any overflowed, so the optimizer's check on replica 0 skips the step:
    run for real on 2 logical CPU replicas, replica 1's overflow is skipped (scale 16384, weights finite) and the proof
    passes; the same check without the all-reduce lets the step through (32768, weights non-finite): the proof fails."""
    measured = _run_script(LESSON_04_GUARD, variant)
    with capsys.disabled():
        print(f"\n[04 guard, {variant}] {measured}")
    holds_unless(match, run_proof, "04_custom_training_loop.ipynb",
                 {**OK["04_custom_training_loop.ipynb"], "overflow": dict(enumerate(measured["overflow"])),
                  "guarded": measured["guarded"]})


LESSON_04_SOLUTIONS = """
import json, sys
import nbformat
from helpers import environment
environment.local_replicas(2)
import tensorflow as tf

strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
cases, results = json.loads(sys.argv[1]), []
for source in cases:
    try:
        exec(compile(source, "04 solution", "exec"), {"tf": tf, "strategy": strategy, "print": lambda *a, **k: None})
        results.append(None)
    except AssertionError as error:
        results.append(f"AssertionError {error}")
print("RESULT " + json.dumps(results))
"""

SOLUTION_CASES = [  # (solution, (old, new) or None, fails)
    (1, None, False),
    (1, ("global_batch_size=8", "global_batch_size=4"), True),  # the per-replica batch: 2.5
    (2, None, False),
    # the "fix" that is the bug: the replicas' means summed again
    (2, ("lambda l: tf.nn.compute_average_loss(l, global_batch_size=4 * n)", "tf.reduce_mean"), True),
    # divided by the per-replica batch: N times too large too
    (2, ("compute_average_loss(l, global_batch_size=4 * n)", "compute_average_loss(l, global_batch_size=4)"), True),
    # the "bug" divided by the global batch: no bug to show, the replicas' sum is the global mean
    (2, ("summed(tf.reduce_mean)", "summed(lambda l: tf.reduce_sum(l) / (4 * n))"), True)]


@pytest.fixture(scope="module")
def lesson_04_solutions() -> list:
    """Every case of SOLUTION_CASES run on a 2-replica MirroredStrategy in one fresh Python: None or its error."""
    sources = []
    for number, change, _ in SOLUTION_CASES:
        source = solution_source("04_custom_training_loop.ipynb", number)
        if change is not None:
            assert change[0] in source, change
            source = source.replace(*change)
        sources.append(source)
    return _run_script(LESSON_04_SOLUTIONS, json.dumps(sources))


@pytest.mark.parametrize("case", range(len(SOLUTION_CASES)),
                         ids=["1", "1 per-replica batch", "2", "2 means summed as the fix", "2 fix by the per-replica batch",
                              "2 bug that is none"])
def test_lesson_04_solutions_fail_when_their_answer_is_wrong(lesson_04_solutions, case):
    """First review, finding 12: solution 2 checked Python arithmetic (buggy == 2 * global_mean); it now runs the
    replica step under strategy.run and strategy.reduce(SUM) on 2 replicas. Each solution, as written, passes;
    with its answer made wrong, it fails."""
    fails = SOLUTION_CASES[case][2]
    result = lesson_04_solutions[case]
    assert (result is not None) == fails, result
