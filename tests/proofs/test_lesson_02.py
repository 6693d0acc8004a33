"""Lesson 02's proof cell (notebooks/02_input_pipelines.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

import os
from types import SimpleNamespace

import pytest

from tests.support.proof_cases import OK, lesson_02_seen
from tests.support.proof_cells import NOTEBOOKS, code_cells, gather_and_prove, holds_unless, run_proof, solution_source


class _Batches:
    """A tf.data pipeline as lesson 02's gathering cell uses it: 6 batches, take/cache/repeat, iterable."""

    def cardinality(self) -> int:
        return 6

    def take(self, n):
        return self

    def cache(self):
        return self

    def repeat(self):
        return self

    def __iter__(self):
        return iter(range(4))


def test_lesson_02_data_proof_follows_the_replicas_per_worker():
    """Two replicas per worker (a 4-GPU node): DATA deals a batch's four per-replica pieces round-robin
    (auto_shard.cc), worker 0 [0, 1], [4, 5], ...; the proof must hold there too, not only on one replica each."""
    seen = lesson_02_seen({r: {"replicas in sync": 4, "DATA": [i for i in range(32) if i % 8 // 2 % 2 == r]} for r in (0, 1)})
    assert seen[0]["DATA"][:4] == [0, 1, 4, 5]
    holds_unless(None, run_proof, "02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], "seen": seen})


@pytest.mark.parametrize("cached,steps_s,match", [
    ([5000.0, 4800.0, 5200.0], [2.0] + [0.025] * 9, None),
    ([200.0, 5000.0, 250.0], [2.0] + [0.025] * 9, "slower than training"),  # two of three cached passes slow
    ([5000.0, 4800.0, 5200.0], [0.2] + [0.001] * 9, "slower than training")],  # 8 images in 1 ms: 8000 images/s
    ids=["headroom", "cached passes slow", "training faster"])
def test_lesson_02_gathering_cell_takes_medians_of_the_passes_and_the_steps(monkeypatch, cached, steps_s, match):
    """The rates from raw timings: the median of 3 cached passes, the training rate from the median
    step after the first (tracing) one; the proof then compares them."""
    import sys
    from types import ModuleType

    from helpers import throughput

    fit_steps = []

    def fit(data, epochs, steps_per_epoch, callbacks, verbose):
        fit_steps.append(steps_per_epoch)
        callbacks[0].durations.extend(steps_s[:steps_per_epoch])

    timing = ModuleType("helpers.throughput")
    timing.StepTimer, timing.keras_callback = throughput.StepTimer, (lambda timer: timer)
    monkeypatch.setitem(sys.modules, "helpers.throughput", timing)
    models = ModuleType("helpers.lesson")  # the cell imports the CNN and its compile step
    models.small_cnn, models.compile_model = (lambda: "cnn"), (lambda model, lr: SimpleNamespace(fit=fit))
    monkeypatch.setitem(sys.modules, "helpers.lesson", models)
    ok = OK["02_input_pipelines.ipynb"]
    raw = {**{k: v for k, v in ok.items() if k not in ("cached_rate", "training_rate")},
           "sizes": SimpleNamespace(per_replica_batch=4, max_steps=None),
           "strategy": SimpleNamespace(num_replicas_in_sync=2, scope=__import__("contextlib").nullcontext),
           "train_examples": "examples", "training_dataset": lambda examples, batch: _Batches(),
           "pass_rates": lambda ready, passes: [900.0] if passes == 1 else list(cached)}
    holds_unless(match, gather_and_prove, "02_input_pipelines.ipynb", raw)
    assert fit_steps == [10], "at least 10 steps for a median, more than the 6 batches of one pass"


@pytest.mark.parametrize("change,match", [
    (None, None),
    ((".cache()\n", "\n"), "cache should serve")],  # training_dataset without its cache
    ids=["as written", "no cache"])
def test_lesson_02_cache_proof_counts_the_reads_of_the_real_pipeline(change, match):
    """Lesson 02's cells that define training_dataset and count the reads of three passes, run on
    the quick data in this process; with `.cache()` taken out of training_dataset every pass reads
    the files again, and the proof must fail (review item 18: a real broken pipeline, not a number)."""
    import keras
    import tensorflow as tf

    from helpers.data import ensure_data, load_split

    code = code_cells("02_input_pipelines.ipynb")
    pipeline = next(c for c in code if c.startswith("from helpers.errors import CourseError"))
    if change is not None:
        assert change[0] in pipeline
        pipeline = pipeline.replace(*change)
    namespace = {"tf": tf, "keras": keras, "print": lambda *a, **k: None,
                 "train_examples": load_split("train", ensure_data(True).data_dir, limit=512)}
    for source in (pipeline, next(c for c in code if c.startswith("import time\n\ndef pass_rates")),
                   next(c for c in code if c.startswith("reads = tf.Variable"))):
        exec(compile(source, "02 cell", "exec"), namespace)
    measured = {k: namespace[k] for k in ("reads_in_3_passes", "examples_in_split")}
    holds_unless(match, run_proof, "02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], **measured})


_EMPTY_BATCH_RUN = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np
namespace = {"tf": tf, "keras": keras, "np": np, "print": lambda *a, **k: None,
             "strategy": tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])}
for source in json.load(sys.stdin):
    exec(compile(source, "02 cell", "exec"), namespace)
keys = ("last_split", "empty_loss", "gamma_nan", "control_gamma_nan", "conv_shape", "cnn_evaluate", "cnn_fit", "cnn_gamma_nan", "cnn_control")
print("MEASURED " + json.dumps({k: namespace[k] for k in keys}, default=bool))
"""


@pytest.mark.parametrize("environ,change,match", [
    ({"TF_ENABLE_ONEDNN_OPTS": "0"}, None, None),
    ({}, ("keras.layers.BatchNormalization()", "keras.layers.BatchNormalization(synchronized=True)"),
     "gamma NaN on every replica")],
    ids=["without oneDNN", "synchronized batch norm"])
def test_lesson_02_empty_replica_batch_cells_on_two_replicas(environ, change, match):
    """Lesson 02's two empty-replica-batch cells, run for real on 2 logical CPUs in a fresh process: without
    oneDNN the convolution's shape is right, the CNN's evaluate runs and its fit goes on with NaN, and the
    proof holds there too (the nbval pass runs them with oneDNN, where both stop); with the small model's
    batch normalisation synchronized (it counts every replica's examples) gamma stays finite, and the proof
    must fail."""
    import json
    import subprocess
    import sys

    code = code_cells("02_input_pipelines.ipynb")
    cells = [next(c for c in code if c.startswith("nine = ")), next(c for c in code if c.startswith("import re\n"))]
    if change is not None:
        assert change[0] in cells[0]
        cells[0] = cells[0].replace(*change)
    done = subprocess.run([sys.executable, "-c", _EMPTY_BATCH_RUN], input=json.dumps(cells), capture_output=True,
                          text=True, timeout=300, env={**os.environ, **environ}, cwd=NOTEBOOKS.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(next(l[9:] for l in done.stdout.splitlines() if l.startswith("MEASURED ")))
    assert measured["cnn_control"] == "ran", measured  # whole batches go through, oneDNN or not
    if environ:
        assert measured["conv_shape"] == [0, 32, 32, 32] and measured["cnn_evaluate"] == "ran", measured
        assert measured["cnn_fit"] == "ran" and measured["cnn_gamma_nan"], measured  # fit goes on, with NaN
    holds_unless(match, run_proof, "02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], **measured})


@pytest.mark.multiprocess
def test_lesson_02_worker_program_without_cache_and_with_a_file_per_worker_fails_the_proof(tmp_path):
    """Lesson 02's worker program, run as 2 real workers with its `.cache()` taken out (the second
    pass maps every example again), its one file listed twice (FILE sharding, and AUTO, then have
    a file per worker, so no worker raises and worker 1 reads the records of its own) and dataset_fn's
    read counted after the shard instead of before it (each worker reads only its half): each of these
    measured reports must fail its line of the proof (review items 20 and 21, third review P1 and P6;
    the program as written runs in the lesson itself, under nbval)."""
    import json

    from helpers.local_workers import run_local_workers

    program = next(c for c in code_cells("02_input_pipelines.ipynb") if c.startswith("%%writefile")).split("\n", 1)[1]
    shard = ".shard(input_context.num_input_pipelines, input_context.input_pipeline_id)"
    for old, new in ((".map(counted(mapped)).cache()", ".map(counted(mapped))"),
                     ("TFRecordDataset([one_file])", "TFRecordDataset([one_file] * 2)"),
                     (f"ids.map(counted(read)){shard}", f"ids{shard}.map(counted(read))")):
        assert old in program
        program = program.replace(old, new)
    (tmp_path / "worker.py").write_text(program)
    outcomes = run_local_workers([str(tmp_path / "worker.py")], n=2, deadline_s=240)
    assert all(o.returncode == 0 for o in outcomes), [o.output[-2000:] for o in outcomes]
    seen = {o.rank: next(json.loads(l[7:]) for l in o.output.splitlines() if l.startswith("REPORT ")) for o in outcomes}
    assert all(seen[r][f"{policy}, 1 file"] == "no error" for r in seen for policy in ("FILE", "AUTO")), seen
    for key, match in (("mapped in 2 passes, DATA", "every example on every worker"),
                       ("mapped in 2 passes, dataset_fn", "only its half"), ("FILE, 1 file", "on worker 0 only"),
                       ("AUTO, 1 file", "AUTO with 1 file should raise"),
                       ("records read, FILE", "worker 1 should get an empty shard"),
                       ("read before the shard, dataset_fn", "read every id before its shard")):
        broken = lesson_02_seen({r: {key: seen[r][key]} for r in seen})
        with pytest.raises(AssertionError, match=match):
            run_proof("02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], "seen": broken})


@pytest.mark.parametrize("change,match", [
    (None, None),
    (("examples = examples.take(count - count % global_batch)", "pass"), "training: each of"),  # no cut
    # the cut only where the count is known (as before: `if count > 0`): the filtered 95 give 2 workers 6 and 5 batches
    (("    else:  # size unknown (after a filter, say): the same cut, as the examples are read\n"
      "        examples = examples.batch(global_batch, drop_remainder=True).unbatch()\n", ""), "training, size unknown: each of"),
    (("take(-count % global_batch)", "take(-count % (global_batch // 2))"), "evaluation: each of 1 worker"),
    # as before the fourth review: an endless dataset accepted, its cut never made and its cache growing without end
    (("    refuse_endless(count, \"training_dataset\")\n", ""), "refuse an endless dataset"),
    # evaluation accepting it would count it forever: the count bounded here so that the test ends
    (("    refuse_endless(count, \"evaluation_dataset\")\n", "    examples = examples.take(1000)\n"),
     "refuse an endless dataset")],
    ids=["as written", "training without its cut", "training cut only where the count is known",
         "evaluation padded to per-replica batches", "training accepts an endless dataset",
         "evaluation accepts an endless dataset"])
def test_lesson_02_pipelines_give_every_worker_the_same_whole_steps(change, match):
    """Issue 54: lesson 02's two pipelines and its check cell, run in this process: as written every worker gets
    the same number of per-replica batches, two per step; training_dataset without its cut to whole global
    batches (95 examples: 6 and 5 batches on 2 workers), or with it only where TensorFlow knows the count (the
    cell's 95 come through a filter too, cardinality -2), or the evaluation padded to whole per-replica batches
    only (13 on one worker of two replicas, the last step leaving one replica empty), must fail the proof."""
    import tensorflow as tf

    code = code_cells("02_input_pipelines.ipynb")
    cells = [next(c for c in code if c.startswith(s))
             for s in ("from helpers.errors import CourseError", "def evaluation_dataset(", "numbered = ", "endless = {}")]
    if change is not None:
        k = next(i for i, c in enumerate(cells) if change[0] in c)
        cells[k] = cells[k].replace(*change)
    namespace = {"tf": tf, "print": lambda *a, **k: None}
    for source in cells:
        exec(compile(source, "02 cell", "exec"), namespace)
    measured = {k: namespace[k] for k in ("counted_once", "batches_per_worker", "endless")}
    holds_unless(match, run_proof, "02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], **measured})


def test_lesson_02_course_pipelines_refuse_an_endless_dataset():
    """Fourth review, finding 1: helpers.lesson's pipelines, which later notebooks and the batch program import,
    refuse an endless dataset before reading it (training_dataset cached it without end, evaluation_dataset counted
    it forever) and still take a finite one of unknown size."""
    import tensorflow as tf

    from helpers import lesson
    from helpers.errors import CourseError

    numbered = tf.data.Dataset.range(10).map(lambda i: (tf.zeros((32, 32, 3), tf.uint8), i))
    for pipeline in (lesson.training_dataset, lesson.evaluation_dataset):
        with pytest.raises(CourseError, match=f"^{pipeline.__name__} needs a finite dataset, and this one never ends"):
            pipeline(numbered.repeat(), 4)
        assert sum(1 for _ in pipeline(numbered.filter(lambda image, i: True), 4)) > 0


def test_lesson_02_proof_on_one_replica_says_nothing_of_replicas(capsys):
    """Issue 54: with one replica the replicas' shares are the whole batch by construction: the proof must not
    say replicas get disjoint examples there (it did), only NOT CHECKED."""
    one = {"per_replica": [list(range(8))], "from_fn_per_replica": [list(range(8))], "last_split": [1]}
    run_proof("02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], **one})
    out = capsys.readouterr().out
    assert "NOT CHECKED (one replica)" in out and "replicas and workers" not in out, out


_TOPS = r"^\[\d+(, \d+){9}\]$"  # solution 2's assert on the first batches' largest numbers, under ten seeds


@pytest.mark.parametrize("number,change,match", [
    (1, None, None), (2, None, None), (3, None, None),
    (1, (".shard(2, 0).batch(4).as_numpy_iterator()", ".batch(4).shard(2, 0).as_numpy_iterator()"), "^$"),
    (2, (".batch(8).shuffle(8, seed=1)", ".batch(8)"), "^$"),  # the buggy pipeline not shuffling at all
    (2, (".shuffle(64, seed=seed).batch(8)", ".shuffle(8, seed=seed).batch(8)"), _TOPS),  # a fix with too small a buffer
    # half the data in the buffer (the first batch reached 35, which the old `>= 32` let through), or 50 of 64
    (2, (".shuffle(64, seed=seed).batch(8)", ".shuffle(32, seed=seed).batch(8)"), _TOPS),
    (2, (".shuffle(64, seed=seed).batch(8)", ".shuffle(50, seed=seed).batch(8)"), _TOPS),
    (3, ("seed=seeds[rank]", "seed=42"), "^$"),  # every worker the same seed: nothing seen twice to show
    # the workers' own global seeds never set: seed=42 then gives both the same order, nothing overlaps
    (3, ("tf.random.set_seed(global_seeds[rank])", "tf.random.set_seed(42)"), "^$"),
    # training_dataset's shuffle before the shard (as DATA does): the workers' own global seeds overlap the shares
    (3, ("lesson.training_dataset(ids, 16, context)", "lesson.training_dataset(ids, 16).unbatch().shard(2, rank).batch(8)"),
     r"^\[")],
    ids=["1", "2", "3", "1 shard after batch", "2 buggy not shuffled", "2 small buffer", "2 half buffer",
         "2 buffer of 50", "3 one seed",
         "3 global seeds ignored", "3 training_dataset shuffling before its shard"])
def test_lesson_02_solutions_fail_when_their_answer_is_wrong(number, change, match):
    """Issue 54: each of lesson 02's solutions, as written and with its answer made wrong."""
    import tensorflow as tf

    source = solution_source("02_input_pipelines.ipynb", number)
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    holds_unless(match, exec, compile(source, f"02 solution {number}", "exec"), {"tf": tf, "print": lambda *a, **k: None})
