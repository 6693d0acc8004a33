"""Lesson 05's proof cell (notebooks/05_sync_batch_norm.ipynb) beyond its cases in tests/support/proof_cases.py:
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
)


class _BN:
    def __init__(self, *means):
        self.moving_mean = planted_copies(*means)


class _Model:
    def __init__(self, *layers):
        self.layers = layers  # the public list the lesson walks (review r05-1, finding 9: no private _flatten_layers)


@pytest.mark.parametrize("plain,synced,calls,match,starts", [
    (([0.1], [0.4]), ([0.2], [0.2]), 6, None, ["s", "s"]),
    (([0.1], [0.4]), ([0.2], [0.21]), 6, "identical statistics", ["s", "s"]),  # the synchronized layer kept its own
    (([0.1], [0.1]), ([0.2], [0.2]), 6, "different statistics", ["s", "s"]),
    (([0.1], [0.4]), ([0.2], [0.2]), 2, "3 all-reduces", ["s", "s"]),  # one all-reduce on each replica
    (([0.1], [0.4]), ([0.2], [0.2]), 7, "3 all-reduces", ["s", "s"]),  # review P1: one extra call, 7 // 2 == 3
    (([0.1], [0.4]), ([0.0], [0.0]), 6, "never moved", ["s", "s"]),  # review P2: BN layers frozen (trainable=False)
    # review r05-3, finding 4: replica 1 of each run starts elsewhere, the runs alike (run against run passed)
    (([0.1], [0.4]), ([0.2], [0.2]), 6, "same weights", ["s", "t"])],
    ids=["as trained", "sync spread", "plain alike", "one all-reduce", "seven calls", "sync frozen at zero",
         "replica 1 of both runs starts elsewhere"])
def test_lesson_05_gathering_cell_compares_the_moving_means_of_the_bn_layers(plain, synced, calls, match, starts):
    ok = OK["05_sync_batch_norm.ipynb"]
    raw = {"strategy": ONE_REPLICA_EACH, "gaps": ok["gaps"], "moving_gaps": ok["moving_gaps"], "forward_calls": calls,
           "keras": SimpleNamespace(layers=SimpleNamespace(BatchNormalization=_BN)),
           "runs": {"ordinary BN": {"model": _Model(object(), _BN(*plain)), "start": starts},
                    "synchronized BN": {"model": _Model(_BN(*synced), object()), "start": starts}}}
    raw["np"] = np  # the gathering cell's helper is the cell before it, defined on the same planted names
    exec(next(c for c in code_cells("05_sync_batch_norm.ipynb") if c.startswith("def replica_spread")), raw)
    holds_unless(match, gather_and_prove, "05_sync_batch_norm.ipynb", raw)


def test_lesson_05_proof_on_one_replica_says_it_did_not_check_that_synchronized_replicas_agree(capsys):
    """Review r05-1, finding 7: on one replica the replicas' spread is 0 whether or not the layers are
    synchronized (its only copy compared with itself), as is get_weights() against replica 0. A run whose
    synchronize_batch_norm set nothing (spread 0, the ordinary run's) must not pass as if it had shown
    synchronized replicas agree: the proof says it could not check that, and does not print OK."""
    ok = OK["05_sync_batch_norm.ipynb"]
    run_proof("05_sync_batch_norm.ipynb", {**ok, "strategy": planted_strategy(1), "all_reduces": 3, "spread_plain": 0.0,
                                           "spread_sync": 0.0, "gaps": {**ok["gaps"], "ordinary vs global": 1e-7}})
    out = capsys.readouterr().out
    assert "NOT CHECKED (one replica)" in out and "nor that synchronized replicas agree" in out, out
    assert "get_weights() returns replica 0's copy" in out and "SyncBN OK" not in out, out


LESSON_05_ONE_LAYER = """
import ast, re, sys
import nbformat
from helpers import environment
environment.local_replicas(2)
import keras, numpy as np, tensorflow as tf

variant = sys.argv[1]
code = [c.source for c in nbformat.read("notebooks/05_sync_batch_norm.ipynb", as_version=4).cells if c.cell_type == "code"]
first = next(i for i, s in enumerate(code) if s.startswith("rng = np.random.default_rng"))
last = next(i for i, s in enumerate(code) if s.startswith("settled = "))
ns = {"keras": keras, "np": np, "tf": tf, "print": lambda *a, **k: None,
      "strategy": tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])}
