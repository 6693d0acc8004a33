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
from helpers.commands.bench_report import render_gpuchecks
from helpers.commands.gpucheck import SCHEMA, SHOW_GPU_LIBRARIES, STEPS, _allreduce_result, validate


def _gpucheck(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "CUDA_VISIBLE_DEVICES"}
    done = subprocess.run([sys.executable, "-m", "helpers.commands.gpucheck", "--out", str(tmp_path), *args],
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
    for name in ("allreduce-node", "allreduce-tasks", "layout-gpu", "resnet50-mixed"):
        assert steps[name]["status"] == "skipped" and "GPU" in steps[name]["reason"], steps[name]
    assert steps["nested-job"]["status"] == "skipped" and "not inside a Slurm job" in steps["nested-job"]["reason"]
    assert steps["allreduce-nodes"]["status"] == "skipped" and "--nodes=2" in steps["allreduce-nodes"]["reason"]
    row, = steps["lessons"]["figures"]["lessons"]
    assert row["lesson"] == "00" and row["status"] == "ok" and row["minutes"] > 0, row
    assert "predicted_startup_minutes" in row, row
    assert doc["complete"] is True and doc["schema"] == SCHEMA
    assert "0 failed, 6 skipped" in done.stdout, done.stdout
    assert done.stdout.startswith("step caps: build 180 + "), done.stdout


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


def test_the_command_named_for_a_cuda_build_without_its_libraries_shows_tensorflow_s_debug_lines():
    """A CUDA build that sees fewer GPUs than given: the reason names a command, since the steps' own log (at
    TF_CPP_MIN_LOG_LEVEL=2) holds neither TensorFlow's WARNING nor its VLOG(1) lines naming each library. Run here
    as written (python = this venv's), it prints the device list and VLOG(1) lines (parse_flags_from_env's), which
    TF_CPP_MAX_VLOG_LEVEL unset or misspelt would leave out."""
    done = subprocess.run(["bash", "-c", SHOW_GPU_LIBRARIES], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]
    assert "parse_flags_from_env.cc" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("broken, problem", [
    (lambda d: d.pop("host"), "no 'host'"),
    (lambda d: d["steps"].pop("lessons"), "steps"),
    (lambda d: d["steps"]["build"].update(status="fine"), "build: status 'fine'"),
    (lambda d: d["steps"]["lessons"].update(reason=""), "lessons: skipped without a reason"),
    (lambda d: d.update(schema="other/1"), "schema"),
])
def test_validate_names_what_is_wrong(broken, problem):
    doc = {"schema": SCHEMA, "date": "2026-11-26", "host": "h", "machine": {},
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
    """The smoke run as one 2-node batch job on the local Slurm's simulated GPUs (TensorFlow cannot use
    them): the build step fails naming the CPU build against the 2 GPUs given, the job it submits from
    inside the job (as lessons 08, 11, 16 and 17 do from a server) is accepted and gets a GPU, the gpu
    layout shares one GPU with caps and RING, and the all-reduce runs between the two nodes."""
    fakebin = ROOT / "tests" / "fakebin"  # a stand-in nvidia-smi, as on a GPU node
    env = {**slurm["env"], "PATH": f"{fakebin}:{slurm['env']['PATH']}", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = tmp_path / "job.out"
    done = subprocess.run(["sbatch", "--wait", "-N2", "--ntasks-per-node=1", "--gres=gpu:2", "--time=15",
                           f"--output={out}", "--wrap",
                           f"{sys.executable} -m helpers.commands.gpucheck --out {tmp_path} --lessons ''"],
                          env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
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
    layout, nodes = doc["steps"]["layout-gpu"], doc["steps"]["allreduce-nodes"]
    report(f"gpucheck on 2 nodes of simulated GPUs: layout-gpu {layout['status']} ({layout['reason']}), "
           f"caps {layout.get('figures', {}).get('kernel_memory_mib')} + "
           f"{[w.get('memory_mib') for w in layout.get('figures', {}).get('workers', [])]} MiB, "
           f"{[w.get('communication') for w in layout.get('figures', {}).get('workers', [])]}; allreduce-nodes "
           f"{nodes['status']} {nodes.get('reason', '')} on {nodes.get('figures', {}).get('hosts')}: "
           f"{nodes.get('figures', {}).get('seconds')}")
    assert layout["status"] == "ok", (layout, log)
    assert [w["communication"] for w in layout["figures"]["workers"]] == ["RING", "RING"], layout
    assert nodes["status"] == "ok" and nodes["figures"]["hosts"] == ["node1", "node2"], (nodes, log)
    assert nodes["figures"]["command"].endswith("--gpus-per-task=1"), nodes  # one GPU on each node, as the lesson jobs
    assert "a time limit of 50 min" in log and "warning: this job's time limit (00:15:00) is shorter" in log, log


def test_the_nested_job_writes_no_slurm_out_file_where_it_was_submitted(monkeypatch):
    """Slurm's default output, slurm-<job>.out in the submitting directory, once put slurm-2.out in the
    repository's root (committed by mistake); the child job's one line is read by no one."""
    import shutil

    from helpers.commands import gpucheck

    sent = []
    monkeypatch.setenv("SLURM_JOB_ID", "1")
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(gpucheck, "_run", lambda command, *a, **k: (sent.append(command) or (1, "", "refused")))
    result = gpucheck.step_nested_job({}, timeout=5)
    assert result["status"] == "failed" and sent and sent[0][0] == "sbatch", result
    assert "--output=/dev/null" in sent[0], sent[0]


def test_a_file_sent_back_before_the_new_steps_still_validates():
    old = json.loads((ROOT / "docs" / "bench" / "gpucheck-vm-2026-11-26.json").read_text())
    assert old["schema"] == "tf-hpc-course/gpucheck/1" and validate(old) == []
    old["schema"] = SCHEMA  # the new schema asks for the layout-gpu and allreduce-nodes steps too
    assert any("expected" in p for p in validate(old))


def test_the_time_limit_is_every_step_s_cap_added_up_with_a_margin_and_the_batch_job_asks_for_it():
    """Caps: build 180, NCCL in the node 300, between tasks 300, the gpu layout 300, between nodes 300,
    ResNet50 600, the nested job 240 (60 + 120 + 30 + slack), each lesson 600: 2,220 s + 4 x 600 s = 4,620 s;
    +20 % and 300 s = 5,844 s, a limit of 98 min. slurm/gpucheck.sbatch once asked for 20."""
    from helpers.commands.gpucheck import DEFAULT_LESSONS, STEP_CAPS_S, parse_slurm_time, time_limit_s, time_limit_text

    assert sum(STEP_CAPS_S[n] for n in STEPS if n != "lessons") == 2220 and STEP_CAPS_S["lessons"] == 600
    assert time_limit_s(4) == 5880 == 98 * 60  # ceil((4,620 x 1.2 + 300) / 60) minutes
    assert time_limit_s(0) == 60 * -(-(2220 * 1.2 + 300) // 60)
    assert time_limit_s(2, {n: 10 for n in STEPS}) == 60 * -(-(90 * 1.2 + 300) // 60)
    assert "lessons 4 x 600 s, +20% and 300 s: a time limit of 98 min (01:38:00)" in time_limit_text(4)
    sbatch = (ROOT / "slurm" / "gpucheck.sbatch").read_text()
    asked = parse_slurm_time(next(line.split("=", 1)[1].split()[0] for line in sbatch.splitlines()
                                  if line.startswith("#SBATCH --time=")))
    print(f"slurm/gpucheck.sbatch asks {asked} s; the caps need {time_limit_s(len(DEFAULT_LESSONS))} s")
    assert time_limit_s(len(DEFAULT_LESSONS)) <= asked <= time_limit_s(len(DEFAULT_LESSONS)) + 15 * 60
    assert [parse_slurm_time(t) for t in ("01:40:00", "1-00:00:00", "20", "5:30", "UNLIMITED")] == \
        [6000, 86400, 1200, 330, None]
    printed = subprocess.run([sys.executable, "-m", "helpers.commands.gpucheck", "--time-limit"], capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
    limit = f"a time limit of {time_limit_s(len(DEFAULT_LESSONS)) // 60} min"  # 110 with lesson 13
    assert printed.returncode == 0 and limit in printed.stdout, printed.stdout + printed.stderr


def _planted_plan(slow_cap_s: float, seen: list) -> dict:
    """Every step of the check planted: quick ones, one that reads the JSON on disk while it runs, and
    `allreduce-tasks` a program that sleeps for a minute, so that its cap kills it."""
    from helpers.commands import gpucheck

    def ok(results, cap):
        return {"status": "ok", "figures": {"cap": cap}}

    def reads_the_file(results, cap):
        seen.append(json.loads(next(Path(os.environ["GPUCHECK_TEST_OUT"]).glob("*.json")).read_text()))
        return {"status": "ok", "figures": {"earlier": sorted(results)}}

    plan = {name: ok for name in STEPS}
    plan["allreduce-node"] = reads_the_file
    plan["allreduce-tasks"] = lambda results, cap: gpucheck.step_process(
        [sys.executable, "-c", "import time; print('slow step', flush=True); time.sleep(60)"], cap)
    return plan


def test_the_json_survives_a_step_killed_at_its_cap(tmp_path, monkeypatch):
    """A planted slow step (a program sleeping 60 s, capped at 2 s) is killed at its cap; the file on
    disk held every earlier step while the next ran, the killed step is marked, later steps still run."""
    from helpers.commands import gpucheck

    monkeypatch.setenv("GPUCHECK_TEST_OUT", str(tmp_path))
    seen: list = []
    caps = {name: 2.0 for name in STEPS}
    path = tmp_path / "gpucheck-test.json"
    doc = gpucheck.run(path, _planted_plan(2.0, seen), caps)
    on_disk = json.loads(path.read_text())
    print(json.dumps(on_disk["steps"], indent=1))
    assert on_disk == json.loads(json.dumps(doc)) and validate(on_disk) == [] and on_disk["complete"] is True
    killed = on_disk["steps"]["allreduce-tasks"]
    assert killed["status"] == "failed" and killed["reason"] == "no result within 2 s: killed at its cap", killed
    assert 1.5 < killed["seconds"] < 15, killed
    assert all(on_disk["steps"][n]["status"] == "ok" for n in STEPS if n != "allreduce-tasks")
    during, = seen  # what the file held while the second step ran
    assert during["complete"] is False and during["steps"]["build"]["status"] == "ok"
    assert during["steps"]["allreduce-node"]["reason"].startswith("did not finish: the run ended during this step")
    assert during["steps"]["lessons"]["reason"] == gpucheck.NOT_REACHED


def test_a_run_killed_by_the_job_s_end_keeps_every_finished_step(tmp_path):
    """The whole check SIGKILLed (as Slurm ends a job at its time limit) during a planted slow step:
    the JSON on disk is whole, holds the steps before it, marks it as not finished and the rest as not
    reached, and validates."""
    import signal
    import time

    script = (f"import json, os, sys; sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
              "from pathlib import Path\nfrom helpers.commands import gpucheck\nfrom test_gpucheck import _planted_plan\n"
              f"gpucheck.run(Path({str(tmp_path / 'gpucheck-test.json')!r}), _planted_plan(120, []), "
              "{n: 120.0 for n in gpucheck.STEPS})\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "GPUCHECK_TEST_OUT": str(tmp_path)})
    path, deadline, doc = tmp_path / "gpucheck-test.json", time.monotonic() + 120, {}
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            doc = json.loads(path.read_text()) if path.exists() else {}
            if doc.get("steps", {}).get("allreduce-tasks", {}).get("reason", "").startswith("did not finish"):
                break
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the check, as at the job's end
        out = proc.communicate(timeout=30)[0]
        # its step runs in a session of its own: Slurm's cgroup ends it with the job, here it is killed by name
        import psutil

        for step in psutil.process_iter(["cmdline"]):
            if "print('slow step'" in " ".join(step.info["cmdline"] or []):
                step.kill()
    doc = json.loads(path.read_text())
    print(json.dumps(doc["steps"], indent=1))
    assert validate(doc) == [] and doc["complete"] is False, out
    steps = doc["steps"]
    assert steps["build"]["status"] == "ok" and steps["allreduce-node"]["status"] == "ok", out
    assert steps["allreduce-tasks"]["status"] == "failed" and "did not finish" in steps["allreduce-tasks"]["reason"]
    assert all(steps[n]["status"] == "skipped" and "not reached" in steps[n]["reason"]
               for n in STEPS[STEPS.index("allreduce-tasks") + 1:]), steps
    assert [p.name for p in tmp_path.iterdir()] == ["gpucheck-test.json"]  # written whole: no temporary left


def test_the_gpu_layout_step_on_a_cpu_shares_one_gpu_with_caps_and_ring(tmp_path, monkeypatch, report):
    """The layout-gpu step for real, given a simulated GPU (CUDA_VISIBLE_DEVICES=0, the stand-in nvidia-smi:
    40,960 MiB): the kernel takes 90 % / 3 = 12,288 MiB and holds it, its two workers share the rest
    (12,288 each), choose RING and all-reduce on the CPU (tensorflow-cpu sees no GPU: said so)."""
    from helpers.commands import gpucheck

    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'fakebin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    for name in [k for k in os.environ if k.startswith("SLURM_")] + ["COURSE_CLASS_LAYOUT", "COURSE_GPU_MEMORY_MIB"]:
        monkeypatch.delenv(name, raising=False)
    result = gpucheck.step_layout_gpu({}, 240)
    report(f"gpucheck layout-gpu on a simulated GPU: {json.dumps(result)[:900]}")
    assert result["status"] == "ok", result
    figures = result["figures"]
    assert figures["kernel_memory_mib"] == 12288 and figures["gpu_mib"] == 40960, figures
    assert [w["communication"] for w in figures["workers"]] == ["RING", "RING"], figures
    assert [w["memory_mib"] for w in figures["workers"]] == [12288, 12288], figures
    assert [w["visible"] for w in figures["workers"]] == ["0", "0"] and all(w["allreduce_4mb_s"] > 0
                                                                           for w in figures["workers"])
    assert "nothing ran on a GPU" in result["reason"]


@pytest.mark.parametrize("change, problem", [
    (lambda f: f["workers"][1].update(communication="NCCL"), "worker 1 chose NCCL, not RING"),
    (lambda f: f["workers"][0].update(memory_mib=0), "a process without a memory cap"),
    (lambda f: f.update(kernel_memory_mib=20000), "above 90 % of the GPU (36864 MiB)"),
    (lambda f: f["workers"].pop(), "1 of 2 workers reported"),
])
def test_the_gpu_layout_verdict_names_what_breaks_a_shared_gpu(change, problem):
    from helpers.commands.gpucheck import layout_verdict

    figures = {"gpu_mib": 40960, "kernel_memory_mib": 12288, "tensorflow_gpus_seen": 1,
               "workers": [{"rank": r, "communication": "RING", "memory_mib": 12288, "tensorflow_gpus_seen": 1}
                           for r in (0, 1)]}
    assert layout_verdict(figures) == {"status": "ok", "figures": figures, "reason": ""}
    change(figures)
    verdict = layout_verdict(figures)
    assert verdict["status"] == "failed" and problem in verdict["reason"], verdict


def test_the_two_node_step_is_one_task_and_one_gpu_on_each_of_two_nodes(monkeypatch):
    from helpers.commands import gpucheck

    command = gpucheck.allreduce_nodes_command(300, True)
    assert command[:7] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--export=ALL",
                           "--kill-on-bad-exit=1", "--time=5"] and "--gpus-per-task=1" in command, command
    assert command[-6:] == [sys.executable, "-m", "helpers.allreduce_probe", "--sizes-mb", "4", "94"], command
    assert "--gpus-per-task=1" not in gpucheck.allreduce_nodes_command(300, False)
    assert gpucheck.job_nodes({"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2"}) == 2
    assert gpucheck.job_nodes({"SLURM_JOB_NUM_NODES": "2"}) == 0  # not inside a job
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    skipped = gpucheck.step_allreduce_nodes({}, 300)
    assert skipped["status"] == "skipped" and "sbatch --nodes=2 slurm/gpucheck.sbatch" in skipped["reason"]
