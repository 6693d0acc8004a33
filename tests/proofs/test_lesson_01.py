"""Lesson 01's proof cell (notebooks/01_mirrored_strategy.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

from types import SimpleNamespace

import nbformat
import numpy as np
import pytest

from tests.support.proof_cases import OK, planted_strategy
from tests.support.proof_cells import (
    NOTEBOOKS, ONE_REPLICA_EACH, code_cells, gather_and_prove, holds_unless, planted_copies, run_proof,
    solution_source,
)


def _named(path: str, variable: SimpleNamespace, read: int = 0) -> SimpleNamespace:
    """A Keras variable: its path, its copies, and `numpy()` giving copy `read` (TensorFlow reads the first)."""
    return SimpleNamespace(path=path, value=variable.value, numpy=lambda: variable.value[read].numpy())


class _SavedModels:
    """`model.save` and `keras.models.load_model` as lesson 01's gathering cell uses them: save keeps what
    each non-trainable variable's `numpy()` reads (outside a replica), load gives those values back."""

    def __init__(self):
        self.files = {}

    def saver(self, model):
        return lambda path: self.files.__setitem__(str(path), [(v.path, v.numpy()) for v in model.non_trainable_variables])

    def load_model(self, path):
        return SimpleNamespace(non_trainable_variables=[SimpleNamespace(path=p, numpy=lambda a=a: a)
                                                        for p, a in self.files[str(path)]])


class SyncOnReadVariable:
    """A metric's running total as a strategy's scope makes it: only its type's name is read."""


@pytest.mark.parametrize("kernel,moving,read,slots,match", [
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.3]), 0, 1, None),
    (([1.0, 2.0], [1.0, 2.001]), ([0.1], [0.3]), 0, 1, "differ between replicas"),  # an all-reduce skipped
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.1]), 0, 1, "moving statistics should differ"),  # statistics synchronised
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.3]), 1, 1, "replica 0's copies"),  # save wrote replica 1's copy
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.3]), 0, 0, "one momentum slot per weight"),  # SGD without momentum
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.3]), 0, [2.0], "one momentum slot per weight"),  # a slot of another shape
    (([0.5, 2.0], [0.5, 2.0]), ([0.1], [0.3]), 0, 1, "should move every weight"),  # the kernel as it started
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.3]), 0, [0.0, 0.0], "should move every weight")],  # a slot left zero
    ids=["as trained", "weights apart", "statistics alike", "saved from replica 1", "no momentum slots",
         "slot of another shape", "weights never moved", "slot zero"])
def test_lesson_01_gathering_cell_measures_the_copies_of_each_variable(tmp_path, kernel, moving, read, slots, match):
    """`slots`: 1 (the slot's copies are the kernel's), 0 (no slot) or the value of both its copies."""
    saved = _SavedModels()
    slot = planted_copies(*kernel) if isinstance(slots, int) else planted_copies(slots, slots)
    model = SimpleNamespace(
        trainable_variables=[_named("dense/kernel", planted_copies(*kernel))],
        optimizer=SimpleNamespace(momentums=[_named("sgd/dense_kernel_momentum", slot)][:1 if slots else 0]),
        non_trainable_variables=[_named("bn/moving_mean", planted_copies(*moving), read)],
        metrics=[SimpleNamespace(variables=[SimpleNamespace(value=SyncOnReadVariable())])])
    model.save = saved.saver(model)
    ok = OK["01_mirrored_strategy.ipynb"]
    holds_unless(match, gather_and_prove, "01_mirrored_strategy.ipynb", {
        "strategy": ONE_REPLICA_EACH, "model": model, "update_ratio": 1.0, "update_gap": 0.0, "keras": SimpleNamespace(models=saved),
        "initial_weights": [np.asarray([0.5, 2.0], dtype="float32")],
        "environment": SimpleNamespace(output_dir=lambda: tmp_path),
        "partial_splits": ok["partial_splits"], "expected_splits": ok["expected_splits"]})
    assert list(saved.files) == [str(tmp_path / "01_small_cnn.keras")]


