"""Lesson 10's proof cell (notebooks/10_large_batches.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

import math
import re
from types import SimpleNamespace

import pytest

from tests.support.proof_cases import LESSON_10_RUNS, OK
from tests.support.proof_cells import (
    NOTEBOOKS, cell_defining, gather_and_prove, holds_unless, proof_source, run_edited_to_its_proof, run_proof,
    solution_source,
)


def test_lesson_10_passes_where_linear_scaling_ends_below_the_small_batch():
    """Full mode at 50,000 images with COURSE_EPOCHS=2 (issue 42): linear scaling with warm-up ended
    below the small batch (0.0035 vs 0.0088; unscaled 0.28), as Goyal et al. allow (they report it
    matches): the old proof, 'between the small and the unscaled large batch', failed on it."""
    ended_below = {**OK["10_large_batches.ipynb"]["final"], "batch 32": 0.0088, "batch 512, same rate": 0.28,
                   "batch 512, linear + warm-up": 0.0035}
    run_proof("10_large_batches.ipynb", {"math": math, **OK["10_large_batches.ipynb"], "final": ended_below})


def _running(steps: list, per_epoch: int) -> list:
    """What Keras logs after every step: each epoch's running mean of the step losses so far."""
    epochs = [steps[i:i + per_epoch] for i in range(0, len(steps), per_epoch)]
    return [[sum(epoch[:k + 1]) / (k + 1) for k in range(len(epoch))] for epoch in epochs]


_WARM = [3.2, 2.4, 2.0, 1.8, 1.6, 1.5] + [1.0] * 3 + [0.8] * 3  # the warm-up's 4 steps and the next: mean 2.2
_NO_WARM = [3.2, 2.0, 3.5, 1.8, 1.6, 1.3] + [1.0] * 6  # step 3 above the start, the running mean never; mean 2.42


@pytest.mark.parametrize("no_warm,warm,match", [
    (_NO_WARM, _WARM, None),
    ([3.2, 2.0, 1.5, 1.4, 1.3, 1.2] + [1.0] * 6, _WARM, "starting weights' loss"),
    # a rise in epoch 2, after the warm-up's 4 steps and the next: not warm-up's absence
    ([3.2, 3.1, 3.0, 2.9, 2.8, 2.7, 1.0, 1.0, 3.9, 1.0, 1.0, 1.0], _WARM, "starting weights' loss"),
    (_NO_WARM, [3.2, 2.4, 3.3, 1.8, 1.6, 1.5] + [1.0] * 3 + [0.8] * 3, "with warm-up steps 2 to")],
    ids=["as trained", "no rise", "rise after the window", "warm-up rises"])
def test_lesson_10_gathering_cell_derives_each_steps_loss_from_the_running_means(no_warm, warm, match):
    """From the running means Keras logs (reset every epoch of 6 steps): each step's own loss (the cell before
    the lesson's claims), which rises above the start where the logged mean does not, and each
    run's final loss (the gathering cell), the mean of its last quarter of steps (the small batch's 0.7, the unscaled 1.5,
    linear scaling with warm-up 0.8: an eighth of the gap left)."""
    ok = OK["10_large_batches.ipynb"]
    others = {name: _running([3.2, 2.5, 2.2] + [1.5] * 9, 6) for name in LESSON_10_RUNS}
    others["batch 32"] = _running([3.2, 2.5, 2.2] + [1.5] * 6 + [0.7] * 3, 6)
    raw = {**{k: v for k, v in ok.items() if k not in ("step_loss", "frozen_loss", "mark", "frozen_mark")}, "warmup_steps": 4,
           "frozen_means": _running([3.2] * 5, 5),  # the starting weights' loss on the window's 5 batches
           "marks": {name: _running([2.2, 2.3, 2.1] * 4, 6) for name in LESSON_10_RUNS},  # every run's batches' marks
           "frozen_marks": _running([2.2, 2.3, 2.1, 2.2, 2.3], 5),  # the same batches' marks, read by the yardstick
           "running": {**others, "batch 512, linear, no warm-up": _running(no_warm, 6),
                       "batch 512, linear + warm-up": _running(warm, 6)}}
    assert max(m for epoch in raw["running"]["batch 512, linear, no warm-up"] for m in epoch) <= 3.2 or match
    exec(compile(cell_defining("10_large_batches.ipynb", "def own_losses"), "10 own losses", "exec"), raw)
    holds_unless(match, gather_and_prove, "10_large_batches.ipynb", raw)


