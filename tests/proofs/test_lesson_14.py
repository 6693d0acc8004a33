"""Lesson 14's proof cell (notebooks/14_predicting_scaling.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

import numpy as np
import pytest

from tests.support.proof_cases import LESSON_14_XLA, OK
from tests.support.proof_cells import PlantedEngines, cell_defining, holds_unless, run_proof


@pytest.mark.parametrize("saved_ms,overlap", [(6.0, 6.0 / 28.0), (-2.0, 0.0), (40.0, 1.0)],
                         ids=["packs hide some", "packs cost time", "more saved than the all-reduce"])
def test_lesson_14_model_cell_fits_the_link_and_takes_the_overlap_the_packs_got(saved_ms, overlap):
    """The computing cells themselves (the link, the model's step, the overlap), on planted engine
    results: all-reduce times of a known ring (1 GB/s, 1 ms per hop, 2 workers), the slowest worker's
    numbers taken, and the overlap as the time the packs saved over the model's all-reduce, kept
    between none and all."""
    namespace = {"print": lambda *a: None}
    exec(compile(cell_defining("14_predicting_scaling.ipynb", "def ring_allreduce_s"), "14", "exec"), namespace)
    link = namespace["Link"]("planted", 1e9, 1e-3)
    sizes = [1_000_000, 4_000_000, 16_000_000]
    times = {s: namespace["ring_allreduce_s"](s, 2, link) for s in sizes}
    gradient_bytes = 26_000_000  # all-reduce 2/2 x 26 MB / 1 GB/s + 2 ms = 28 ms
    one_pack = 0.05
    pulled = {"allreduce_times": [times, {s: t * 0.9 for s, t in times.items()}],
              "together_s": [0.02, 0.021],
              "step_times": [{0: one_pack, 4: one_pack - saved_ms / 1000}, {0: one_pack - 0.01, 4: 0.01}]}
    namespace.update(np=np, gradient_bytes=gradient_bytes, WORKERS=2, alone_s=0.015, engines=PlantedEngines(pulled),
                     PACKINGS=(0, 4), RING_PACK_BYTES=4)
    for marker in ("np.polyfit", "predicted_s = step_s(", "overlap_seen ="):  # in the lesson's order
        exec(compile(cell_defining("14_predicting_scaling.ipynb", marker), "14", "exec"), namespace)
    assert namespace["link"].bandwidth == pytest.approx(1e9, rel=1e-6)
    assert namespace["link"].latency == pytest.approx(1e-3, rel=1e-6)
    assert namespace["compute_s"] == 0.021 and namespace["allreduce_s"] == pytest.approx(0.028)
    assert namespace["measured_s"] == one_pack and namespace["overlap"] == pytest.approx(overlap)
    assert namespace["predicted_packed_s"] == pytest.approx(0.021 + (1 - overlap) * 0.028)


@pytest.mark.parametrize("decorator,expected", [("@tf.function(jit_compile=False)", False),
                                                ("@tf.function", None), ("@tf.function(jit_compile=True)", True)])
def test_lesson_14_reads_jit_compile_from_the_traced_step(decorator, expected):
    """Lesson 14's `xla_of` on its own step written three ways: the step as the lesson writes it reads
    False, the decorator left at its default reads None, XLA reads True; the proof accepts only the first."""
    import keras
    import tensorflow as tf

    source = cell_defining("14_predicting_scaling.ipynb", "def xla_of")
    namespace = {}
    exec(compile(source[source.index("def xla_of"):], "14 xla_of", "exec"), namespace)
    step_source = cell_defining("14_predicting_scaling.ipynb", "def train_step")
    assert "@tf.function(jit_compile=False)\ndef train_step" in step_source
    step_source = step_source.replace("@tf.function(jit_compile=False)", decorator).split("\n\n\nalone_s")[0]
    step_ns = {"tf": tf, "keras": keras, "wide_cnn": lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])}
    exec(compile(step_source, "14 train_step", "exec"), step_ns)
    images, labels = tf.ones([2, 4]), tf.constant([0, 1])
    xla = {"alone": namespace["xla_of"](step_ns["train_step"], images, labels)}
    assert xla["alone"] is expected
    holds_unless(None if expected is False else "without XLA", run_proof, "14_predicting_scaling.ipynb",
                  {**OK["14_predicting_scaling.ipynb"], "xla": {**LESSON_14_XLA, **xla}})
