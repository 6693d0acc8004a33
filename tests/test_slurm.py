"""A real Slurm: 2 emulated nodes (network namespaces) brought up by slurm/local/up.

Needs root (the script installs Slurm and creates namespaces). Elsewhere these tests are
skipped with the reason; CI sets COURSE_REQUIRE_SLURM=1, which turns the skip into a failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.train import parse_result_lines
from tests.conftest import leftovers as _leftovers
from tests.conftest import squeue_empty as _squeue_empty

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slurm


def _job_processes(within: float = 15.0) -> list[str]:
    """Processes that run inside a Slurm job (engines, TF workers, srun, slurmstepd), not the
    daemons, still there after `within` seconds (slurmstepd exits a moment after its job)."""
    deadline = time.monotonic() + within
    while True:
        found = [p for p in _leftovers() if "[slurmd]" not in p and "[slurmctld]" not in p]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


ENGINES_SCRIPT = """
import json, os, sys
from helpers.cluster import start_engines
engines = start_engines(int(sys.argv[1]), slurm=True, timeout=120)
print("ENGINES " + json.dumps({"identities": engines.identities(), "ranks": engines.ranks,
                               "workers": engines.setup_multiworker(), "stop_s": engines.stop()}))
"""


def _engines_report(stdout: str) -> dict:
    line = next((l for l in stdout.splitlines() if l.startswith("ENGINES ")), None)
    assert line, stdout
    return json.loads(line[len("ENGINES "):])


def test_engines_by_sbatch_land_on_both_nodes(slurm, monkeypatch):
    """From outside an allocation: one sbatch job whose srun starts one engine per task."""
    from helpers.cluster import start_engines
    from helpers.slurm_engines import SlurmRequest

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    engines = start_engines(2, slurm=True, request=SlurmRequest(tasks_per_node=1), timeout=120, activate=False)
    try:
        found = sorted(engines.identities(), key=lambda i: i["procid"])
        assert [(i["procid"], i["host"]) for i in found] == [(0, "node1"), (1, "node2")]
        assert all(i["slurm_step"] for i in found)
        assert engines.ranks == {i["engine_id"]: i["procid"] for i in found}
        workers = engines.setup_multiworker()
        assert [w["address"] for w in workers] == ["slurm", "slurm"]
    finally:
        engines.stop()
    assert _squeue_empty(slurm["env"]), "stopping the engines must cancel their Slurm job"
    left = _job_processes()
    assert not left, left


def test_engines_by_srun_inside_an_allocation(slurm):
    """Inside salloc (or a JupyterHub server that is a Slurm job): engines as an srun step."""
    done = subprocess.run(["salloc", "-N", "2", "--ntasks-per-node=1", "--time=5", sys.executable, "-c",
                           ENGINES_SCRIPT, "2"], env=slurm["env"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = _engines_report(done.stdout)
    assert sorted((i["procid"], i["host"]) for i in report["identities"]) == [(0, "node1"), (1, "node2")]
    assert report["stop_s"] < 5
    assert _squeue_empty(slurm["env"])
    left = _job_processes()
    assert not left, left


def test_more_engines_than_allocated_tasks_is_a_clear_error(slurm):
    done = subprocess.run(["salloc", "-n", "1", "--time=5", sys.executable, "-c", ENGINES_SCRIPT, "2"],
                          env=slurm["env"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode != 0
    assert "2 engines asked for, but this allocation" in done.stderr and "has 1 tasks" in done.stderr
    assert _squeue_empty(slurm["env"])


@pytest.mark.parametrize("notebook", ["03_multiworker_ipyparallel", "04_custom_training_loop",
                                      "06_fault_tolerance"])
def test_notebook_with_engines_on_slurm(slurm, tmp_path, notebook):
    """The same notebooks as the local run, their engines Slurm tasks on both nodes (06 kills one
    of them mid-training and resumes on fresh engines)."""
    env = {**slurm["env"], "COURSE_ENGINES": "slurm", "COURSE_SLURM_TASKS_PER_NODE": "1",
           "COURSE_MODE": "quick", "COURSE_OUTPUT_DIR": str(tmp_path)}
    before = sorted(p.name for p in (ROOT / "notebooks").iterdir())
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                           "--nbval-current-env", "--nbval-cell-timeout=600", f"notebooks/{notebook}.ipynb"],
                          env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-6000:]
    if notebook.startswith("03"):
        assert (tmp_path / "models" / "03_multiworker.keras").exists(), "the chief saves the model"
    after = sorted(p.name for p in (ROOT / "notebooks").iterdir() if not p.name.startswith("."))
    assert after == [n for n in before if not n.startswith(".")], "the run left files among the notebooks"
    assert _squeue_empty(slurm["env"])
    left = _job_processes()
    assert not left, left


def test_tasks_land_on_two_hosts(slurm):
    done = subprocess.run(["srun", "-N", "2", "--ntasks-per-node", "1", "bash", "-c",
                           "echo $SLURM_PROCID $(hostname) $(hostname -I)"],
                          env=slurm["env"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = sorted(line.split() for line in done.stdout.splitlines())
    assert [r[:2] for r in rows] == [["0", "node1"], ["1", "node2"]]
    assert rows[0][2] != rows[1][2], "each node must have its own address"
    assert _squeue_empty(slurm["env"])


TRAIN = ["--mode", "quick", "--epochs", "1", "--steps-per-epoch", "3", "--train-examples", "256", "--skip-eval"]


@pytest.mark.parametrize("loop", ["custom", "fit"])
def test_mwms_across_two_nodes_with_slurm_resolver(slurm, loop, prepared_dir):
    done = subprocess.run(["srun", "-N", "2", "--ntasks-per-node", "1", "--time", "10",
                           sys.executable, "-m", "helpers", "train", "--strategy", "multiworker", "--loop", loop,
                           "--data-dir", str(prepared_dir), *TRAIN],
                          env={**slurm["env"], "TF_CPP_MIN_LOG_LEVEL": "2"}, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = sorted(parse_result_lines(done.stdout), key=lambda r: r["rank"])
    assert [(r["rank"], r["host"]) for r in results] == [(0, "node1"), (1, "node2")]
    assert all(r["strategy"] == "MultiWorkerMirroredStrategy" and r["workers"] == 2 for r in results)
    assert results[0]["weights"] == results[1]["weights"]
    assert _squeue_empty(slurm["env"])


def test_batch_training_script(slurm, prepared_dir, tmp_path):
    env = {**slurm["env"], "COURSE_DATA_DIR": str(prepared_dir), "COURSE_OUTPUT_DIR": str(tmp_path),
           "COURSE_PYTHON": sys.executable}
    done = subprocess.run(["sbatch", "--wait", "--parsable", "--nodes=2", "--ntasks-per-node=1",
                           "--cpus-per-task=1", "--time=10", f"--output={tmp_path}/job-%j.out",
                           str(ROOT / "slurm/train.sbatch"), *TRAIN],
                          env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    job = done.stdout.strip().split(";")[0]
    log = (tmp_path / f"job-{job}.out").read_text() if job else ""
    assert done.returncode == 0, log[-3000:] + done.stderr
    results = json.loads((tmp_path / "results" / f"train-{job}.json").read_text())
    assert results["workers"] == 2 and results["rank"] == 0 and results["images_per_s"] > 0
    printed = parse_result_lines(log)
    assert sorted(r["host"] for r in printed) == ["node1", "node2"]
    assert len({r["weights"] for r in printed}) == 1
    assert _squeue_empty(slurm["env"])


def test_engines_job_with_controller_inside(slurm, tmp_path):
    """slurm/engines.sbatch runs controller and engines in the job; the notebook attaches."""
    from helpers.cluster import attach

    env = {**slurm["env"], "COURSE_DIR": str(ROOT), "COURSE_PYTHON": sys.executable}
    done = subprocess.run(["sbatch", "--parsable", "--cpus-per-task=1", "--time=10",
                           f"--output={tmp_path}/engines-%j.out", str(ROOT / "slurm/engines.sbatch")],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    engines = attach(job, timeout=120, activate=False)
    try:
        found = sorted(engines.identities(), key=lambda i: i["procid"])
        assert [(i["procid"], i["host"]) for i in found] == [(0, "node1"), (1, "node2")]
        connection = engines.cluster.connection_file()
        assert connection.stat().st_mode & 0o077 == 0, "connection files must be private"
    finally:
        engines.stop()
    assert _squeue_empty(slurm["env"]), "stopping attached engines must cancel their job"
    assert not connection.exists()
    left = _job_processes()
    assert not left, left


def test_attach_to_a_job_that_is_not_there(slurm):
    from helpers.cluster import attach
    from helpers.errors import CourseError

    with pytest.raises(CourseError, match="Slurm job 999999 not found"):
        attach("999999", timeout=10, activate=False)


def test_scaling_sweep(slurm, prepared_dir, tmp_path):
    env = {**slurm["env"], "COURSE_DATA_DIR": str(prepared_dir), "COURSE_OUTPUT_DIR": str(tmp_path),
           "COURSE_PYTHON": sys.executable, "SWEEP_SBATCH_ARGS": "--cpus-per-task=1 --time=10"}
    done = subprocess.run([str(ROOT / "slurm/sweep"), "--workers", "1 2", "--tasks-per-node", "1", "--", *TRAIN],
                          env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("train-")]
    assert sorted(int(r[2]) for r in rows) == [1, 2], done.stdout  # the workers column
    assert all(float(r[4]) > 0 for r in rows)  # images/s
    assert len(list((tmp_path / "results").glob("train-*.json"))) == 2
    assert _squeue_empty(slurm["env"])


def test_engines_that_cannot_start_are_a_clear_error(slurm, monkeypatch):
    """A job Slurm refuses, and a job that stays pending: one line each, and nothing left queued."""
    from helpers.cluster import start_engines
    from helpers.errors import CourseError
    from helpers.slurm_engines import SlurmRequest

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(CourseError, match="no nodes in partition nosuch: check COURSE_SLURM_PARTITION"):
        start_engines(2, slurm=True, request=SlurmRequest(partition="nosuch"), activate=False)
    with pytest.raises(CourseError, match="`sbatch` refused the engines' job"):  # no GPUs on these nodes
        start_engines(2, slurm=True, request=SlurmRequest(gpus_per_task=1), activate=False)
    hold = subprocess.run(["sbatch", "--parsable", "-N", "2", "--exclusive", "--time=5", "--output=/dev/null",
                           "--wrap", "sleep 300"], env=slurm["env"], capture_output=True, text=True, timeout=60)
    assert hold.returncode == 0, hold.stderr
    try:
        with pytest.raises(CourseError, match=r"only 0 of 2 engines registered within 5 s: Slurm job \d+ is PENDING"):
            start_engines(2, slurm=True, request=SlurmRequest(tasks_per_node=1), timeout=5, activate=False)
    finally:
        subprocess.run(["scancel", hold.stdout.strip().split(";")[0]], env=slurm["env"], timeout=30)
    assert _squeue_empty(slurm["env"])
