"""MultiWorkerMirroredStrategy across 2 local processes (hard-kill deadline on each run)."""

import pytest

from helpers.launch import run_local_workers
from helpers.train import parse_result_lines

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


def test_keras_fit_fails_without_the_fix(prepared_dir):
    """keras-team/keras#20585: if this starts passing, Keras fixed it; narrow keras_fix.AFFECTED."""
    from helpers.keras_fix import keras_needs_fix

    if not keras_needs_fix():
        pytest.skip("this Keras version is outside keras_fix.AFFECTED")
    outcomes = run_local_workers(TRAIN + ["--loop", "fit", "--data-dir", str(prepared_dir)], 2,
                                 deadline_s=240, env={**__import__("os").environ,
                                                      "COURSE_DISABLE_KERAS_FIX": "1"})
    assert any(o.returncode not in (0, None) for o in outcomes)
    text = "".join(o.output for o in outcomes)
    assert "PerReplica" in text and "unsupported type" in text


def test_a_failing_worker_takes_the_others_down_fast():
    """A worker whose peer dies would wait for ever: the launcher kills it."""
    import time

    started = time.monotonic()
    outcomes = run_local_workers(["-c", "import os, sys, time\n"
                                  "if os.environ['TF_CONFIG'].endswith('0}}'): sys.exit(3)\n"
                                  "time.sleep(600)"], 2, deadline_s=60)
    assert outcomes[0].returncode == 3 and outcomes[1].returncode is None
    assert time.monotonic() - started < 30
