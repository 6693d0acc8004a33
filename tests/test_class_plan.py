"""`python -m helpers class plan`: a class's arithmetic, and the plan held against the local Slurm.

The local Slurm (tests/conftest.py `slurm`): node1, node2 with 4 simulated GPUs and 8 CPUs each.
The plan for 8 learners in the GPU-per-learner layout says their servers fit on those 2 nodes;
the test then makes the plan's reservation with its own `scontrol` line and runs 8 server-shaped
jobs (`--gpus=1 --ntasks=2`) in it: all 8 run at once, each on a GPU of its own, and a ninth waits.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from helpers.errors import CourseError
from helpers.tools.class_plan import plan, report as plan_report, reservation_command
from tests.conftest import run_cli, squeue_empty


def test_thirty_learners_on_four_gpu_nodes():
    needs = plan(30, 4)
    node, gpu = needs["node"], needs["gpu"]
    assert (node.server_nodes, node.job_nodes, node.nodes) == (30, 60, 90)  # 30 jobs of 2 whole nodes
    assert (gpu.server_nodes, gpu.job_nodes, gpu.nodes, gpu.memory_mib) == (8, 15, 23, 12288)
    assert plan(30, 4, jobs_at_once=0)["gpu"].nodes == 8 and plan(30, 4, jobs_at_once=1)["gpu"].job_nodes == 2
    assert plan(30, 4, cpus_per_node=6)["gpu"].per_node == 3  # 2 CPUs a learner: 3 per node, 10 nodes
    assert plan(30, 4, cpus_per_node=6)["gpu"].server_nodes == 10
    assert plan(30, 8, gpu_mib=81920)["gpu"].memory_mib == 24576
    # 10 nodes left: 5 jobs at a time; 4 nodes of 4 GPUs: 8 jobs of one GPU on each of 2 nodes
    assert node.waves(40) == 6 and node.waves(31) == 0 and gpu.waves(23) == 1 and gpu.waves(12) == 4
    for bad in ({"learners": 0, "gpus_per_node": 4}, {"learners": 3, "gpus_per_node": 4, "jobs_at_once": 4},
                {"learners": 3, "gpus_per_node": 4, "cpus_per_node": 1}):
        with pytest.raises(CourseError):
            plan(**bad)


def test_the_command_prints_both_layouts(report):
    done = run_cli("class", "plan", "--learners", "30", "--gpus-per-node", "4")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    report("class plan --learners 30 --gpus-per-node 4:\n" + out)
    assert "30 for the servers + 60 for 30 lesson jobs of 2 nodes = 90" in out
    assert "ceil(30/4) = 8 for the servers (4 learners per node) + 15 for 30 lesson jobs" in out and "= 23" in out
    assert "12288 MiB each" in out and "RING" in out and "no authentication" in out
    assert out.count("scontrol create reservation") == 2 and "NodeCnt=90" in out and "NodeCnt=23" in out
    assert 'COURSE_HUB_OPTIONS="--nodes=1 --ntasks=4 --gres=gpu:4 --exclusive"' in out
    bad = run_cli("class", "plan", "--gpus-per-node", "4")
    assert bad.returncode == 2 and "--learners" in bad.stderr


def _sinfo(env: dict) -> dict:
    """node -> (CPUs, GPUs) of the default partition, as sinfo reports them."""
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "debug", "-o", "%N %c %G"], env=env, capture_output=True,
                         text=True, timeout=30).stdout
    found = {}
    for line in out.splitlines():
        name, cpus, gres = line.split()
        found[name] = (int(cpus), int(gres.split(":")[-1].split("(")[0]) if gres.startswith("gpu") else 0)
    return found


@pytest.mark.slurm
def test_the_plan_for_eight_learners_fits_the_local_slurm(slurm, report):
    env = slurm["env"]
    nodes = _sinfo(env)
    assert nodes == {"node1": (8, 4), "node2": (8, 4)}, nodes
    cpus, gpus = nodes["node1"]
    needs = plan(8, gpus, cpus_per_node=cpus, jobs_at_once=0)["gpu"]
    assert (needs.per_node, needs.server_nodes) == (4, 2) and needs.server_nodes <= len(nodes)
    text = reservation_command(needs.server_nodes, "plan-test", "now", "10", "root", "debug")
    report_text = plan_report(8, gpus, cpus, len(nodes), jobs_at_once=1)
    assert "servers fit: yes; lesson jobs: cannot run" in report_text  # the gpu layout: 2 nodes, no more
    made = subprocess.run(text.split(), env=env, capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    ids = []
    try:
        shown = subprocess.run(["scontrol", "show", "reservation", "plan-test"], env=env, capture_output=True,
                               text=True, timeout=30).stdout
        assert "NodeCnt=2" in shown and "Nodes=node[1-2]" in shown, shown
        for _ in range(needs.learners + 1):  # the plan's 8 servers, and one more
            sent = subprocess.run(["sbatch", "--parsable", "--reservation=plan-test", "--nodes=1", "--ntasks=2",
                                   "--gpus=1", "--time=5", "-o", "/dev/null", "--wrap",
                                   "echo $CUDA_VISIBLE_DEVICES; sleep 120"], env=env, capture_output=True,
                                  text=True, timeout=30)
            assert sent.returncode == 0, sent.stderr
            ids.append(sent.stdout.strip())
        deadline, running = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            rows = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T %N %b %r"], env=env,
                                  capture_output=True, text=True, timeout=30).stdout.splitlines()
            running = [r.split() for r in rows if r.split()[1] == "RUNNING"]
            if len(running) == needs.learners:
                break
            time.sleep(0.5)
        waiting = [r for r in rows if r.split()[1] == "PENDING"]
        placed = sorted(_job_gpu(env, row[0]) for row in running)
    finally:
        subprocess.run(["scancel", *ids], env=env, timeout=30)
        assert squeue_empty(env, within=60)
        subprocess.run(["scontrol", "delete", "reservation", "plan-test"], env=env, timeout=30)
    report(f"class plan on the local Slurm: 8 learners, gpu layout: {len(running)} server jobs ran at once on "
           f"{', '.join(f'{n} GPU {g}' for n, g in placed)}; the ninth waited ({waiting[0].split()[-1] if waiting else '-'})")
    assert len(running) == needs.learners, rows
    assert len(set(placed)) == 8, f"two learners on one GPU: {placed}"
    assert len(waiting) == 1, rows


def _job_gpu(env: dict, job: str) -> tuple[str, str]:
    """(node, GPU index) Slurm gave a running job (scontrol show job -d: `GRES=gpu:1(IDX:N)`)."""
    import re

    shown = subprocess.run(["scontrol", "show", "job", "-d", job], env=env, capture_output=True, text=True,
                           timeout=30).stdout
    match = re.search(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=\S*\(IDX:(\d+)\)", shown)
    assert match, shown
    return match.group(1), match.group(2)