@pytest.mark.parametrize("rate,match", [("0.0", None), ("1e-6", "should never move")], ids=["rate 0", "rate 1e-6"])
def test_lesson_10_proof_fails_when_the_run_at_learning_rate_0_moves(rate, match):
    """The lesson's own cells for the run at learning rate 0 (built, then stepped), for real, on 64 random images
    in global batches of 16 (2 warm-up steps and the next, stopped in the first of 2 epochs of 4) under the default
    strategy: at a rate of 1e-6 instead of 0 its weights move, if little (fourth review: the lesson said they never
    move and nothing checked it), and the proof must say so; at 0 none moves."""
    import keras
    import numpy as np
    import tensorflow as tf

    from helpers.lesson import small_cnn, training_dataset

    build = cell_defining("10_large_batches.ipynb", "frozen = small_cnn()")
    assert build.count("CosineDecay(0.0,") == 1
    images = np.random.default_rng(0).integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
    labels = np.random.default_rng(1).integers(0, 10, 64)
    namespace = {"keras": keras, "small_cnn": small_cnn, "training_dataset": training_dataset, "large": 16,
                 "epochs": 2, "per_epoch": 64,  # the runs' 2 epochs of 4 steps, which the yardstick's fit takes too
                 "strategy": tf.distribute.get_strategy(), "warmup_steps_of": lambda batch: 2,
                 "examples": tf.data.Dataset.from_tensor_slices((images, labels)), "print": lambda *a, **k: None}
    cells = (cell_defining("10_large_batches.ipynb", "class StepLog"), build.replace("CosineDecay(0.0,", f"CosineDecay({rate},"),
             cell_defining("10_large_batches.ipynb", "frozen_moved = "))  # the callback, the run built, its steps
    for source in cells:
        exec(compile(source, "10 frozen", "exec"), namespace)
    assert [len(m) for m in namespace["frozen_means"]] == [3]  # its 3 steps, all taken, then stopped mid-epoch
    holds_unless(match, run_proof, "10_large_batches.ipynb", {**OK["10_large_batches.ipynb"],
                                                              "frozen_moved": namespace["frozen_moved"]})


def _schedules_measured(decay_steps: str = "steps - warmup_steps", alpha: float | str = 0.0, epochs: int = 4,
                        per_epoch: int = 4096, warmup_fraction: float = 0.25, linear_decay: bool = False) -> dict:
    """Lesson 10's own schedules (its cells, `decay_steps` and `alpha` as given, either an expression of the schedule
    cell's names; or a linear decay after the warm-up), stepped as its optimizers step them, then its rates and curve
    cells: what the proof reads of them."""
    import keras
    import numpy as np

    source = "\n".join(cell_defining("10_large_batches.ipynb", m) for m in ("def run_steps", "def schedule(", "runs = {"))
    assert "decay_steps=steps - warmup_steps," in source
    source = source.replace("decay_steps=steps - warmup_steps,", f"decay_steps={decay_steps}, alpha={alpha},")
    namespace = {"keras": keras, "SMALL": 32, "FACTOR": 16, "epochs": epochs, "per_epoch": per_epoch, "base_lr": 0.025,
                 "large": 512, "sizes": SimpleNamespace(warmup_fraction=warmup_fraction), "print": lambda *a, **k: None}
    exec(compile(source, "10", "exec"), namespace)
    rate_log, last_rate, iterations = {}, {}, {}
    for name, (batch, rule, warmup) in namespace["runs"].items():
        schedule, steps = namespace["schedule"](batch, rule, warmup), namespace["run_steps"](batch)
        ramp = namespace["warmup_steps_of"](batch) if warmup else 0
        if warmup:  # what the optimizer takes before each step (CosineDecay's warm-up takes one step at a time)
            rates = [float(schedule(step)) for step in range(steps + 1)]
        else:  # the same float32 values, all steps at once (46,560 of the small batch at full size)
            rates = [float(r) for r in np.asarray(schedule(np.arange(steps + 1)))]
        if linear_decay:
            rates = rates[:ramp] + [rates[ramp] * (1 - (s - ramp) / (steps - ramp)) for s in range(ramp, steps + 1)]
        rate_log[name], last_rate[name], iterations[name] = rates[:steps], rates[steps], steps
    namespace.update(rate_log=rate_log, last_rate=last_rate, iterations=iterations)
    for marker in ("def ramp_of", "def curve("):  # the rates cell, then the curve cell
        exec(compile(cell_defining("10_large_batches.ipynb", marker), f"10 {marker}", "exec"), namespace)
    return {k: namespace[k] for k in ("first_rate", "peak_rate", "last_rate", "iterations", "shape_gap", "epochs",
                                      "per_epoch")}  # the window's W stays the planted losses' own (6)


