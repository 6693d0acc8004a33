"""The GPU class day's headline: four learners, a GPU each, on one 4-GPU node, engines at once, through the hub.

On the local Slurm with simulated GPUs (tests/conftest.py `slurm`: node1 has 4 GPUs and 8 CPUs).
Four Unix learners on a hub started with COURSE_CLASS_LAYOUT=gpu: each server is the job the hub
submits in the GPU-per-learner layout (`--nodes=1 --ntasks=2 --gpus=1`, pinned to node1 here); each
learner's kernel runs `start_engines(2)` (an `srun` step of the same job), then, on each engine, the
course's resolver (`helpers.resolver.resolve_step`, without TensorFlow, as lesson 03's Slurm resolution
does before TensorFlow starts). All four kernels hold their engines at once. Checked: each engine sees
only its learner's GPU (CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS), the same within a learner and
distinct between learners; each learner's engines are ranks 0 and 1 of one cluster on node1 whose
TF_CONFIG names both, on ports no other learner's workers use; each process's memory share (90 % of the
stand-in nvidia-smi's 40960 MiB / 3), growth, RING collectives, and the kernel's own plan. Until
2026-11-29 the same four jobs were also submitted with `sbatch` as root, a second run of the same checks
without the hub. Not run: TensorFlow on these GPUs (the CPU wheel sees none; a kernel on a real GPU is
not tested).
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from helpers.engines.on_slurm import is_engines_job_name
from tests.conftest import ROOT, squeue_empty

pytestmark = pytest.mark.slurm
FAKEBIN = ROOT / "tests" / "fakebin"
LEARNERS = 4

ON_ENGINE = r'''
def on_engine():
    """What lesson 03's Slurm resolution gives this engine, before TensorFlow starts."""
    import json, os, sys
    from helpers import gpus
    from helpers.resolver import make_tf_config, resolve_step
    from helpers.strategy import communication_for
    layout, plan, workers = resolve_step()
    return {"rank": layout.rank, "host": os.environ.get("SLURMD_NODENAME"), "workers": workers,
            "tf_config": make_tf_config(workers, layout.rank), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "step_gpus": os.environ.get("SLURM_STEP_GPUS"), "memory_mib": os.environ.get("COURSE_GPU_MEMORY_MIB"),
            "growth": os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"), "how": plan.how,
            "all_reduce": communication_for(plan.replicas, gpus.shares_gpu()), "tensorflow": "tensorflow" in sys.modules}
