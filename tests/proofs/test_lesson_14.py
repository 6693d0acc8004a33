"""Lesson 14's proof cell (notebooks/14_predicting_scaling.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells on planted raw data (what the engines return), and real runs with a claim broken (a
step compiled by XLA, a strategy that packs every step), must fail the proof through the cells' own
code, not a planted final value."""

import json

import numpy as np
import pytest

from helpers.local_workers import run_local_workers
from tests.support.proof_cases import LESSON_14_XLA, OK
from tests.support.proof_cells import PlantedEngines, cell_defining, holds_unless, run_proof

LESSON = "14_predicting_scaling.ipynb"


def _cell(marker: str) -> str:
    """The code cell holding `marker`, without its `%%px` line."""
    return cell_defining(LESSON, marker).removeprefix("%%px\n")


@pytest.mark.parametrize("saved_ms,overlap", [(6.0, 6.0 / 28.0), (-2.0, 0.0), (40.0, 1.0)],
                         ids=["packs hide some", "packs cost time", "more saved than the all-reduce"])
def test_lesson_14_model_cells_take_the_slowest_worker_round_by_round(saved_ms, overlap):
    """The computing cells themselves (the link, the model's step, the overlap), on planted engine
    results: all-reduce times of a known ring (1 GB/s, 1 ms per hop, 2 workers), the slowest worker's
    time taken in each round (a median of each worker's medians would differ), and the overlap as
    the median of what the packs saved each round over the model's all-reduce, kept between none and all."""
    namespace = {"print": lambda *a: None, "np": np}
    for marker in ("def ring_allreduce_s", "def quartiles_ms"):
        exec(compile(_cell(marker), "14", "exec"), namespace)
    link = namespace["Link"]("planted", 1e9, 1e-3)
    sizes = [1_000_000, 4_000_000, 16_000_000]
    times = {s: namespace["ring_allreduce_s"](s, 2, link) for s in sizes}
    gradient_bytes = 26_000_000  # all-reduce 2/2 x 26 MB / 1 GB/s + 2 ms = 28 ms
    one_pack = [0.05, 0.06, 0.04]  # the slower worker's, round by round
    workers = [{"alone": [0.012, 0.015, 0.011], "together": [0.02, 0.03, 0.01], "one pack": one_pack,
                "packed": [t - saved_ms / 1000 for t in one_pack]},
               {"alone": [], "together": [0.025, 0.01, 0.02], "one pack": [t - 0.01 for t in one_pack],
                "packed": [0.01] * 3}]
    pulled = {"probe_times": [{s: [t] * 3 for s, t in times.items()}, {s: [t * 0.9] * 3 for s, t in times.items()}],
              "step_times": workers}
    namespace.update(gradient_bytes=gradient_bytes, WORKERS=2, engines=PlantedEngines(pulled),
                     PACKINGS={"one pack": 0, "packed": 4}, RING_PACK_BYTES=4)
    for marker in ("np.polyfit", "predicted_s = step_s(", "overlap_seen ="):  # in the lesson's order
        exec(compile(_cell(marker), "14", "exec"), namespace)
    assert namespace["link"].bandwidth == pytest.approx(1e9, rel=1e-6)
    assert namespace["link"].latency == pytest.approx(1e-3, rel=1e-6)
    assert namespace["compute_s"] == 0.025  # rounds' slowest: 0.025, 0.03, 0.02; each worker's median: 0.02
    assert namespace["alone_s"] == 0.012 and namespace["allreduce_s"] == pytest.approx(0.028)
    assert namespace["measured_s"] == 0.05 and namespace["overlap"] == pytest.approx(overlap)
    assert namespace["predicted_packed_s"] == pytest.approx(0.025 + (1 - overlap) * 0.028)


@pytest.mark.parametrize("decorator,expected", [("@tf.function(jit_compile=False)", False),
                                                ("@tf.function", None), ("@tf.function(jit_compile=True)", True)])
def test_lesson_14_reads_jit_compile_from_the_traced_step(decorator, expected):
    """Lesson 14's `xla_of` on its own local step written three ways: the step as the lesson writes it
    reads False, the decorator left at its default reads None, XLA reads True; the proof accepts only the first."""
    import keras
    import tensorflow as tf

    namespace = {"tf": tf}
    exec(compile(_cell("def xla_of"), "14 xla_of", "exec"), namespace)
    step_source = _cell("def local_step")
    assert step_source.startswith("@tf.function(jit_compile=False)\ndef local_step")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    step_ns = {"tf": tf, "keras": keras, "local_model": model, "local_optimizer": keras.optimizers.SGD(0.01)}
    exec(compile(step_source.replace("@tf.function(jit_compile=False)", decorator), "14 local_step", "exec"), step_ns)
    images, labels = tf.ones([2, 4]), tf.constant([0, 1])
    value = namespace["xla_of"](step_ns["local_step"], images, labels)
    assert value is expected
    holds_unless(None if expected is False else "without XLA", run_proof, LESSON,
                 {**OK[LESSON], "xla": {**LESSON_14_XLA, "engine 0, local step": value}})