@pytest.mark.parametrize("changes,match", [
    ({}, None),
    ({"decay_steps": "(steps - warmup_steps) * 12 // 20"}, "linear warm-up, then a cosine"),
    ({"decay_steps": "steps - warmup_steps - 1"}, "linear warm-up, then a cosine"),
    ({"decay_steps": "steps - warmup_steps + 1"}, "decayed to 0"),
    # full mode's 30 epochs of 49,664 images: every cosine a step late ends under 1e-6 of its peak, about 0.58 of its run's
    # largest cosine step off the curve; the small batch's alone ends at 0.0 in float32, 0.58 of its step (1.96e-5 of
    # its peak) off it
    ({"decay_steps": "steps - warmup_steps + 1", "epochs": 30, "per_epoch": 49664, "warmup_fraction": 0.1},
     "linear warm-up, then a cosine"),
    ({"decay_steps": "steps - warmup_steps + (batch == SMALL)", "epochs": 30, "per_epoch": 49664, "warmup_fraction": 0.1},
     "linear warm-up, then a cosine"),
    # sixth review, finding 2: COURSE_EPOCHS=60 in full mode, the small batch's 93,120 updates; its cosine a step early
    # was under 1e-5 of the peak off the curve, the old bound
    ({"decay_steps": "steps - warmup_steps - (batch == SMALL)", "epochs": 60, "per_epoch": 49664, "warmup_fraction": 0.1},
     "linear warm-up, then a cosine"),
    ({"alpha": 1e-5}, "decayed to 0"), ({"alpha": 5e-6}, "decayed to 0"),
    # seventh review, finding 1: the lesson says alpha above 1e-6 fails (at exactly 1e-6 float32 lets the peak of 0.025
    # end at 2.5000000292e-08, under the bound's 2.5000000373e-08, and it passes)
    ({"alpha": 1.01e-6}, "decayed to 0"),
    # sixth review, finding 1: alpha on the unscaled runs only, their last rate 5e-6 x 0.025 = 1.25e-7 (under the old 1e-6)
    ({"alpha": "5e-6 if rule == 'none' else 0.0"}, "decayed to 0"),
    ({"linear_decay": True}, "linear warm-up, then a cosine")],
    ids=["to the run's end", "0 at 12 of 20", "0 a step early", "0 a step late", "0 a step late, full size",
         "the small batch's 0 a step late, full size", "the small batch's 0 a step early, 60 epochs of full size",
         "alpha 1e-5", "alpha 5e-6", "alpha 1.01e-6", "alpha 5e-6, unscaled runs only", "linear decay"])
def test_lesson_10_proof_fails_when_a_schedule_is_not_a_cosine_to_0_at_its_run_s_end(changes, match):
    """Lesson 10's own schedules, stepped as its optimizers step them (quick mode: 4 epochs of 4,096 examples,
    512 and 32 updates), then its rates cells and its proof. A cosine that reaches 0 before the run's last update
    (CosineDecay clamps the step at decay_steps, so the rate then stays 0) reads 0 after the last update all the
    same, as a cosine that ends a step late at full size nearly does, and a linear decay is at half its peak halfway
    and 0 at the end too: every step's rate against the curve must tell them (review 2 and the third review, which
    found the halfway check this replaced caught nothing the curve did not)."""
    measured = _schedules_measured(**changes)
    holds_unless(match, run_proof, "10_large_batches.ipynb", {**OK["10_large_batches.ipynb"], **measured})


@pytest.mark.fullcheck  # the whole lesson once more (about 4 min under load): with `make fullcheck`'s 3-replica runs
def test_lesson_10_runs_on_3_replicas(tmp_path, monkeypatch):
    """Fifth review, finding 1: lesson 10 at CPU_REPLICAS = 3, quick mode, run for real up to its proof. SMALL = 32
    does not split evenly over 3 replicas (11, 11 and 10 images), and Keras 3.15 builds the model from the replicas'
    first shares averaged element by element (`strategy.reduce("MEAN", ..., axis=None)` in
    `_maybe_symbolic_build`, keras/src/backend/tensorflow/trainer.py): the first `fit` failed there. The lesson
    now rounds SMALL up to a multiple of the replicas, says so, and its proof holds."""
    import nbformat

    monkeypatch.setenv("COURSE_MODE", "quick")
    status, detail = run_edited_to_its_proof("10_large_batches.ipynb", "CPU_REPLICAS = 2", "CPU_REPLICAS = 3",
                                             "left < gap / 4", tmp_path, monkeypatch, timeout=900)
    assert status == "ok", detail
    ran = nbformat.read(tmp_path / "out" / "10_large_batches.ipynb", as_version=4)
    shown = "".join(o.get("text", "") for c in ran.cells if c.cell_type == "code" for o in c.outputs)
    assert "rounded up to 33" in shown and "global batches 33 and 528" in shown, shown[-3000:]


