"""Batch jobs a learner submits from a JupyterHub server that is itself a Slurm job with GPUs.

The server job is started as a GPU class would (req_options, what COURSE_HUB_OPTIONS sets, with
--gpus-per-task=1); in
it, lessons 08 and 11 run as a learner runs them (executed by nbconvert from the server's
kernel, so their kernels carry the server job's environment). Each job they submit must be
accepted, get the GPUs the class layout gives (simulated GPUs: TensorFlow's CPU wheel trains on
the CPU), and finish. Lesson 11's jobs are also read for Slurm's side of the requeue: each warned
job (its chief alone warns itself with SIGUSR1, --warn: Slurm's --signal would reach every task at
once, which cannot show the workers' agreement; the custom loop, the loop with
PreemptionCheckpointHandler, fit) saved, stopped, was requeued, ran again from its checkpoint and
completed; the notebook's own proof checks the weights and that only the chief was warned. This is the course's one
run of lessons 08 and 11 on Slurm from a notebook, as a class runs them (test_slurm runs lesson 08
once more outside a job with GPUs, where its jobs must ask for none). Root only, under the shared lock.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, squeue_empty, workers_visible_devices
from tests.support.hub import new_hub, run_in_kernel, unix_learners, wait_server

pytestmark = pytest.mark.slurm
SERVER_OPTIONS = "--nodes=1 --ntasks=2 --gpus-per-task=1"

RUN_LESSON = """
import json, os, subprocess, sys, time
from pathlib import Path
began = time.monotonic()
out = Path.home() / "executed"
env = {**os.environ, "COURSE_MODE": "quick", "COURSE_OUTPUT_DIR": str(Path.home() / "course-output")}
done = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                       "--ExecutePreprocessor.timeout=900", "--output-dir", str(out), "notebooks/__NAME__.ipynb"],
                      cwd=Path.home(), env=env, capture_output=True, text=True, timeout=1500)
texts = []
if (out / "__NAME__.ipynb").exists():
    for cell in json.loads((out / "__NAME__.ipynb").read_text())["cells"]:
        for o in cell.get("outputs", []):
            texts.append(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"]))
print("LESSON " + json.dumps({"status": done.returncode, "seconds": round(time.monotonic() - began),
                              "server": {k: os.environ.get(k) for k in ("SLURM_JOB_ID", "SLURM_GPUS_ON_NODE",
                                                                      "SLURM_GPUS_PER_TASK")},
                              "stderr": done.stderr[-1500:], "outputs": texts}))
"""


def _lesson(hub, user: str, token: str, name: str) -> dict:
    outputs = run_in_kernel(hub, user, token, [RUN_LESSON.replace("__NAME__", name)], timeout=1600)
    line = next((l for l in outputs[0].splitlines() if l.startswith("LESSON ")), None)
    assert line, outputs
    return json.loads(line[7:])


def _requeue_timeline(log: Path) -> tuple[bool, str]:
    """One job of lesson 11 from its log, asserting it ran once or was requeued once: (requeued, its timeline)."""
    text = log.read_text()
    runs = [line.split() for line in text.splitlines() if line.startswith("RUN ")]
    events = [json.loads(l[6:]) for l in text.splitlines() if l.startswith("EVENT ") and '"rank": 0' in l]
    restarts = [int(r[2]) for r in runs]
    assert restarts in ([0], [0, 1]), f"{log.name}: runs {restarts}"
    start, saved = float(runs[0][3]), None
    line = [f"job run {r[2]} began at {float(r[3]) - start:.1f} s" for r in runs[:1]]
    for e in events:
        where = f"step {e['step']}" if "step" in e else f"epoch {e.get('epoch')} + {e.get('batch')} steps"
        if e["event"] == "saved":
            saved = where
        elif e["event"] == "stopped":
            line.append(f"warned ({', '.join(e['warnings']) or 'by a peer'}), saved at {saved} and stopped at "
                        f"{e['time'] - start:.1f} s")
        elif e["event"] == "start" and e.get("run"):
            line.append(f"requeued run {e['run']} began at {float(runs[1][3]) - start:.1f} s and resumed from "
                        f"{where} at {e['time'] - start:.1f} s")
        elif e["event"] == "finished":
            line.append(f"finished at {e['time'] - start:.1f} s")
    return restarts == [0, 1], f"{log.name}: " + "; ".join(line)


def test_lessons_08_and_11_submit_their_jobs_from_a_gpu_server(slurm, tmp_path, report):
    with unix_learners(1) as (learner,):
        user, home = learner["name"], learner["home"]
        shutil.copytree(ROOT / "notebooks", home / "notebooks")
        subprocess.run(["chown", "-R", f"{user}:{user}", str(home / "notebooks")], check=True)
        # the shipped config reads COURSE_HUB_OPTIONS; the tests' config sets req_options after it
        hub, token = new_hub(tmp_path, slurm, {user: learner["password"]},
                             f"c.SlurmSpawner.req_options = {SERVER_OPTIONS!r}\n")
        try:
            status, body = hub.call("POST", f"/hub/api/users/{user}/server", token)
            assert status in (201, 202), f"spawn answered {status}: {body}"
            wait_server(hub, user, token, 180)
            found = {name: _lesson(hub, user, token, name) for name in ("08_batch_job", "11_checkpoints_requeue")}
        finally:
            hub.call("DELETE", f"/hub/api/users/{user}/server", token)
            hub.stop()
        assert squeue_empty(slurm["env"], within=60)
        logs = {kind: sorted((home / "course-output").rglob(f"{kind}-*.out")) for kind in ("tf-mwms", "tf-requeue")}
        visible = workers_visible_devices(logs["tf-mwms"][0].read_text()) if logs["tf-mwms"] else []
        timelines = [_requeue_timeline(log) for log in logs["tf-requeue"]]
    for name, lesson in found.items():
        shown = [l for t in lesson["outputs"] for l in t.splitlines()
                 if l.startswith(("submitting to Slurm", "Slurm, with", "class layout", "        job", "job "))
                 or "ran OverSubscribe" in l]
        report(f"{Path(__file__).stem}: {name} in a server job {lesson['server']}: exit {lesson['status']} after "
               f"{lesson['seconds']} s; {shown[:8]}")
    for name, lesson in found.items():
        assert lesson["status"] == 0, f"{name}: {lesson['stderr']}\n{lesson['outputs'][-3:]}"
        assert lesson["server"]["SLURM_GPUS_ON_NODE"] not in (None, "0"), lesson["server"]
    text08 = "\n".join(found["08_batch_job"]["outputs"])
    assert "submitting to Slurm with --exclusive=user --gpus-per-task=1" in text08, text08[-3000:]
    assert "the job ran OverSubscribe=USER with 2 GPU(s)" in text08, text08[-3000:]  # the proof's last line
    text11 = "\n".join(found["11_checkpoints_requeue"]["outputs"])
    assert "Slurm, with --exclusive=user --gpus-per-task=1" in text11, text11[-3000:]
    assert len(logs["tf-mwms"]) == 1 and len(logs["tf-requeue"]) == 5, logs
    # one index each (the local Slurm does not constrain devices, so an index is the node's own: on node1,
    # where the server's job holds GPUs 0 and 1, the job's worker sees 2)
    assert visible and all(v.isdigit() for v in visible), \
        f"each of lesson 08's workers should see its one GPU: CUDA_VISIBLE_DEVICES {visible}"
    for _, line in timelines:
        report("requeue timeline " + line)
    assert sum(requeued for requeued, _ in timelines) == 3, \
        "the three warned jobs (custom loop, handler, fit) should have been requeued once each"
