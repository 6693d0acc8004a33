"""Lesson 07's proof cell (notebooks/07_scaling_performance.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

import pytest

from tests.support.proof_cases import lesson_07_point
from tests.support.proof_cells import gather_and_prove, holds_unless


def _timed(label, replicas, inside=0.95):
    """A measured point as lesson 07's runs return it: the span, the share of it inside timed steps."""
    return {**lesson_07_point(label, replicas), "span_s": 2.0, "in_steps_s": 2.0 * inside, "median_step_s": 0.18}


@pytest.mark.parametrize("inside,match", [(0.95, None), (0.5, "inside timed steps")])
def test_lesson_07_gathering_cell_computes_the_share_inside_timed_steps(inside, match):
    """From the runs' raw spans: a run whose timed steps cover half of its span (the rest: start-up,
    iterator teardown) must fail the proof through the gathering cell's arithmetic."""
    raw = {"points": [_timed("MirroredStrategy", 1), _timed("MirroredStrategy", 2, inside),
                      _timed("MultiWorkerMirroredStrategy", 2)], "per_replica": 32, "STEPS": 10}
    holds_unless(match, gather_and_prove, "07_scaling_performance.ipynb", raw)


@pytest.mark.parametrize("baseline_jit,auto_jit,match", [(False, "", None), (True, "", "without XLA"),
                                                         (False, "--tf_xla_auto_jit=2", "auto-clustering")])
def test_lesson_07_gathering_cell_reads_each_runs_jit_compile(baseline_jit, auto_jit, match):
    """From the runs' own results: a 1-replica baseline that Keras ran with XLA, or one whose process
    had XLA's auto-clustering on (jit_compile=False then compiles anyway), must fail the proof
    through the gathering cell."""
    raw = {"points": [{**_timed("MirroredStrategy", 1), "jit_compile": baseline_jit, "auto_jit": auto_jit},
                      _timed("MirroredStrategy", 2), _timed("MultiWorkerMirroredStrategy", 2)],
           "per_replica": 32, "STEPS": 10}
    holds_unless(match, gather_and_prove, "07_scaling_performance.ipynb", raw)


LESSON_07_SLEEPY = """
import json, sys, time
import nbformat
from helpers.data import ensure_data, load_split

nb = nbformat.read("notebooks/07_scaling_performance.ipynb", as_version=4)
program = next(c.source for c in nb.cells if c.source.startswith("%%writefile")).split("\\n", 1)[1]
ns = {"__name__": "measure_07"}
exec(compile(program, "07_measure", "exec"), ns)
import numpy as np
import tensorflow as tf


class BetweenSteps(ns["StepTimes"]):  # the program's own timer, then work no timer sees
    sleep = 0.0

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        time.sleep(self.sleep)


def slow(seconds):
    time.sleep(seconds)
    return np.float32(0.0)


def slow_batches(examples, global_batch, context, batches=4):  # the program's batches, each read late
    kept = in_memory_batches(examples, global_batch, context, batches)
    late = lambda images, labels: (images + tf.reshape(tf.numpy_function(lambda: slow(input_s), [], tf.float32), []),
                                   labels)
    return kept.map(late) if input_s else kept


ns["StepTimes"] = BetweenSteps
in_memory_batches, ns["in_memory_batches"] = ns["in_memory_batches"], slow_batches
examples = load_split("train", ensure_data(True).data_dir, limit=512)
for variant in sys.argv[1:]:  # one process, one TensorFlow start, a measurement for each
    sleep, input_s = map(float, variant.split(":"))
    BetweenSteps.sleep = sleep
    print("POINT " + json.dumps(ns["measure"](tf.distribute.get_strategy(), examples, "cnn", 32, 10)))
"""


def test_lesson_07_proof_fails_when_time_passes_between_timed_steps_or_in_the_input():
    """The real measurement with a callback that sleeps 0.3 s after each step's end: the timed steps no
    longer account for the span, and the proof must say so; with an input stage of 0.1 s a batch, the
    steps account for the span but the input alone is a large share of a step, and the proof must say
    that; with the same callback sleeping 0 s and no input stage, measured in the same process first,
    it passes (the replacements alone change nothing)."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_07_SLEEPY, "0:0", "0.3:0", "0:0.1"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**__import__("os").environ, "COURSE_MODE": "quick"})
    assert done.returncode == 0, done.stderr[-3000:]
    measured = [json.loads(l[6:]) for l in done.stdout.splitlines() if l.startswith("POINT ")]
    assert len(measured) == 3, done.stdout[-3000:]
    for point, match in zip(measured, (None, "inside timed steps", "reading the input alone")):
        points = [{**point, "label": "MirroredStrategy"},
                  lesson_07_point("MirroredStrategy", 2), lesson_07_point("MultiWorkerMirroredStrategy", 2)]
        for p in points[1:]:
            p.update(span_s=2.0, in_steps_s=1.9, median_step_s=0.18, threads=point["threads"])
        raw = {"points": points, "per_replica": 32, "STEPS": 10}
        holds_unless(match, gather_and_prove, "07_scaling_performance.ipynb", raw)
