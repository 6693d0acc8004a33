"""The suite's time budget, read from the recorded run (docs/bench/test-durations.json, kept by
`make durations-record` after a full `make test` here): a warning above 25 minutes, a failure above 60."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

from tests import durations
from tests.conftest import ROOT
from tests.support.recorded_run import recorded_run


def test_the_budget_warns_above_25_and_fails_above_60_minutes():
    assert durations.budget(recorded_run(24 * 60))[0] == "ok"
    assert durations.budget(recorded_run(26 * 60))[0] == "warn"
    assert durations.budget(recorded_run(59 * 60))[0] == "warn"
    assert durations.budget(recorded_run(61 * 60))[0] == "fail"


def test_the_summary_names_the_ten_slowest_and_the_change_against_the_run_before():
    now = recorded_run(600, {f"t{i}": float(i) for i in range(12)})
    before = recorded_run(900, {"t11": 20.0})
    lines = durations.summary(now, before)
    assert "change -5.0 min" in lines[1]
    slow = [line for line in lines if line.startswith("  ")]
    assert len(slow) == 10 and "t11" in slow[0] and "(-9 s)" in slow[0] and "(new)" in slow[1]


def test_the_recorded_run_is_within_budget():
    run = durations.load(durations.RECORDED)
    if run is None:
        pytest.skip(f"no recorded run in {durations.RECORDED.name} yet: `make durations-record` after a full make test")
    verdict, why = durations.budget(run)
    print(f"recorded run {run.get('commit')}: {why}")
    assert verdict != "fail", why
    if verdict == "warn":
        warnings.warn(why)


def test_each_test_s_cpu_counts_the_children_it_ran(tmp_path):
    """The durations file keeps each test's CPU, its own and its reaped children's: a test whose child
    computes for 1 s of CPU and one that sleeps 1 s show it (real pytest, real child)."""
    (tmp_path / "test_burn.py").write_text(
        "import subprocess, sys, time\n"
        "def test_child_computes():\n"
        "    subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
        "while time.process_time() - t < 1: pass'], check=True)\n"
        "def test_sleeps():\n    time.sleep(1)\n")
    out = tmp_path / "d.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.durations",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_burn.py")],
                          cwd=ROOT, env={**os.environ, "COURSE_DURATIONS": str(out), "PYTHONPATH": str(ROOT),
                                         "COURSE_DURATIONS_BEFORE": os.devnull},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    cpu = {k.split("::")[1]: v for k, v in json.loads(out.read_text())["cpu"].items()}
    assert cpu["test_child_computes"] >= 0.9 and cpu.get("test_sleeps", 0.0) < 0.3, cpu
    assert "core-min counted" in done.stdout, done.stdout[-2000:]