def test_make_fullcheck_runs_lesson_10_on_3_replicas():
    """Fifth review, finding 1: `make fullcheck` runs lesson 10 at CPU_REPLICAS = 3 too, a count 32 does not divide."""
    from helpers.commands.fullcheck import shapes_of

    assert {"CPU_REPLICAS": 3} in shapes_of(NOTEBOOKS / "10_large_batches.ipynb")
    assert {"CPU_REPLICAS": 3} not in shapes_of(NOTEBOOKS / "12_strategy_tour.ipynb")  # lesson 10's case only


def _anew_each_epoch(monkeypatch) -> None:
    """Keras as if its `fit` made a new iterator over the dataset every epoch (Keras 3.15 keeps one across epochs when
    `steps_per_epoch` is given: `EpochIterator._enumerate_iterator`, keras/src/trainers/epoch_iterator.py)."""
    from keras.src.trainers import epoch_iterator

    keeping = epoch_iterator.EpochIterator._enumerate_iterator

    def anew(self):
        self._current_iterator = None
        return keeping(self)

    monkeypatch.setattr(epoch_iterator.EpochIterator, "_enumerate_iterator", anew)


_SKIPPING = "(lambda d: d.take(1).concatenate(d.skip(2)))(training_dataset(examples, large).repeat())"  # batch 2 left out
_MARKING = 'keras.ops.sqrt(keras.ops.cast(labels, "float32") + 1.0)'  # batch_mark's own, per example


@pytest.mark.parametrize("anew,skip,constant,match", [
    (False, False, False, None), (True, False, False, None), (False, True, False, "should read the runs' batches"),
    (False, False, True, "should tell batches apart")],
    ids=["Keras 3.15", "a new iterator every epoch", "the yardstick skips the runs' second batch", "a constant batch mark"])
def test_lesson_10_yardstick_loses_what_a_run_s_starting_weights_lose_on_that_run_s_batches(anew, skip, constant, match,
                                                                                            monkeypatch):
    """Fifth review, finding 4: the run at learning rate 0 (the yardstick) must read, at each step of the window
    (steps 1 to W + 1), the batch a run reads at that step. The lesson's own cells, for real, on 64 random images in
    global batches of 16 (4 a pass), under the default strategy: a run at rate 0 (the runs' cell: 3 epochs of 3 steps),
    then the yardstick (its cells), with W = 3, so that the window crosses the end of the runs' first epoch. Their
    step losses must agree. Fitted as one epoch of W + 1 steps, the yardstick read the runs' batches only because
    Keras keeps the iterator across epochs; under a Keras that makes a new one every epoch, it read others (step 4).
    Sixth review, finding 3: the proof compared the first step only; it now compares every step's batch mark (a
    fingerprint of its labels, logged as the loss is) from step 1 to W + 1, and a yardstick that reads the runs'
    first batch, then skips their second, passes the first-loss check and fails the proof. Eighth review, finding 1: a
    batch mark blind to the batch (1 for every example) is equal at every step, so every comparison of marks held;
    the proof now requires the yardstick's marks to span more than one label's change, and this one fails it."""
    import time

    import keras
    import numpy as np
    import tensorflow as tf

    from helpers.lesson import small_cnn, training_dataset

    if anew:
        _anew_each_epoch(monkeypatch)
    images = np.random.default_rng(0).integers(0, 256, (64, 32, 32, 3), dtype=np.uint8)
    labels = np.random.default_rng(1).integers(0, 10, 64)
    namespace = {"keras": keras, "time": time, "small_cnn": small_cnn, "training_dataset": training_dataset,
                 "strategy": tf.distribute.get_strategy(), "large": 16, "epochs": 3, "per_epoch": 48,
                 "warmup_steps_of": lambda batch: 3, "runs": {"rate 0": (16, "none", False)},
                 "schedule": lambda batch, rule, warmup: keras.optimizers.schedules.CosineDecay(0.0, decay_steps=1),
                 "examples": tf.data.Dataset.from_tensor_slices((images, labels)), "print": lambda *a, **k: None}
    for marker in ("class StepLog", "histories, took", "frozen = small_cnn()", "frozen_moved = ", "def own_losses"):
        source = cell_defining("10_large_batches.ipynb", marker)
        if constant and marker == "class StepLog":
            assert source.count(_MARKING) == 1
            source = source.replace(_MARKING, f"keras.ops.ones_like({_MARKING})")
        if skip and marker == "frozen_moved = ":
            assert source.count("training_dataset(examples, large).repeat()") == 1
            source = source.replace("training_dataset(examples, large).repeat()", _SKIPPING)
        exec(compile(source, f"10 {marker}", "exec"), namespace)
    run, yardstick = namespace["step_loss"]["rate 0"][:4], namespace["frozen_loss"]
    assert len(yardstick) == 4, yardstick
    agree = [math.isclose(a, b, rel_tol=1e-5) for a, b in zip(run, yardstick)]
    assert agree[0] and all(agree) != skip, (run, yardstick)  # skipping: the first step agrees, a later one not
    large = [name for name in LESSON_10_RUNS if name != "batch 32"]  # every large run reads the run's batches here
    holds_unless(match, run_proof, "10_large_batches.ipynb", {
        **OK["10_large_batches.ipynb"], "warmup_steps": 3, "frozen_mark": namespace["frozen_mark"],
        "mark": {name: namespace["mark"]["rate 0"] for name in large}})


