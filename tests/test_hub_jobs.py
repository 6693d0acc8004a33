"""Batch jobs a learner submits from a JupyterHub server that is itself a Slurm job with GPUs.

The server job is started as a GPU class would (req_options, what COURSE_HUB_OPTIONS sets, with
--gpus-per-task=1); in
it, lessons 08 and 11 run as a learner runs them (executed by nbconvert from the server's
kernel, so their kernels carry the server job's environment). Each job they submit must be
accepted, get the GPUs the class layout gives (simulated GPUs: TensorFlow's CPU wheel trains on
the CPU), and finish. Root only, under the shared lock.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, squeue_empty
from tests.hub_support import new_hub, run_in_kernel, unix_learners, wait_server

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
        logs = {kind: sorted(p.name for p in (home / "course-output").rglob(f"{kind}-*.out")) for kind in ("tf-mwms", "tf-requeue")}
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
