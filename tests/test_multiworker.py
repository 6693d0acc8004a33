"""MultiWorkerMirroredStrategy across 2 local processes (hard-kill deadline on each run)."""

import pytest

from helpers.local_workers import run_local_workers
from helpers.results import parse_result_lines

pytestmark = pytest.mark.multiprocess
TRAIN = ["-m", "helpers", "train", "--mode", "quick", "--epochs", "1", "--steps-per-epoch", "3",
         "--train-examples", "256"]


def _results(outcomes):
    for outcome in outcomes:
        assert outcome.returncode == 0, f"rank {outcome.rank}:\n{outcome.output[-4000:]}"
    return [parse_result_lines(o.output)[-1] for o in outcomes]


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_two_workers_end_with_identical_weights(loop, prepared_dir):
    outcomes = run_local_workers(TRAIN + ["--loop", loop, "--data-dir", str(prepared_dir)], 2,
                                 deadline_s=240)
    first, second = _results(outcomes)
    assert first["strategy"] == "MultiWorkerMirroredStrategy" and first["workers"] == 2
    assert {first["rank"], second["rank"]} == {0, 1}
    assert first["weights"] == second["weights"]
    assert first["steps"] == second["steps"] == 3
    # every one of the 100 test images counted once (padded to whole global batches, weight 0)
    assert first["test_examples"] == second["test_examples"] == 100
    shown = "".join(o.output for o in outcomes)
    assert "oneDNN custom operations" not in shown and "absl::InitializeLog" not in shown, shown[-2000:]


def test_keras_fit_fails_without_the_fix(prepared_dir):
    """keras-team/keras#20585 on the verified Keras (keras_fix.VERIFIED; any other stops loudly):
    if this starts passing, Keras fixed it."""
    from helpers.keras_fix import keras_needs_fix

    assert keras_needs_fix()
    outcomes = run_local_workers(TRAIN + ["--loop", "fit", "--data-dir", str(prepared_dir)], 2,
                                 deadline_s=240, env={**__import__("os").environ,
                                                      "COURSE_DISABLE_KERAS_FIX": "1"})
    assert any(o.returncode not in (0, None) for o in outcomes)
    text = "".join(o.output for o in outcomes)
    assert "PerReplica" in text and "unsupported type" in text


def test_a_failing_worker_takes_the_others_down_fast():
    """A worker whose peer dies would wait for ever: the launcher kills it because of the
    failure, not at the (60 s) deadline."""
    outcomes = run_local_workers(["-c", "import os, sys, time\n"
                                  "if os.environ['TF_CONFIG'].endswith('0}}'): sys.exit(3)\n"
                                  "time.sleep(600)"], 2, deadline_s=60)
    assert outcomes[0].returncode == 3 and outcomes[0].killed_because is None
    assert outcomes[1].returncode is None and outcomes[1].killed_because == "rank 0 failed"



def test_an_agreed_status_is_not_a_failure():
    """Notebook 11's workers all exit with 3 (saved, requeue me) at one checkpoint: the first to
    exit must not get the others killed before they write their own last line."""
    outcomes = run_local_workers(["-c", "import os, sys, time\n"
                                  "rank = int(os.environ['TF_CONFIG'][-3])\n"
                                  "time.sleep(2 * rank)\n"
                                  "print(f'rank {rank} stopped', flush=True)\n"
                                  "sys.exit(3)"], 2, deadline_s=60, ok_statuses=(0, 3))
    assert [o.returncode for o in outcomes] == [3, 3] and not any(o.killed_because for o in outcomes)
    assert [o.output.strip() for o in outcomes] == ["rank 0 stopped", "rank 1 stopped"]


EVALUATE_REPEATEDLY = """
import sys
from helpers.strategy import make_strategy
strategy = make_strategy("multiworker")
import tensorflow as tf
from helpers.data import load_split
from helpers.lesson import compile_model, normalize, small_cnn

def cached(split, limit, training):  # a plain cached pipeline, auto-sharded by DATA (the bug's setting)
    ds = load_split(split, sys.argv[1], limit=limit).map(normalize).cache()
    if training:
        ds = ds.shuffle(10_000, seed=42)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.batch(64, drop_remainder=True).prefetch(tf.data.AUTOTUNE).with_options(options)

with strategy.scope():
    model = compile_model(small_cnn(), 0.01)
model.fit(cached("train", 256, True), verbose=0)
for i in range(int(sys.argv[2])):
    model.evaluate(cached("test", 512, False), verbose=0)
    print("evaluated", i, flush=True)
"""