def _solution_1(schedule=None) -> None:
    """Lesson 10's solution 1 on quick mode's large batch (512, a warm-up of 8 steps), with the lesson's own schedule or
    `schedule`."""
    import keras

    namespace = {"keras": keras, "math": math, "SMALL": 32, "FACTOR": 16, "large": 512, "base_lr": 0.025, "epochs": 4,
                 "per_epoch": 4096, "sizes": SimpleNamespace(warmup_fraction=0.25), "print": lambda *a, **k: None}
    for marker in ("def run_steps", "def schedule("):
        exec(compile(cell_defining("10_large_batches.ipynb", marker), f"10 {marker}", "exec"), namespace)
    assert namespace["warmup_steps_of"](512) == 8
    if schedule:
        namespace["schedule"] = schedule(namespace["schedule"])
    exec(compile(solution_source("10_large_batches.ipynb", 1), "10 solution 1", "exec"), namespace)


def _bowed(schedule):
    """The lesson's schedules with a warm-up of 8 steps bowed: right at its start, middle and end, off its line between."""
    def bowed(batch, rule, warmup):
        straight = schedule(batch, rule, warmup)
        ramp = 8

        def rate(step):
            step = float(step)
            bow = 0.1 * float(straight(ramp)) * math.sin(2 * math.pi * step / ramp) if step < ramp else 0.0
            return float(straight(step)) + bow
        return rate
    return bowed


@pytest.mark.parametrize("bowed", [False, True], ids=["the lesson's schedule", "a warm-up bowed between its ends"])
def test_lesson_10_solution_1_checks_the_whole_warm_up(bowed):
    """Fifth review, finding 5: solution 1 says the warm-up is a straight line from the small batch's rate to the
    peak; it checked the midpoint only, and a warm-up bowed 10 % of the peak off the line between its start, middle
    and end passed."""
    holds_unless("straight line" if bowed else None, _solution_1, _bowed if bowed else None)


_FULL_SIZE = {"epochs": 30, "per_epoch": 49664, "sizes": SimpleNamespace(warmup_fraction=0.1)}  # full mode's own


@pytest.mark.parametrize("edit,late,sizes", [(None, False, {}), (("k = batch / SMALL", "k = FACTOR"), False, {}),
                                             (None, False, _FULL_SIZE), (None, True, _FULL_SIZE)],
                         ids=["the lesson's schedule", "k = FACTOR", "full size", "a step after the warm-up, full size"])
def test_lesson_10_solution_2_asks_the_schedules_at_64x(edit, late, sizes):
    """Seventh review (optional): solution 2 reads the peaks of 64x the small batch from the lesson's schedules; a schedule
    that scales by FACTOR (16) whatever the batch gives 16x and 4x there, and the solution's assert must fail. Eighth
    review, finding 5: its tolerance, 1e-5 of the peak, was no float32 figure and let a wrong reading through: at full
    size (720 updates of 2,048 images, 72 warming up) the rate a step after the warm-up is the peak less
    sin^2(pi / 1296) = 5.9e-6 of it. The schedules compute in float32 (a relative spacing of 2^-23 = 1.2e-7): within
    that is the peak, and that step is not."""
    import keras

    namespace = {"keras": keras, "math": math, "SMALL": 32, "FACTOR": 16, "large": 512, "base_lr": 0.025, "epochs": 4,
                 "per_epoch": 4096, "sizes": SimpleNamespace(warmup_fraction=0.25), "print": lambda *a, **k: None, **sizes}
    for marker in ("def run_steps", "def schedule("):
        source = cell_defining("10_large_batches.ipynb", marker)
        if edit and marker == "def schedule(":
            assert source.count(edit[0]) == 1
            source = source.replace(*edit)
        exec(compile(source, f"10 {marker}", "exec"), namespace)
    solution = solution_source("10_large_batches.ipynb", 2)
    if late:
        assert solution.count("warmup_end = warmup_steps_of(huge)\n") == 1
        solution = solution.replace("warmup_end = warmup_steps_of(huge)\n", "warmup_end = warmup_steps_of(huge) + 1\n")
    if sizes:
        assert (namespace["run_steps"](2048), namespace["warmup_steps_of"](2048)) == (720, 72)
    holds_unless("64x and 8x" if edit or late else None, exec, compile(solution, "10 solution 2", "exec"), namespace)