def _lesson_01_solution(number: int, change) -> None:
    """Lesson 01's solution `number` on a real MirroredStrategy of this process (one replica: a mirrored
    variable is one even then), with `change` (old, new) made to its source first."""
    import keras
    import tensorflow as tf

    nb = nbformat.read(NOTEBOOKS / "01_mirrored_strategy.ipynb", as_version=4)
    namespace = {"tf": tf, "keras": keras, "strategy": tf.distribute.MirroredStrategy(devices=["/cpu:0"]),
                 "print": lambda *a, **k: None}
    exec(next(c.source for c in nb.cells if c.source.startswith("from keras import layers")), namespace)  # small_cnn
    source = solution_source("01_mirrored_strategy.ipynb", number)
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    exec(compile(source, f"01 solution {number}", "exec"), namespace)


@pytest.mark.parametrize("number,change,match", [
    (1, None, None),
    (1, ("    inside = tf.Variable(1.0)\noutside", "    inside = tf.Variable(1.0)\n    outside"), "outside the scope"),
    (1, ("with strategy.scope():\n    inside", "if True:\n    inside"), "inside the scope"),
    (2, None, None),
    (2, ("buggy = small_cnn()\nwith strategy.scope():  # the fix\n",
         "with strategy.scope():  # the fix\n    buggy = small_cnn()\n"), "the buggy model is mirrored"),
    (2, ("with strategy.scope():  # the fix", "if True:  # the fix"), "the fixed model is not mirrored"),
    # the buggy model compiled and fitted outside the scope: fit trains it (on one device), the claim's error is not shown
    (2, ("with strategy.scope():  # the buggy model compiled", "if True:  # the buggy model compiled"), "fit ran")],
    ids=["1 as written", "1 outside made inside", "1 inside made outside", "2 as written", "2 buggy built in the scope",
         "2 fix built outside", "2 buggy fitted outside"])
def test_lesson_01_solutions_fail_when_the_variables_are_not_where_they_claim(number, change, match):
    """Item E/F of the review: each solution's check fails when the variable or model it calls plain
    (or mirrored) is created on the other side of `strategy.scope()`."""
    holds_unless(match, _lesson_01_solution, number, change)


_SPLIT_RUN = """
import json, sys
import tensorflow as tf
replicas = int(sys.argv[1])
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
measured = {}
for label, source in json.load(sys.stdin).items():
    namespace = {"tf": tf, "strategy": strategy, "global_batch": 32 * replicas, "print": lambda *a, **k: None}
    exec(compile(source, "01 cell", "exec"), namespace)
    measured[label] = {k: namespace[k] for k in ("partial_splits", "expected_splits", "told_apart")}
print("MEASURED " + json.dumps(measured))
"""
_EVEN_RULE = ("    share = math.ceil(partial / replicas)\n    return [min(share, max(0, partial - share * r)) for r in range(replicas)]",
              "    return [partial // replicas + (r < partial % replicas) for r in range(replicas)]")


@pytest.mark.parametrize("replicas", [3, 4])
def test_lesson_01_partial_batch_split_on_3_and_4_replicas(replicas):
    """Issue 54: on 2 replicas (the nbval pass) ceil(p / N) in turn and an even split agree for every p, so the
    lesson's split cell cannot tell them apart there. Here it runs on 3 and 4 logical CPUs in a fresh process:
    TensorFlow's splits must match the lesson's rule, the rule must differ from an even split for some p, and the
    cell with an even split for its rule (the claim false) must fail the proof."""
    import json
    import subprocess
    import sys

    cell = next(c for c in code_cells("01_mirrored_strategy.ipynb") if "def last_split(" in c)
    assert _EVEN_RULE[0] in cell
    cells = {"as written": cell, "an even split claimed": cell.replace(*_EVEN_RULE)}
    done = subprocess.run([sys.executable, "-c", _SPLIT_RUN, str(replicas)], input=json.dumps(cells), capture_output=True,
                          text=True, timeout=300, cwd=NOTEBOOKS.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(next(l[9:] for l in done.stdout.splitlines() if l.startswith("MEASURED ")))
    name, ok = "01_mirrored_strategy.ipynb", OK["01_mirrored_strategy.ipynb"]
    for label, found in measured.items():
        splits = {key: {int(p): split for p, split in found[key].items()} for key in ("partial_splits", "expected_splits")}
        case = {**ok, "strategy": planted_strategy(replicas), "copies": {replicas}, **splits}
        holds_unless(None if label == "as written" else "partial batch should go out", run_proof, name, case)
    assert measured["as written"]["told_apart"], f"on {replicas} replicas the rule should differ from an even split"
