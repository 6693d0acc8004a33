"""`make gpucheck`, the smoke run for the first GPU node, run where there is none: it runs what it can,
says why it skipped the rest, writes JSON that validates, and the "Verified on" table is made from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from helpers.tools.bench_report import render_gpuchecks
from helpers.tools.gpucheck import STEPS, _allreduce_result, validate


def _gpucheck(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "CUDA_VISIBLE_DEVICES"}
    done = subprocess.run([sys.executable, "-m", "helpers.tools.gpucheck", "--out", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env={**clean, **(env or {})})
    files = list(tmp_path.glob("gpucheck-*.json"))
    assert len(files) == 1, done.stdout + done.stderr
    return done, json.loads(files[0].read_text())


def test_on_a_cpu_machine_it_skips_the_gpu_steps_with_reasons_and_the_json_validates(tmp_path):
    # lesson 00 on the CPU exercises the lessons step (minutes against the prediction) in seconds
    done, doc = _gpucheck(tmp_path, "--lessons", "00", "--mode", "quick", "--lessons-on-cpu")
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert validate(doc) == []
    steps = doc["steps"]
    assert steps["build"]["status"] == "ok" and steps["build"]["figures"]["gpus_seen"] == 0
    assert steps["build"]["figures"]["cuda_build"] is False  # tensorflow-cpu here
    for name in ("allreduce-node", "allreduce-tasks", "resnet50-mixed"):
        assert steps[name]["status"] == "skipped" and "GPU" in steps[name]["reason"], steps[name]
    assert steps["nested-job"]["status"] == "skipped" and "not inside a Slurm job" in steps["nested-job"]["reason"]
    row, = steps["lessons"]["figures"]["lessons"]
    assert row["lesson"] == "00" and row["status"] == "ok" and row["minutes"] > 0, row
    assert "0 failed, 4 skipped" in done.stdout, done.stdout


def test_a_cpu_build_given_gpus_is_the_failure_it_names(tmp_path):
    """Slurm gave this process two GPUs (CUDA_VISIBLE_DEVICES) but tensorflow-cpu sees none: the first
    GPU day's most common mistake is one line, and the JSON still validates."""
    done, doc = _gpucheck(tmp_path, "--lessons", "", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert validate(doc) == []
    build = doc["steps"]["build"]
    assert build["status"] == "failed", build
    assert "sees 0 of the 2 GPU(s) given: a CPU build of TensorFlow (tensorflow-cpu): make install EXTRA=gpu" \
        in build["reason"], build


@pytest.mark.parametrize("broken, problem", [
    (lambda d: d.pop("host"), "no 'host'"),
    (lambda d: d["steps"].pop("lessons"), "steps"),
    (lambda d: d["steps"]["build"].update(status="fine"), "build: status 'fine'"),
    (lambda d: d["steps"]["lessons"].update(reason=""), "lessons: skipped without a reason"),
    (lambda d: d.update(schema="other/1"), "schema"),
])
def test_validate_names_what_is_wrong(broken, problem):
    doc = {"schema": "tf-hpc-course/gpucheck/1", "date": "2026-11-26", "host": "h", "machine": {},
           "steps": {name: {"status": "skipped", "reason": "why", "seconds": 0.0} for name in STEPS}}
    assert validate(doc) == []
    broken(doc)
    assert any(problem in p for p in validate(doc)), validate(doc)


def test_nccl_s_transport_and_bus_bandwidth_are_read_from_its_log():
    """What `allreduce-node` reads on a GPU node, from planted probe and NCCL_DEBUG=INFO lines."""
    out = 'ALLREDUCE {"rank": 0, "bytes": 94000000, "seconds": 0.01}\n'
    err = ("node1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
           "node1:1:1 [1] NCCL INFO Channel 01/0 : 1[1] -> 2[2] via P2P/IPC\n"
           "node1:1:1 [3] NCCL INFO Channel 00/0 : 3[3] -> 0[0] via SHM/direct/direct\n")
    result = _allreduce_result(0, out, err, 60, 4)
    assert result["status"] == "ok"
    assert result["figures"]["nccl_transports"] == ["P2P/IPC", "SHM"]
    assert result["figures"]["bus_gb_per_s"]["94000000"] == pytest.approx(2 * 3 / 4 * 94e6 / 0.01 / 1e9)
    assert _allreduce_result(None, "", "", 60, 4)["status"] == "failed"


def test_the_verified_on_table_shows_a_gpu_run_beside_a_skipped_one():
    gpu = {"date": "2026-12-01", "host": "gpu17", "machine": {"cpus": 64, "gpu_names": ["NVIDIA A100-SXM4-40GB"] * 4},
           "steps": {
               "build": {"status": "ok", "figures": {"tensorflow": "2.21.0", "cuda_build": True, "cuda": "12.5",
                                                     "cudnn": "9", "gpus_seen": 4, "gpus_allocated": 4}},
               "allreduce-node": {"status": "ok", "figures": {"bus_gb_per_s": {"4000000": 50.0, "94000000": 180.0},
                                                              "nccl_transports": ["P2P/IPC"]}},
               "allreduce-tasks": {"status": "failed", "reason": "rank 1: killed"},
               "resnet50-mixed": {"status": "ok", "figures": {"images_per_s": 21000.0, "batch": 256,
                                                              "peak_gpu_mib": 5100.0}},
               "nested-job": {"status": "ok", "reason": ""},
               "lessons": {"status": "ok", "figures": {"mode": "workshop", "lessons": [
                   {"lesson": "01", "status": "ok", "minutes": 2.5, "predicted_training_minutes": 1.2}]}}}}
    table = render_gpuchecks([("gpucheck-gpu17.json", gpu)], "bench/gpucheck-*.json")
    row = table.splitlines()[-1]
    assert "gpu17 (64 CPUs, 4 x NVIDIA A100-SXM4-40GB)" in row and "CUDA 12.5, cuDNN 9, sees 4 of 4 GPUs" in row
    assert "180.0 GB/s bus at 94 MB, P2P/IPC" in row and "failed: rank 1: killed" in row
    assert "21,000 images/s" in row and "01 ok 2.5 min (predicted 1.2)" in row


@pytest.mark.slurm
def test_as_a_batch_job_on_simulated_gpus_it_names_the_cpu_build_and_its_nested_job_gets_a_gpu(slurm, tmp_path, report):
    """The smoke run as one batch job on the local Slurm's simulated GPUs (TensorFlow cannot use them):
    the build step fails naming the CPU build against the 2 GPUs given, and the job it submits from
    inside the job (as lessons 08, 11, 16 and 17 do from a server) is accepted and gets a GPU."""
    fakebin = ROOT / "tests" / "fakebin"  # a stand-in nvidia-smi, as on a GPU node
    env = {**slurm["env"], "PATH": f"{fakebin}:{slurm['env']['PATH']}", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = tmp_path / "job.out"
    done = subprocess.run(["sbatch", "--wait", "-N1", "-n1", "--gres=gpu:2", "--time=10", f"--output={out}",
                           "--wrap", f"{sys.executable} -m helpers.tools.gpucheck --out {tmp_path} --lessons ''"],
                          env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    log = out.read_text() if out.exists() else done.stderr
    doc = json.loads(next(tmp_path.glob("gpucheck-*.json")).read_text())
    assert validate(doc) == [], log
    assert done.returncode == 1, log  # the build step failed, as it must on simulated GPUs
    assert "sees 0 of the 2 GPU(s) given: a CPU build" in doc["steps"]["build"]["reason"], log
    nested = doc["steps"]["nested-job"]
    report(f"gpucheck on simulated GPUs: nested job {nested['status']} {nested.get('figures')}")
    assert nested["status"] == "ok" and not nested["reason"], nested
    assert "--gpus-per-task=1" in nested["figures"]["options"] and "--exclusive=user" in nested["figures"]["options"]
    assert nested["figures"]["state"] == "COMPLETED" and (nested["figures"]["gres"] or "").startswith("gpu"), nested


def test_the_nested_job_writes_no_slurm_out_file_where_it_was_submitted(monkeypatch):
    """Slurm's default output, slurm-<job>.out in the submitting directory, once put slurm-2.out in the
    repository's root (committed by mistake); the child job's one line is read by no one."""
    import shutil

    from helpers.tools import gpucheck

    sent = []
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(gpucheck, "_run", lambda command, *a, **k: (sent.append(command) or (1, "", "refused")))
    result = gpucheck.step_nested_job({}, timeout=5)
    assert result["status"] == "failed" and sent and sent[0][0] == "sbatch", result
    assert "--output=/dev/null" in sent[0], sent[0]