_PACKS_WORKER = '''
import json, sys
import keras, numpy as np, tensorflow as tf
from keras import layers
options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=int(sys.argv[1]))
strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
PACKINGS, PER_REPLICA_BATCH = {"one pack": 0, "packed": 4 * 2**20}, 32
'''


_GRADIENTS_LINE = "            grads = tape.gradient(loss, model.trainable_variables)\n"
_WAIT_FOR_ALL = _GRADIENTS_LINE + ("            with tf.control_dependencies(grads):  # each gradient waits for all\n"
                                   "                grads = [tf.identity(g) for g in grads]\n")


@pytest.mark.parametrize("strategy_pack,step_edit,expected", [(0, None, None), (4 * 2**20, None, "one pack"),
                                                              (0, _WAIT_FOR_ALL, "wait neither")],
                         ids=["the lesson's strategy", "a strategy created with 4 MiB packs",
                              "every gradient made to wait for all"])
def test_lesson_14_counts_the_packs_a_real_step_all_reduces(tmp_path, strategy_pack, step_edit, expected):
    """Two real workers trace the lesson's own steps (its model, `sgd_update`, `distributed_step_with`,
    `local_step`, `packs_of`, `not_waited_for`): under the lesson's strategy the proof passes on what they
    count; under a strategy created with 4 MiB packs the step that asks for 0 bytes per pack is packed all
    the same (Options.merge keeps the strategy's), and the proof fails; with each gradient made to wait
    for all of them the packs keep their sizes, but the first waits for the whole backward pass, and the
    proof fails."""
    cells = [_cell(m) for m in ("def wide_cnn", "def xla_of", "def ancestors", "def not_waited_for",
                                "with strategy.scope()", "def local_step", "def sgd_update", "def distributed_step_with")]
    if step_edit:
        assert cells[-1].count(_GRADIENTS_LINE) == 1
        cells[-1] = cells[-1].replace(_GRADIENTS_LINE, step_edit)
    script = tmp_path / "packs.py"
    script.write_text(_PACKS_WORKER + "\n\n".join(cells) + '''
images, labels = tf.zeros([32, 32, 32, 3]), tf.zeros([32], tf.int64)
steps = {name: distributed_step_with(pack) for name, pack in PACKINGS.items()}
packs = {"local step": packs_of(local_step, images, labels), **{n: packs_of(s, images, labels) for n, s in steps.items()}}
waits = {n: not_waited_for(s, images, labels) for n, s in steps.items()}
print("PACKS", json.dumps(packs))
print("WAITS", json.dumps(waits))
''')
    outcomes = run_local_workers([str(script), str(strategy_pack)], 2, deadline_s=240)
    assert all(o.returncode == 0 for o in outcomes), [o.output[-2000:] for o in outcomes]
    packs, waits = ([json.loads(o.output.split(f"{key} ", 1)[1].splitlines()[0]) for o in outcomes]
                    for key in ("PACKS", "WAITS"))
    print(packs, waits)
    holds_unless(expected, run_proof, LESSON, {**OK[LESSON], "packs": packs, "waits": waits})


@pytest.mark.parametrize("low,high,said", [(-0.1, 0.2, "within this run's spread"), (0.0, 0.3, "within this run's spread"),
                                           (0.14, 0.36, "the packs saved time: both quartiles of what they saved over 3 "
                                                        "rounds are above zero"),
                                           (-0.5, -0.1, "the packs cost time: both quartiles of what they saved over 3 "
                                                        "rounds are below zero")],
                         ids=["straddling", "touching zero", "both above", "both below"])
def test_lesson_14_says_from_the_quartiles_whether_the_packs_effect_is_noise(low, high, said):
    """The sentence on the packs' effect is computed from the quartiles of what they saved, as shares of the
    all-reduce: within the run's spread only where they straddle zero (the second review's run read
    +14 to +36 %, which the lesson then called a reading within the spread)."""
    printed = []
    namespace = {"low": low, "high": high, "saved": np.zeros(3), "print": printed.append}
    exec(compile(_cell("within_noise ="), "14 within_noise", "exec"), namespace)
    assert len(printed) == 1 and said in printed[0]
    assert namespace["within_noise"] is ("within" in said)