@pytest.mark.parametrize("ramp,inset", [(8, False), (116, True)], ids=["quick mode: 18 steps", "workshop: 234 steps"])
def test_lesson_10_first_steps_plot_shows_a_one_step_rise_at_workshop_size(ramp, inset):
    """Ninth review, finding 6: in workshop mode (W = 116) the first-steps plot spans 234 steps, and the rise without
    warm-up, step 3 only (+0.12 in the review's uncut run), was one point among them. Where the plot spans more than
    20 steps an inset repeats the first 20, each curve's own points, step 3's rise among them; quick mode's 18 need none."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    losses = [3.2, 3.0, 3.34] + [2.5] * (2 * ramp)  # step 3 above the starting weights' 3.22 on its batch
    names = ("batch 512, linear, no warm-up", "batch 512, linear + warm-up")
    namespace = {"plt": plt, "MaxNLocator": MaxNLocator, "large": 512, "warmup_steps_of": lambda batch: ramp,
                 "step_loss": dict(zip(names, (losses, [3.2] + [2.9] * (2 * ramp + 2)))),
                 "frozen_loss": [3.2, 3.25, 3.22] + [3.2] * (ramp - 2), "dataset": SimpleNamespace(label="planted"),
                 "plots": SimpleNamespace(save=lambda fig, name: None)}
    plt.close("all")
    exec(compile(cell_defining("10_large_batches.ipynb", '"10_first_steps"'), "10 first steps", "exec"), namespace)
    (ax,) = plt.gcf().axes
    insets = ax.child_axes  # what `inset_axes` adds
    assert len(insets) == inset, f"{2 * ramp + 2} steps plotted: {len(insets)} insets"
    if inset:
        shown = [list(line.get_ydata()) for line in insets[0].lines]  # both runs', then the starting weights'
        assert len(shown) == 3 and [len(y) for y in shown] == [20, 20, 20] and shown[0][:3] == losses[:3], shown
        assert insets[0].get_xlim() == (0.5, 20.5), insets[0].get_xlim()
    plt.close("all")


def test_lesson_10_readme_and_instructor_kit_state_the_proof_s_share_of_the_gap():
    """Ninth review, finding 1: README's row 10 and the instructor kit said linear scaling with warm-up leaves 'less
    than half' of the unscaled batch's gap after the proof came to ask for less than a quarter (61b0354)."""
    divisor = re.search(r"left < gap / (\d+)", proof_source("10_large_batches.ipynb")).group(1)
    asked = {"2": "half", "4": "a quarter"}[divisor]
    root = NOTEBOOKS.parent
    row = next(line for line in (root / "README.md").read_text().splitlines() if "notebooks/10_large_batches" in line)
    kit = (root / "docs" / "instructor.md").read_text().split("### 10 ")[1].split("\n### ")[0]
    for where, text in (("README's row 10", row), ("docs/instructor.md, lesson 10", kit)):
        stated = re.findall(r"less than (half|a quarter)", text)
        assert stated == [asked], f"{where} states less than {stated} of the gap; the proof asks for less than {asked}"


_AT_2048 = {"SMALL": 128, "large": 2048, "per_epoch": 16384}  # SMALL = 128: 8 large steps an epoch, 512 small ones
_ONE_LABEL_2048 = (math.sqrt(10) - 3) / 2048  # 7.9e-5: what one changed label of 2,048 moves a batch mark


@pytest.mark.parametrize("frozen_off,run_off,match", [
    (0.0, 0.0, None), (5e-6, -5e-6, None),  # the same batches, exactly and off by float32's rounding (5.1e-6 simulated)
    (_ONE_LABEL_2048, 0.0, "read the runs' batches"), (0.0, _ONE_LABEL_2048, "read the same batches")],
    ids=["same marks", "rounding", "the yardstick one label off", "a run one label off"])
def test_lesson_10_batch_marks_tell_one_label_apart_at_a_large_batch_of_2048(frozen_off, run_off, match):
    """Eleventh review, finding 1: at SMALL = 128 the large batch is 2,048, and one changed label moves its mark by
    (sqrt 10 - 3) / 2,048 = 7.9e-5, under the proof's absolute tolerance of 1e-4: batches one label apart passed for
    the same (DID NOT RAISE on the old proof). The tolerance is now half of what one label moves the large batch's
    mark (4e-5 at 2,048, 1.6e-4 at 512); float32's rounding of a worked-out mark (at most 5.1e-6 at 2,048 in epochs of
    24 steps, simulated with keras.metrics.Mean) stays inside it."""
    ok = OK["10_large_batches.ipynb"]
    frozen = [m + frozen_off * (k == 2) for k, m in enumerate(ok["frozen_mark"])]  # step 3 of the window
    marks = {n: [m + run_off * (k == 30) for k, m in enumerate(ok["mark"][n])] if n.endswith("same rate") else ok["mark"][n]
             for n in ok["mark"]}  # step 31 of the unscaled run
    holds_unless(match, run_proof, "10_large_batches.ipynb", {"math": math, **ok, **_AT_2048, "frozen_mark": frozen,
                                                              "mark": marks})


@pytest.mark.parametrize("small,replicas,count,refused", [
    (32, 2, 2048, None), (64, 2, 2048, None), (64, 4, 2048, None), (128, 2, 50000, None),
    (65, 2, 2048, "fewer than 2 whole batches of 1056: .* set SMALL to 64 or less"),  # rounded up to 66
    (128, 2, 2048, "fewer than 2 whole batches of 2048: .* set SMALL to 64 or less"),  # the whole quick split
    (128, 3, 2048, "fewer than 2 whole batches of 2064: .* set SMALL to 63 or less")],  # rounded up to 129
    ids=["32", "64", "64 on 4 replicas", "128 on 50,000", "65", "128", "128 on 3 replicas"])
def test_lesson_10_refuses_a_large_batch_its_data_hold_once(small, replicas, count, refused):
    """Eleventh review, finding 1: the pipeline cuts the examples to whole large batches before it shuffles, so where
    the data hold one (quick mode's 2,048 images at SMALL = 128: 2,048), every large step read the same examples: run
    for real, the yardstick's batch marks spanned 1.4e-6 and the proof failed the correct run in its last cell, after
    31 min. The set-up cell now refuses such sizes at once (17 s in), and names the largest SMALL that fits (a multiple
    of the replicas); on the old cell SMALL = 65 and 128 DID NOT RAISE."""
    from dataclasses import replace

    from helpers.errors import CourseError
    from helpers.mode import mode_sizes

    namespace = {"SMALL": small, "FACTOR": 16, "replicas": replicas, "count": count, "epochs": 4,
                 "sizes": replace(mode_sizes("quick"), max_steps=None),  # its steps_per_epoch, uncapped
                 "CourseError": CourseError, "print": lambda *a, **k: None}
    cell = compile(cell_defining("10_large_batches.ipynb", "large = SMALL * FACTOR"), "10 set-up", "exec")
    if refused is None:
        exec(cell, namespace)
        assert namespace["count"] // namespace["large"] >= 2
    else:
        with pytest.raises(CourseError, match=refused):
            exec(cell, namespace)


_NEVER_ROSE = [3.2, 2.9, 2.6, 2.3, 2.0, 1.8, 1.6] + [1.0] * 25  # without warm-up: steps 2 to W + 1 all below the start
_WARM_ROSE = [3.2, 2.9, 3.5, 2.3, 2.0, 1.8, 1.6] + [1.0] * 25  # with warm-up: step 3 above the start's 3.1 on its batch
_AT_16x16 = {"SMALL": 16, "large": 256, "base_lr": 0.0125,  # SMALL = 16, FACTOR = 16: peak rate 0.2
             "iterations": {"batch 32": 1024, **{n: 64 for n in LESSON_10_RUNS if n != "batch 32"}}}
_AT_33 = {"SMALL": 33, "large": 528, "base_lr": 0.05 * 33 / 64, "per_epoch": 4224}  # 32 rounded up on 3 replicas: 0.4125
_CHECKED, _NOT_CHECKED = "without warm-up step 3 reached 5.20", "the early steps are NOT CHECKED (peak rate 0.2, not 0.4 or 0.4125"


@pytest.mark.parametrize("sizes,planted,shown", [
    ({}, None, _CHECKED), (_AT_33, None, _CHECKED), (_AT_16x16, None, _NOT_CHECKED),
    (_AT_16x16, "no warm-up", _NOT_CHECKED), (_AT_16x16, "warm-up", _NOT_CHECKED),
    ({}, "no warm-up", "without warm-up a step's loss should rise"), ({}, "warm-up", "with warm-up steps 2 to 7 should"),
    (_AT_33, "no warm-up", "without warm-up a step's loss should rise"), (_AT_33, "warm-up", "with warm-up steps 2 to 7 should")],
    ids=["0.4", "0.4125", "0.2", "0.2, no step rose", "0.2, the warm-up rose", "0.4, no step rose", "0.4, the warm-up rose",
         "0.4125, no step rose", "0.4125, the warm-up rose"])
def test_lesson_10_checks_the_early_steps_at_the_peaks_they_were_measured_at_only(sizes, planted, shown, capsys):
    """Twelfth review, finding 1: the rise without warm-up was shown at the peak rate 0.4 only (SMALL 32 x FACTOR 16,
    every run in docs/measured.md); a reviewer's correct runs at FACTOR 4 (steps 2 to 17 without warm-up 2.60, 2.13,
    ... against the start's 3.11 to 3.47) and at SMALL 16 x FACTOR 16 failed the proof there. Its thirteenth review: the
    warm-up's fall was measured at those sizes only too, yet asserted at every size, and at 3 replicas SMALL rounds up to
    33, a peak of 0.4125, where a run was measured since (docs/measured.md). Both halves are now asserted at 0.4 and
    0.4125 only; elsewhere the proof prints NOT CHECKED and its other checks still run. On the old proof a warm-up that
    rose at 0.2 FAILED, and a run without warm-up that never rose at 0.4125 passed (DID NOT RAISE)."""
    ok = OK["10_large_batches.ipynb"]
    changed = {"no warm-up": {"batch 512, linear, no warm-up": _NEVER_ROSE},
               "warm-up": {"batch 512, linear + warm-up": _WARM_ROSE}}.get(planted, {})
    namespace = {"math": math, **ok, **sizes, "step_loss": {**ok["step_loss"], **changed}}
    if shown in (_CHECKED, _NOT_CHECKED):
        run_proof("10_large_batches.ipynb", namespace)
        assert shown in capsys.readouterr().out
        return
    with pytest.raises(AssertionError, match=shown):
        run_proof("10_large_batches.ipynb", namespace)


@pytest.mark.parametrize("mode,per_epoch", [("quick", 4096), ("full", 49664)])
def test_lesson_10_schedule_plot_asks_600_steps_or_so_of_each_run(mode, per_epoch):
    """Thirteenth session (review 12's text points): the schedule plot asked every step's rate of every run, one eager
    call at a time, 1 to 2 ms each: at full mode's sizes (46,560 small-batch steps and 4 x 2,910 large) its 58,200 calls
    took 132 s, outside the lesson's predicted time. It now asks every step of a run of 600 steps or fewer (quick mode's
    runs, whole) and every k-th step of a longer one, with the warm-up's end and the last step: 2,935 calls at full size.
    On the old cell the full-size case asked 58,200 steps and fails."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.mode import mode_sizes

    sizes = mode_sizes(mode)
    asked = {}

    def schedule(batch, rule, warmup):  # a stand-in for the lesson's schedules, counting the steps asked
        steps = asked.setdefault((batch, rule, warmup), [])
        return lambda step: steps.append(step) or 0.1

    namespace = {"sizes": sizes, "epochs": sizes.schedule_epochs, "per_epoch": per_epoch, "SMALL": 32, "large": 512,
                 "plots": SimpleNamespace(save=lambda fig, name: None)}
    for marker in ("def run_steps", "runs = {", '"10_schedules"'):
        namespace["schedule"] = schedule
        exec(compile(cell_defining("10_large_batches.ipynb", marker), f"10 {marker}", "exec"), namespace)
    plt.close("all")
    run_steps, warmup_steps_of = namespace["run_steps"], namespace["warmup_steps_of"]
    assert set(asked) == set(namespace["runs"].values()), asked
    for (batch, rule, warmup), steps in asked.items():
        every, last = run_steps(batch), run_steps(batch) - 1
        if every <= 600:
            assert steps == list(range(every)), f"batch {batch}: every step of {every} should be shown"
        else:
            assert len(steps) <= 602 and {0, warmup_steps_of(batch), last} <= set(steps), \
                f"batch {batch}, {rule}: {len(steps)} of {every} steps asked"
    if mode == "full":
        assert sum(map(len, asked.values())) < 3000, {k: len(v) for k, v in asked.items()}