for source in code[first:last + 1]:  # the slices, the layers, the wrapper, the forward count, the gaps, the moving means
    if variant == "reversed rule" and source.startswith("def one_layer"):
        # Keras's rule at momentum 1 - m is the reversed rule at m: moving * (1 - m) + batch mean * m
        source, n = re.subn(r"momentum=([^,]+),", r"momentum=1 - (\\1),", source)
        assert n == 1, source
    exec(source, ns)
if variant.startswith("solution"):
    solution = next(s for s in code if s.startswith("# Solution 1"))
    edit = {"solution, no input gradient": ("tape.watch(x)\\n", "pass\\n"),
            "solution, batch size known": ("tf.TensorSpec([None, None, 1]", "tf.TensorSpec([None, 4, 1]")}.get(variant)
    if edit:
        assert solution.count(edit[0]) == 1, edit
        solution = solution.replace(*edit)
    exec(solution, ns)
    print("COUNTED", ns["fixed"], ns["open_batch"], "FORWARD", ns["forward_calls"])
else:  # the proof's asserts on the one-layer moving means, word for word
    proof = next(s for s in reversed(code) if "assert" in s and not s.startswith("# Solution"))
    checks = [node for node in ast.walk(ast.parse(proof))
              if isinstance(node, ast.Assert) and "moving_gaps" in ast.unparse(node.test)]
    assert len(checks) >= 4, len(checks)
    exec(compile(ast.Module(checks, []), "proof", "exec"), ns)
    print("PROOF HELD", ns["moving_gaps"])
"""


def _one_layer(variant: str):
    import subprocess
    import sys

    from tests.conftest import ROOT

    return subprocess.run([sys.executable, "-c", LESSON_05_ONE_LAYER, variant], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


@pytest.mark.parametrize("variant", ["solution", "solution, no input gradient", "solution, batch size known"])
def test_lesson_05_solution_1_counts_the_backward_all_reduces(variant):
    """Lesson 05's solution 1 on its own slices and counting wrapper, 2 replicas: 5 all-reduces per replica with
    each replica's batch of a known size (3 forward, 2 backward), 6 with the batch size left open (the count's
    all-reduce gets a gradient too; review r05-2, finding 6). Without `tape.watch(x)` no gradient reaches the
    layer's input and the backward all-reduces are never traced (3 and 3); with the open signature's batch size
    given (4) the count stays a constant (5 and 5): the solution's own assert must fail both."""
    done = _one_layer(variant)
    if variant == "solution":
        # and the forward pass's count the proof reads is still 6 after the solution counted in the same list
        assert done.returncode == 0 and "COUNTED 5.0 6.0 FORWARD 6" in done.stdout, (done.stdout, done.stderr[-2000:])
    else:
        counted = {"solution, no input gradient": "(3.0, 3.0)", "solution, batch size known": "(5.0, 5.0)"}[variant]
        assert done.returncode != 0 and f"AssertionError: {counted}" in done.stderr, (done.stdout, done.stderr[-2000:])


@pytest.mark.parametrize("variant", ["as written", "reversed rule"])
def test_lesson_05_one_layer_moving_means_follow_keras_update_rule(variant):
    """Review r05-2, finding 5: the one-layer experiment run for real (2 replicas) and the proof's asserts on its
    moving means. With the update rule reversed (moving * (1 - m) + batch mean * m: the layer built with momentum
    1 - m) they must fail; at momentum 0.5 the reversed rule is the same rule, and the proof passed it."""
    done = _one_layer(variant)
    if variant == "as written":
        assert done.returncode == 0 and "PROOF HELD" in done.stdout, (done.stdout, done.stderr[-2000:])
    else:
        assert done.returncode != 0 and "track the global mean" in done.stderr, (done.stdout, done.stderr[-2000:])


FROZEN = ("        layer.synchronized = True\n", "        layer.synchronized = True\n        layer.trainable = False\n")
ONLY_SYNCED = ("for synchronized in (False, True):", "for synchronized in (True,):")  # the ordinary run shows nothing
NO_SEED = ("    keras.utils.set_random_seed(7)", "    pass")
NO_FIT = ("    timer = StepTimer(global_batch)\n", '    runs[name] = {"start": start}\n    continue  # the starts are compared: no fit\n')
# replica 1's copy of the first weight off by 1 in the synchronized run, replica 0's as built (review r05-2, finding 1:
# a digest of get_weights() reads replica 0's copy only)
REPLICA_1_OFF = ("    start = ", "    if synchronized:\n        last = strategy.experimental_local_results(model.weights[0].value)[-1]\n"
                                "        last.assign(last + 1.0)\n    start = ")