def test_repeated_evaluate_on_cached_data():
    """Keras's model build used to read one batch and drop the iterator; with a cached
    pipeline that sometimes truncated one worker's data (an empty batch there, a hang on the
    other: 3 of 3 runs failed within 40 evaluations before helpers.keras_fix built from the
    element spec instead)."""
    import os

    from helpers.data import ensure_data

    quick_data = ensure_data(quick=True).data_dir  # 512 test images: 8 batches, as notebook 03
    outcomes = run_local_workers(["-c", EVALUATE_REPEATEDLY, str(quick_data), "40"], 2, deadline_s=300,
                                 env={**os.environ, "COURSE_COLLECTIVE_TIMEOUT": "20"})
    for outcome in outcomes:
        assert outcome.returncode == 0, f"rank {outcome.rank}:\n{outcome.output[-3000:]}"
        assert outcome.output.count("evaluated") == 40


def test_collective_timeout_is_read_when_the_strategy_is_made():
    """COURSE_COLLECTIVE_TIMEOUT reaches the strategy's collectives; a bad value is one clear line."""
    import json

    from helpers.errors import CourseError
    from helpers.strategy import collective_timeout
    from tests.conftest import run_python

    code = ("import os; from helpers.strategy import make_strategy\n"
            "os.environ['COURSE_COLLECTIVE_TIMEOUT'] = '42'  # set after import: still counts\n"
            "s = make_strategy('multiworker')\n"
            "print('TIMEOUT', s.extended._communication_options.timeout_seconds)")
    config = json.dumps({"cluster": {"worker": ["localhost:0"]}, "task": {"type": "worker", "index": 0}})
    from helpers.resolver import free_port

    config = config.replace("localhost:0", f"localhost:{free_port()}")
    done = run_python(code, env={"TF_CONFIG": config, "COURSE_COLLECTIVE_TIMEOUT": "bad"})
    assert "TIMEOUT 42.0" in done.stdout, done.stdout + done.stderr[-2000:]
    import os

    os.environ["COURSE_COLLECTIVE_TIMEOUT"] = "soon"
    try:
        with pytest.raises(CourseError, match="COURSE_COLLECTIVE_TIMEOUT='soon' must be a number of seconds"):
            collective_timeout()
    finally:
        del os.environ["COURSE_COLLECTIVE_TIMEOUT"]
    assert collective_timeout() == 300.0


CHIEF_ONLY_SAVE = """
import sys, time
from helpers.strategy import make_strategy
strategy = make_strategy("multiworker")
import numpy as np
import tensorflow as tf
from helpers.lesson import compile_model, small_cnn, weights_digest

chief = strategy.cluster_resolver.task_id == 0
rng = np.random.default_rng(0)
x, y = rng.random((128, 32, 32, 3), dtype=np.float32), rng.integers(0, 10, 128)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat().with_options(options)
with strategy.scope():  # lesson 15's model: synchronized batch normalisation
    model = compile_model(small_cnn(synchronized=True), 0.01)
model.fit(data, epochs=1, steps_per_epoch=2, verbose=0)
print("variables", sorted({type(v.value).__name__ for v in model.variables}), flush=True)
if chief:  # the chief alone saves: a collective in it would wait here for the other worker
    began = time.perf_counter()
    model.save(sys.argv[1])
    print(f"saved in {time.perf_counter() - began:.2f} s", flush=True)
model.fit(data, epochs=1, steps_per_epoch=2, verbose=0)  # the next all-reduces, on both workers
print("second fit done", weights_digest(model, trainable_only=False), flush=True)
"""


def test_a_chief_only_save_lets_the_next_all_reduce_through(tmp_path):
    """Lesson 15's claim: with Keras 3.15 and a `.keras` file, a save on the chief alone runs no
    collective (every variable of the synchronized-BN CNN is mirrored on write), so the other worker
    is not left waiting, and the next `fit` finishes on both with identical weights."""
    import os

    path = tmp_path / "chief.keras"
    outcomes = run_local_workers(["-c", CHIEF_ONLY_SAVE, str(path)], 2, deadline_s=240,
                                 env={**os.environ, "COURSE_COLLECTIVE_TIMEOUT": "30"})
    for outcome in outcomes:
        assert outcome.returncode == 0, f"rank {outcome.rank}:\n{outcome.output[-3000:]}"
    digests = [line.split()[-1] for o in outcomes for line in o.output.splitlines() if line.startswith("second fit done")]
    assert len(digests) == 2 and digests[0] == digests[1], [o.output[-2000:] for o in outcomes]
    assert "saved in" in outcomes[0].output and "saved in" not in outcomes[1].output
    assert path.exists()
    assert all("variables ['MirroredVariable']" in o.output for o in outcomes), [o.output[-2000:] for o in outcomes]
