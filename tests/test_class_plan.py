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
from helpers.commands.class_plan import plan, report as plan_report, reservation_command
from tests.conftest import ROOT, run_cli, squeue_empty


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


def test_thirty_learners_on_four_nodes_get_the_options_that_fit_with_their_arithmetic():
    """30 learners, 4 nodes of 4 A100 40GB: a GPU each holds 16; pairs need 15 servers (fit); MIG
    3g.20gb holds 2 x 16 = 32 (fit), its processes 90 % of a 20,090 MiB slice / 3; 1g.5gb 7 x 16 = 112."""
    from helpers.commands.class_fit import GPU_MODELS, jobs_at_once, lessons_minutes, options

    found = {o.name.split(":")[0]: o for o in options(30, 4, 4, GPU_MODELS["a100-40gb"])}
    gpu, pairs, mig3, mig2, mig1 = (found[k] for k in ("a GPU per learner", "pairs", "MIG 3g.20gb", "MIG 2g.10gb",
                                                          "MIG 1g.5gb"))
    assert (gpu.servers, gpu.holds, gpu.fits, gpu.memory_mib) == (30, 16, False, 12288)
    assert (pairs.servers, pairs.holds, pairs.fits, pairs.memory_mib, pairs.jobs_at_once) == (15, 16, True, 12288, 0)
    assert (mig3.holds, mig3.fits, mig3.memory_mib, mig3.compute) == (32, True, int(20090 * 0.9) // 3, 3 / 7)
    assert mig3.memory_mib == 6027 and mig3.jobs_at_once == 0  # the 2 free slices are both on node 4
    assert (mig2.holds, mig2.memory_mib, mig2.jobs_at_once) == (48, 2995, 6)  # free slices: 0, 0, 6, 12
    assert (mig1.holds, mig1.memory_mib, mig1.jobs_at_once) == (112, 1459, 41)  # free: 0, 26, 28, 28
    assert jobs_at_once([0, 0, 6, 12]) == 6 and jobs_at_once([2]) == 0 and jobs_at_once([3, 3]) == 3
    # 6 CPUs a node hold 3 servers (2 CPUs each): a GPU per learner then holds 12, MIG 3g.20gb too
    narrow = {o.name.split(":")[0]: o for o in options(30, 4, 4, GPU_MODELS["a100-40gb"], cpus_per_node=6)}
    assert narrow["a GPU per learner"].holds == 12 and narrow["MIG 3g.20gb"].holds == 12
    training, startup = lessons_minutes(1.0)
    assert lessons_minutes(3 / 7)[0] == pytest.approx(training * 7 / 3) and lessons_minutes(3 / 7)[1] == startup


def test_class_plan_with_four_nodes_available_prints_what_fits(report):
    done = run_cli("class", "plan", "--learners", "30", "--gpus-per-node", "4", "--nodes-available", "4")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    report("class plan --learners 30 --gpus-per-node 4 --nodes-available 4 (what fits):\n"
           + out[out.index("What fits"):])
    assert "What fits on 4 nodes (16 GPUs, A100 40GB, 40960 MiB each)" in out
    assert "- pairs: two learners at one server (one login, one screen): fits, 15 servers of 16" in out
    assert "- MIG 3g.20gb: 2 learners per GPU, a slice each: fits, 30 servers of 32" in out
    assert "6027 MiB per process (90 % / 3), 0.43 of a GPU's compute" in out and "(2.3x)" in out
    assert "- a CPU cohort in quick mode: 16 learners on the GPUs (a GPU each), 14 on CPU nodes (28 CPUs" in out
    assert "does not fit: a GPU per learner holds 16 of 30" in out
    assert "lesson jobs (2 nodes, lessons 08, 11, 16, 17): 6 at once, 5 wave(s)" in out  # MIG 2g.10gb
    eighty = run_cli("class", "plan", "--learners", "30", "--nodes-available", "4", "--gpu-model", "a100-80gb")
    assert eighty.returncode == 0 and "A100 80GB, 81920 MiB" in eighty.stdout and "24576 MiB each" in eighty.stdout
    assert "- MIG 3g.40gb: 2 learners per GPU, a slice each: fits" in eighty.stdout
    assert "12134 MiB per process" in eighty.stdout  # 90 % of a 40,448 MiB slice / 3
    unknown = run_cli("class", "plan", "--learners", "30", "--gpu-model", "a200")
    assert unknown.returncode != 0 and "unknown GPU model 'a200'" in unknown.stderr, unknown.stderr


def test_mig_memory_is_the_slice_s_not_the_whole_gpu_s(monkeypatch):
    """Under MIG, nvidia-smi's memory.total is the whole GPU (the stand-in prints 40960 then too):
    the slice's memory comes from `nvidia-smi -L`'s MIG lines, the one CUDA_VISIBLE_DEVICES names,
    else the smallest; the gpu layout's kernel shares that slice, not 40 GB."""
    import os

    from helpers import gpus

    monkeypatch.setenv("PATH", f"{ROOT / 'tests' / 'fakebin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("FAKE_MIG", raising=False)
    assert gpus.gpu_memory_mib() == 40960  # no MIG: memory.total, as before
    monkeypatch.setenv("FAKE_MIG", "3g.20gb,3g.20gb")
    assert "MIG 3g.20gb" in gpus.nvidia_smi("-L") and gpus.nvidia_smi("--query-gpu=memory.total",
                                                                      "--format=csv,noheader,nounits").split()[0] == "40960"
    assert gpus.gpu_memory_mib() == 20090
    monkeypatch.setenv("FAKE_MIG", "3g.20gb,1g.5gb")
    assert gpus.gpu_memory_mib() == 4864  # none named: the smallest slice listed
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-00000001-0000-5000-8000-000000000000")  # GPU 1's 3g.20gb
    assert gpus.gpu_memory_mib() == 20090
    monkeypatch.setenv("COURSE_CLASS_LAYOUT", "gpu")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    plan = gpus.plan_for_kernel()
    assert plan.memory_mib == int(20090 * 0.9) // 3 == 6027, plan
    assert gpus.mig_slice_mib("1g.10gb+me") == 9984 and gpus.mig_slice_mib("1c.3g.20gb") == 20090
    assert gpus.mig_slice_mib("1g.12gb") == int(12 * 1024 * 0.95)  # a size NVIDIA's table here does not list
    with pytest.raises(CourseError):
        gpus.mig_slice_mib("7g")


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