'''
KERNEL_CELLS = [
    "from helpers.engines import start_engines\nengines = start_engines(2)",
    "import json, os\nfrom helpers import gpus\n" + ON_ENGINE
    + "found = engines.client[:].apply_sync(on_engine)\n"
      "print('SEEN ' + json.dumps({'engines': found, 'kernel_env': gpus.plan_for_kernel().env(),"
      " 'job_gpus': os.environ.get('CUDA_VISIBLE_DEVICES'), 'layout': os.environ.get('COURSE_CLASS_LAYOUT')}))",
]


@pytest.mark.timeout(1200)
def test_four_learners_through_the_hub_a_gpu_each(slurm, tmp_path, report):
    """Four Unix learners, COURSE_CLASS_LAYOUT=gpu in the hub's environment (the layout's server job,
    pinned to node1 here), each starts 2 engines from a kernel (REST + websocket, as JupyterLab does);
    while all four kernels hold their engines, squeue shows four engine steps on node1."""
    import threading

    from tests.support.hub import new_hub, run_in_kernel, unix_learners, wait_server

    with unix_learners(LEARNERS, prefix="gd") as learners:
        hub, token = new_hub(tmp_path, slurm, {l["name"]: l["password"] for l in learners},
                             "c.SlurmSpawner.req_options = '--nodes=1 --ntasks=2 --gpus=1 --nodelist=node1'\n"
                             "c.SlurmSpawner.start_timeout = 300\n",
                             env={"COURSE_CLASS_LAYOUT": "gpu", "PATH": f"{FAKEBIN}:{slurm['env']['PATH']}"})
        seen, errors, steps = {}, {}, ""
        started = time.monotonic()
        try:
            for learner in learners:
                status, body = hub.call("POST", f"/hub/api/users/{learner['name']}/server", token)
                assert status in (201, 202), (status, body)

            def learner_kernel(name: str) -> None:
                try:
                    wait_server(hub, name, token, 300)
                    outs = run_in_kernel(hub, name, token, KERNEL_CELLS, timeout=300, keep=True)
                    seen[name] = json.loads(next(l for l in outs[1].splitlines() if l.startswith("SEEN "))[5:])
                except BaseException as exc:  # noqa: BLE001 - shown below
                    errors[name] = f"{type(exc).__name__}: {str(exc)[:1500]}"

            threads = [threading.Thread(target=learner_kernel, args=(l["name"],)) for l in learners]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(600)
            took = time.monotonic() - started
            steps = subprocess.run(["squeue", "-h", "-s", "-o", "%i %u %j %N %A"], env=slurm["env"],
                                   capture_output=True, text=True, timeout=30).stdout
            for learner in learners:
                hub.call("DELETE", f"/hub/api/users/{learner['name']}/server", token)
            assert not errors, errors
        except Exception as exc:
            logs = "".join(f"--- {log.name}\n{log.read_text()[-2000:]}" for l in learners
                           for log in sorted(l["home"].glob("jupyterhub-course-*.log")))
            raise AssertionError(f"{exc}\n--- hub log\n{hub.tail()}\n{logs}") from None
        finally:
            hub.stop()
        assert squeue_empty(slurm["env"], within=60)
    engine_steps = [row for row in (line.split() for line in steps.splitlines())
                    if is_engines_job_name(row[2]) and row[3] == "node1"]
    users = {row[1] for row in engine_steps}
    assert users == {l["name"] for l in learners}, f"every learner's engines running at once on node1:\n{steps}"
    gpus_by_learner = {}
    for name, result in seen.items():
        engines = sorted(result["engines"], key=lambda e: e["rank"])
        gpu = result["job_gpus"]
        assert result["layout"] == "gpu" and [e["rank"] for e in engines] == [0, 1], result
        assert {e["host"] for e in engines} == {"node1"}, result
        workers = engines[0]["workers"]
        assert len(workers) == 2 and len(set(workers)) == 2 and all(e["workers"] == workers for e in engines), result
        for e in engines:
            assert e["tf_config"] == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": e["rank"]}}
            assert (e["cvd"], e["step_gpus"]) == (gpu, gpu), (e, gpu)  # the learner's GPU, nothing else
            assert (e["how"], e["memory_mib"], e["growth"], e["all_reduce"]) == ("memory", "12288", "true", "RING"), e
            assert not e["tensorflow"], e  # the course's resolution, before TensorFlow starts
        assert result["kernel_env"] == {"CUDA_VISIBLE_DEVICES": gpu, "COURSE_GPU_MEMORY_MIB": "12288",
                                        "COURSE_KERNEL_GPU_MIB": "12288", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}, result
        gpus_by_learner[name] = (gpu, workers)
    assert sorted(g for g, _ in gpus_by_learner.values()) == ["0", "1", "2", "3"], gpus_by_learner  # distinct GPUs
    ports = [w for _, ws in gpus_by_learner.values() for w in ws]
    assert len(ports) == len(set(ports)), f"two learners' workers on one port: {ports}"
    report("GPU class day through the hub: 4 learners, servers '--nodes=1 --ntasks=2 --gpus=1' on node1: "
           + "; ".join(f"GPU {g} engines at {', '.join(ws)}" for g, ws in sorted(gpus_by_learner.values()))
           + f"; {len(engine_steps)} engine steps of {len(users)} learners running at once; {took:.1f} s from spawn")
