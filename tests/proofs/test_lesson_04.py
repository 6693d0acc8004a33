"""Lesson 04's proof cell (notebooks/04_custom_training_loop.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

import pytest

from tests.support.proof_cases import OK
from tests.support.proof_cells import PlantedEngines, code_cells, gather_and_prove, holds_unless, run_proof


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
ns = {"keras": keras, "np": np, "tf": tf, "small_cnn": small_cnn,
      "strategy": tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")]),
      "print": lambda *a, **k: None}
exec(step, ns)
exec(next(s for s in code if s.startswith("def correct_predictions")), ns)
rng = np.random.default_rng(0)
ns.update(images=rng.uniform(size=(16, 32, 32, 3)).astype("float32"), labels=rng.integers(0, 10, size=16).astype("int32"))
first = next(i for i, s in enumerate(code) if s.startswith("underflow = "))
last = next(i for i, s in enumerate(code) if s.startswith("precision = {}"))
for cell in code[first:last + 1]:  # the mixed-precision cells, in order
    exec(cell, ns)
sys.stdout.write("PRECISION " + json.dumps(ns["precision"]) + "\\n")
"""


@pytest.mark.parametrize("variant,match", [("unscaled", "about as far"),
                                           ("through the inner optimizer", "unscaled one step")])
def test_lesson_04_proof_fails_when_the_float16_step_does_not_scale_its_loss(variant, match):
    """Notebook 04's own step and mixed-precision cells, run; then its proof on what they measured. The
    step with `to_differentiate = loss` (the loss not scaled, the gradients still divided) must fail, and
    so must the step that also applies through `optimizer.inner_optimizer` (nothing scaled, nothing divided
    back: its step is as long as float32's and the scale still reads 32768, but the optimizer unscaled nothing).
    As written these cells are the nbval pass's, on the same 16 images and 2 replicas, and its proof passes
    there: no control run here (it was one, 17 s)."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_04_PRECISION, variant], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**__import__("os").environ})
    assert done.returncode == 0, done.stderr[-3000:]
    precision = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("PRECISION "))[10:])
    namespace = {**OK["04_custom_training_loop.ipynb"], "precision": precision}
    holds_unless(match, run_proof, "04_custom_training_loop.ipynb", namespace)


@pytest.mark.parametrize("seen,tested,match", [
    ([[0, 2, 4], [1, 3, 5]], [511, 511], None),
    ([[0, 2, 4], [4, 5, 6]], [511, 511], "shared examples"),  # example 4 on both workers
    ([[0, 2, 4], [1, 3, 5]], [511, 448], "evaluation counted")],  # a worker dropped its remainder
    ids=["disjoint", "one example shared", "remainder dropped"])
def test_lesson_04_gathering_cell_finds_shared_examples_in_what_the_engines_return(seen, tested, match):
    ok = OK["04_custom_training_loop.ipynb"]
    pulled = {"digest": ["d", "d"], "initial": ["i", "i"], "strategy.num_replicas_in_sync": [2, 2],
              "examples_seen": seen, "test_counted": tested}
    raw = {k: v for k, v in ok.items() if k not in ("digests", "initial", "in_sync", "seen", "overlap", "worker_test_counts")}
    holds_unless(match, gather_and_prove, "04_custom_training_loop.ipynb", {**raw, "engines": PlantedEngines(pulled)})


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