# the same in both runs: run A's digests equal run B's, replica 1's differ from replica 0's (review r05-3, finding 4)
REPLICA_1_OFF_BOTH = ("    start = ", "    last = strategy.experimental_local_results(model.weights[0].value)[-1]\n"
                                     "    last.assign(last + 1.0)\n    start = ")


def _run_05_to_where_it_shows(tmp_path, monkeypatch, edits: list[tuple[str, str]], figure: str) -> tuple[str, str]:
    """(status, detail) of lesson 05 run for real with each (old, new) of `edits` made in its code, up to
    its ResNet50 runs (nothing after them: no curves, no step times), then one cell: the figures cell's
    statement that computes `figure` and the proof cell's asserts on it, word for word."""
    import ast

    from helpers.commands.course_run import run_notebook

    nb = nbformat.read(NOTEBOOKS / "05_sync_batch_norm.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for old, new in edits:
        cell = next(c for c in code if old in c.source)
        assert cell.source.count(old) == 1, old
        cell.source = cell.source.replace(old, new)

    def statements(marker: str, keep) -> list[str]:
        source = next(c.source for c in code if marker in c.source)
        return [ast.get_source_segment(source, node) for node in ast.parse(source).body if keep(node)]

    def names(node) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    check = [*statements("def replica_spread", lambda node: True),
             *statements("same_start =", lambda node: isinstance(node, ast.Assign) and figure in names(node.targets[0])),
             *statements("never moved", lambda node: isinstance(node, ast.Assert) and figure in names(node.test))]
    assert len(check) >= 3, check  # the spread helper, the figure, at least one assert on it
    runs = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "model.fit(" in c.source)
    nb.cells = nb.cells[:runs + 1] + [nbformat.v4.new_code_cell("\n".join(check))]
    for name in ("COURSE_OUTPUT_DIR", "COURSE_FIGURES_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    variant = tmp_path / "nb" / "05_sync_batch_norm.ipynb"
    variant.parent.mkdir()
    nbformat.write(nb, variant)
    (tmp_path / "out").mkdir()
    status, _, detail = run_notebook(variant, tmp_path / "out", timeout=900)
    return status, detail


@pytest.mark.multiprocess
@pytest.mark.parametrize("edits,figure,match", [
    ([FROZEN, ONLY_SYNCED], "moved_sync", "never moved"),  # review P2
    ([NO_SEED, NO_FIT], "same_start", "same weights"),  # review P3
    ([NO_FIT, REPLICA_1_OFF], "same_start", "same weights"),  # review r05-2, finding 1
    ([NO_FIT, REPLICA_1_OFF_BOTH], "same_start", "same weights")],  # review r05-3, finding 4
    ids=["synced BN frozen", "no shared seed", "replica 1 starts elsewhere", "replica 1 elsewhere in both runs"])
def test_lesson_05_run_for_real_with_a_broken_claim_fails_the_proof(tmp_path, monkeypatch, edits, figure, match):
    """Lesson 05 run for real with a claim broken, stopped where the failure shows, and the proof's own
    asserts on the figure that shows it. The synchronized model's BN layers frozen (`trainable = False`:
    Keras then runs them in inference mode, batch_normalization.py:363, and their moving means stay at
    their initial zeros at every step; identical zeros used to pass "identical statistics", review P2):
    the synchronized run alone, one step of one epoch. Without the shared seed (the two ResNet50s start
    from different weights, review P3): both models built, their starts compared, neither trained. With replica
    1's copy of one weight moved in the synchronized model (replica 0's as built; review r05-2, finding 1: the old
    digest of get_weights() read replica 0's copies only and passed it): the same, built and compared; and with it
moved in both runs (review r05-3, finding 4: one digest of all copies per run compared the runs only). The
    whole lesson, its proof passing, runs in the nbval pass."""
    if figure == "moved_sync":
        monkeypatch.setenv("COURSE_EPOCHS", "1")
        monkeypatch.setenv("COURSE_MAX_STEPS", "1")
    status, detail = _run_05_to_where_it_shows(tmp_path, monkeypatch, edits, figure)
    assert status == "FAILED" and match in detail, (status, detail)
