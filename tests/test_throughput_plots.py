"""Step times, the Keras fix's version check, figures and results files, bench rows (helpers.throughput, keras_fix, plots, results)."""

import json

import pytest

from helpers import keras_fix, plots
from helpers.commands.bench import Row, format_table
from helpers.throughput import StepTimer
from helpers.results import parse_result_lines, write_results


def test_step_timer_reports_median_without_the_tracing_step():
    timer = StepTimer(images_per_step=64)
    timer.durations = [20.0, 0.5, 0.4, 0.6]
    summary = timer.summary()
    assert summary["first_step_s"] == 20.0 and summary["median_step_s"] == 0.5
    assert summary["images_per_s"] == pytest.approx(128.0)
    with pytest.raises(RuntimeError):
        StepTimer(8).stop()


def test_step_timer_gives_no_rate_from_the_tracing_step_alone():
    """Issue 54: a run of one step (COURSE_EPOCHS=1 COURSE_MAX_STEPS=1) timed only the tracing step; lesson 01
    printed its rate as images/s. The rate text says n/a then, and the steps after the first otherwise."""
    timer = StepTimer(images_per_step=64)
    timer.durations = [20.0]
    assert timer.rate_text() == "images/s and median step n/a (one step)"
    assert timer.median_step == 20.0  # the fallback lessons 05 and 09 read stays
    timer.durations = [20.0, 0.5, 0.4, 0.6]
    assert timer.rate_text() == "    128 images/s, median step   500 ms"


def test_keras_fix_runs_on_the_verified_keras_and_stops_loudly_elsewhere():
    from helpers.errors import CourseError

    assert keras_fix.keras_needs_fix("3.15.1") and keras_fix.keras_needs_fix("3.15.2")
    for unverified in ("3.0.0", "3.14.0", "3.16.0", "2.15.0"):
        with pytest.raises(CourseError, match=r"verified on Keras 3\.15\.1 only.*TF_USE_LEGACY_KERAS=1"):
            keras_fix.keras_needs_fix(unverified)


def test_figures_name_their_data_and_are_saved(tmp_path, monkeypatch):
    monkeypatch.setenv(plots.FIGURES_ENV, str(tmp_path))
    fig = plots.curves({"a": {"loss": [2.0, 1.0], "accuracy": [0.1, 0.5]}}, "SYNTHETIC CIFAR-10-format data")
    assert "SYNTHETIC" in fig._suptitle.get_text()
    path = plots.save(fig, "curves")
    assert path == tmp_path / "curves.png" and path.stat().st_size > 1000
    fig = plots.throughput([{"replicas": 1, "images_per_s": 100.0}, {"replicas": 2, "images_per_s": 150.0}],
                           "CIFAR-10")
    efficiency = fig.axes[1].lines[0].get_ydata()
    assert list(efficiency) == pytest.approx([1.0, 0.75])


def test_throughput_bases_each_models_curves_on_its_smallest_run():
    """Lesson 07's fourth review, F1: a sweep's 1-worker run is recorded as MirroredStrategy, so a curve per
    strategy based the multi-worker one on its 2-worker run (1.0, 0.947, 0.842 where 0.95, 0.90, 0.80 is meant)."""
    runs = [("MirroredStrategy", 1, 1000.0), ("MultiWorkerMirroredStrategy", 2, 1900.0),
            ("MultiWorkerMirroredStrategy", 4, 3600.0), ("MultiWorkerMirroredStrategy", 8, 6400.0)]
    fig = plots.throughput([{"replicas": n, "images_per_s": rate, "label": f"cnn {strategy}", "baseline": "cnn float32"}
                            for strategy, n, rate in runs], "CIFAR-10")
    multi = next(line for line in fig.axes[1].lines if line.get_label() == "cnn MultiWorkerMirroredStrategy")
    assert list(multi.get_ydata()) == pytest.approx([0.95, 0.90, 0.80])


def test_results_are_written_atomically_and_parsed(tmp_path):
    target = write_results({"images_per_s": 12.5}, tmp_path / "r" / "results.json")
    assert json.loads(target.read_text()) == {"images_per_s": 12.5}
    assert not list(target.parent.glob(".*.tmp"))
    assert parse_result_lines('noise\nRESULT {"a": 1}\nRESULT {"a": 2}') == [{"a": 1}, {"a": 2}]


def test_bench_rows_say_whether_their_target_is_met(tmp_path):
    from helpers.results import load_table
    from helpers.commands.bench import write_tables

    rows = [Row("x images/s", 96.0, 100.0, "images/s", True, ">= 0.97", target_on="ratio"),
            Row("ready", 1.5, 6.5, "s", False, "<= 2"),
            Row("step ratio", 1.9, 2.3, "x", False, "beat the baseline"),
            Row("first step", 12.0, 11.0, "s", False, "beat the baseline"),
            Row("per GPU", 900.0, None, "images/s", True, "report"),
            Row("pipeline / training", 9000.0, 200.0, "images/s", True, ">= 10", target_on="ratio",
                versus_defaults=False)]
    assert [r.met for r in rows] == ["no", "yes", "yes", "no", "-", "yes"]
    table = format_table(rows)
    assert "ratio >= 0.97" in table and "0.96" in table and "x images/s" in table
    write_tables(rows, {"host": "h"}, tmp_path, gpu_skipped="no GPU")
    saved = load_table(tmp_path)
    assert saved["gpu_skipped"] == "no GPU" and [r["met"] for r in saved["rows"]] == ["no", "yes", "yes", "no", "-", "yes"]
    assert (tmp_path / "bench.csv").read_text().count("\n") == 7
    fig = plots.bench(saved)  # the bench's picture of its table: one bar per compared row
    bars = fig.axes[0].patches
    assert len(bars) == 4  # the GPU row has no baseline, the pipeline's is not a default
    assert [round(b.get_width(), 2) for b in bars] == [0.96, round(6.5 / 1.5, 2), round(2.3 / 1.9, 2), round(11 / 12, 2)]


def test_throughput_divides_each_point_by_its_own_baseline():
    """Lesson 07's eighth review, finding 3: a curve's points were all divided by its first point's baseline, so
    float32 and mixed_float16 runs under one label (model and strategy) read 2.85 and 3.0. Each point is measured
    against the smallest run of its own baseline; two precisions under one label each give their own efficiency."""
    runs = [("float32", 1, 1000.0), ("float32", 2, 1900.0), ("mixed_float16", 1, 3000.0), ("mixed_float16", 2, 5400.0)]
    fig = plots.throughput([{"replicas": n, "images_per_s": rate, "label": "cnn MirroredStrategy",
                             "baseline": f"cnn {precision}"} for precision, n, rate in runs], "CIFAR-10")
    efficiency = sorted(fig.axes[1].lines[0].get_ydata())
    assert efficiency == pytest.approx([0.9, 0.95, 1.0, 1.0]), efficiency
