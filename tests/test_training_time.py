"""Each lesson says how long its training will take, from the mode's sizes and the devices."""

from pathlib import Path

import pytest

from helpers.mode import mode_settings
from helpers.training_time import lesson_work, seconds, time_lesson

LESSONS = sorted(p.name[:2] for p in (Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_workshop_mode_fits_a_hands_on_segment_on_one_gpu_node():
    """The workshop sizes: at most a few minutes of training per lesson on a node of 4 GPUs."""
    workshop, full = mode_settings("workshop"), mode_settings("full")
    predicted = {n: seconds(lesson_work(n, workshop, 4), 4, 4) for n in LESSONS}
    assert max(predicted.values()) <= 5 * 60, predicted
    for n in ("01", "05", "08", "10", "11"):  # the lessons that train for real: full mode is the long one
        assert seconds(lesson_work(n, full, 4), 4, 4) > 3 * predicted[n], n


def test_the_class_overrides_shrink_the_prediction(monkeypatch):
    before = seconds(lesson_work("05", mode_settings("full"), 2), 0, 2)
    monkeypatch.setenv("COURSE_EPOCHS", "1")
    monkeypatch.setenv("COURSE_MAX_STEPS", "4")
    after = seconds(lesson_work("05", mode_settings("full"), 2), 0, 2)
    assert after < before / 100


def test_the_first_cell_says_it_and_the_last_says_what_it_took(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    clock = time_lesson("10", mode_settings("quick"), 2)
    said = capsys.readouterr().out
    assert said.startswith("quick mode: ") and "images through cnn" in said and "on this CPU" in said, said
    from helpers import training_time

    clock.started = 1000.0  # the lesson's first cell ran at 1000 s on a clock the test sets
    monkeypatch.setattr(training_time.time, "perf_counter", lambda: 1075.0)  # its last cell, 75 s later
    took = clock.report()
    said = capsys.readouterr().out
    assert took == 75.0 and "lesson 10: took 75 s in all on this CPU" in said and "predicted for its training" in said, said
    monkeypatch.setattr(training_time.time, "perf_counter", lambda: 1000.0 + 150)
    assert clock.report() == 150.0 and "took 2 min in all" in capsys.readouterr().out


@pytest.mark.parametrize("lesson", ["00", "13"])
def test_lessons_that_hardly_train_predict_seconds(lesson):
    assert seconds(lesson_work(lesson, mode_settings("full"), 4), 4, 4) < 1


def test_every_lesson_has_a_line_in_the_prediction_table():
    """A new lesson without an entry would silently predict 'no training'."""
    from helpers.training_time import table

    rows = [line.split("|")[1].strip() for line in table().splitlines()[2:]]
    assert rows == LESSONS, rows
