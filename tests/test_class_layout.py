"""The two class layouts and GPU memory of every process the course starts, as decisions.

A simulated 4-GPU node (what Slurm 22.05 set for the tasks on the local Slurm with simulated GPUs,
tests/test_slurm_gpus.py) and an A100 40GB's memory (40960 MiB, what nvidia-smi would say): the
kernel, its engines (tasks of an srun step), local workers and batch workers are planned, and the
environment each process is given is checked. TensorFlow never sees these GPUs here.
"""

from __future__ import annotations

import pytest

from helpers import gpus
from helpers.class_settings import CLASS_SETTINGS, check_setting, class_settings
from helpers.slurm.submit import class_layout
from helpers.errors import CourseError
from helpers.local_workers import worker_env
from helpers.strategy import communication_for
from tests.conftest import ROOT, run_python

A100_MIB = 40960


@pytest.fixture(autouse=True)
def a100(monkeypatch):
    monkeypatch.setattr(gpus, "gpu_memory_mib", lambda: A100_MIB)


def test_class_settings_are_checked_words_and_numbers():
    assert class_settings({"COURSE_MODE": " Full ", "COURSE_EPOCHS": "07", "OTHER": "x", "COURSE_MAX_STEPS": ""}) \
        == {"COURSE_MODE": "full", "COURSE_EPOCHS": "7"}
    assert class_layout({}) == "node" and class_layout({"COURSE_CLASS_LAYOUT": "GPU"}) == "gpu"
    for name, bad in (("COURSE_EPOCHS", "1e3"), ("COURSE_EPOCHS", "-1"), ("COURSE_MAX_STEPS", "٣"),
                      ("COURSE_JOB_GPUS_PER_TASK", "65"), ("COURSE_CLASS_LAYOUT", "gpu;id"), ("COURSE_MODE", "")):
        with pytest.raises(CourseError, match=name):
            check_setting(name, bad)
    assert check_setting("COURSE_JOB_GPUS_PER_TASK", "0") == "0" and check_setting("COURSE_JOB_GPUS_PER_TASK", "Auto") == "auto"
    with pytest.raises(CourseError, match="not a class-wide setting"):
        check_setting("PATH", "/tmp")
    assert set(CLASS_SETTINGS) >= {"COURSE_MODE", "COURSE_EPOCHS", "COURSE_MAX_STEPS", "COURSE_CLASS_LAYOUT"}


def _kernel_env(layout: str, cvd: str, on_node: int, ntasks: int = 2) -> dict:
    return {"COURSE_CLASS_LAYOUT": layout, "CUDA_VISIBLE_DEVICES": cvd, "SLURM_GPUS_ON_NODE": str(on_node),
            "SLURM_NTASKS": str(ntasks), "SLURM_JOB_ID": "7"}


def test_node_layout_every_process_takes_memory_as_it_needs_it():
    """A learner's node, 4 GPUs: the kernel sees all 4 (lesson 01's replicas), its 2 engines (an
    srun step sharing --gres=gpu:4) 2 each, 2 local workers 2 each, 4 batch workers one each;
    every one of them grows its memory, none maps nearly all of every GPU at start."""
    kernel = _kernel_env("node", "0,1,2,3", 4)
    planned = {"kernel": gpus.plan_for_kernel(kernel)}
    planned.update({f"engine {r}": gpus.plan_for_task(2, r, 2, kernel) for r in range(2)})
    planned.update({f"local worker {r}": gpus.plan_for_local_worker(2, r, kernel) for r in range(2)})
    planned.update({f"batch worker {r}": gpus.plan_for_task(4, r, 4, {**kernel, "CUDA_VISIBLE_DEVICES": str(r)})
                    for r in range(4)})
    envs = {name: plan.env() for name, plan in planned.items()}
    print("\n".join(f"node layout {name}: {env}" for name, env in envs.items()))
    assert envs["kernel"] == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert [envs[f"engine {r}"]["CUDA_VISIBLE_DEVICES"] for r in range(2)] == ["0,1", "2,3"]
    assert [envs[f"batch worker {r}"]["CUDA_VISIBLE_DEVICES"] for r in range(4)] == ["0", "1", "2", "3"]
    assert all(env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and "COURSE_GPU_MEMORY_MIB" not in env
               for env in envs.values()), envs
    assert {communication_for(p.replicas, bool(p.memory_mib)) for p in planned.values()} == {"NCCL"}
    # the local workers' whole environment, as local_workers starts them
    env = worker_env(["localhost:10001", "localhost:10002"], 1, kernel)
    assert (env["CUDA_VISIBLE_DEVICES"], env["TF_FORCE_GPU_ALLOW_GROWTH"]) == ("2,3", "true")


def test_node_layout_still_refuses_two_workers_on_one_gpu():
    with pytest.raises(CourseError, match=r"2 tasks per node share 1 GPU"):
        gpus.plan_for_task(2, 0, 2, _kernel_env("node", "0", 1))
    assert gpus.plan_for_local_worker(2, 0, _kernel_env("node", "0", 1)).how == "hidden"


def test_gpu_layout_four_learners_share_a_node_a_gpu_each():
    """4 learners on one 4-GPU node, `--gpus=1 --ntasks=2` each: kernel and 2 engines share the
    learner's GPU, 90 % of 40960 MiB / 3 = 12288 MiB each, RING; no two learners share a GPU."""
    seen = {}
    for learner, gpu in enumerate("0123"):
        kernel = _kernel_env("gpu", gpu, 1)
        plans = [gpus.plan_for_kernel(kernel), *(gpus.plan_for_task(2, r, 2, kernel) for r in range(2))]
        envs = [plan.env() for plan in plans]
        print(f"gpu layout learner {learner}: " + "; ".join(f"{who} {env}" for who, env in
                                                           zip(("kernel", "engine 0", "engine 1"), envs)))
        assert {env["CUDA_VISIBLE_DEVICES"] for env in envs} == {gpu}, "the learner's processes share its GPU"
        assert {env["COURSE_GPU_MEMORY_MIB"] for env in envs} == {"12288"}
        assert {env["TF_FORCE_GPU_ALLOW_GROWTH"] for env in envs} == {"true"}  # a program ignoring its share grows
        assert 3 * 12288 <= 0.9 * A100_MIB
        assert {communication_for(p.replicas, gpus.shares_gpu(p.env())) for p in plans} == {"RING"}
        assert communication_for(1, gpus.shares_gpu(envs[1])) == "RING"
        seen[learner] = gpu
    assert len(set(seen.values())) == 4
    # local workers of a learner (lessons 02, 07): 2 workers and the kernel on the one GPU
    env = worker_env(["localhost:10001", "localhost:10002"], 0, _kernel_env("gpu", "2", 1))
    assert (env["CUDA_VISIBLE_DEVICES"], env["COURSE_GPU_MEMORY_MIB"]) == ("2", "12288")
    # lesson 07's 4 local workers, started by a kernel that took its share: they share what it left
    kernel = _kernel_env("gpu", "3", 1)
    kernel.update(gpus.plan_for_kernel(kernel).env())
    assert kernel["COURSE_KERNEL_GPU_MIB"] == kernel["COURSE_GPU_MEMORY_MIB"] == "12288"
    four = [gpus.plan_for_local_worker(4, r, kernel) for r in range(4)]
    assert [p.memory_mib for p in four] == [6144] * 4  # (36864 - 12288) / 4
    assert 12288 + sum(p.memory_mib for p in four) <= 0.9 * A100_MIB
    again = gpus.plan_for_local_worker(4, 0, {**kernel, **four[0].env()})  # resolved twice: the same share
    assert again.memory_mib == 6144
    # a batch job of the gpu layout with a GPU per task keeps its own GPUs, growing
    batch = gpus.plan_for_task(2, 1, 2, {**_kernel_env("gpu", "1", 2), "CUDA_VISIBLE_DEVICES": "1"})
    assert batch.how == "bound" and batch.env()["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"


def test_memory_shares():
    assert gpus.memory_share_mib(40960, 3) == 12288 and gpus.memory_share_mib(81920, 5) == 14745
    assert gpus.memory_share_mib(None, 3) == 2457  # nvidia-smi silent: 8192 assumed
    with pytest.raises(CourseError):
        gpus.memory_share_mib(40960, 0)
    assert gpus.learner_processes({"SLURM_NTASKS": "4"}) == 5 and gpus.learner_processes({}) == 3


def test_the_memory_limit_is_one_logical_device_per_gpu_before_tensorflow_starts(monkeypatch):
    """What `host.limit_gpu_memory` asks of TensorFlow (a recording stand-in: no GPU here)."""
    from helpers import host

    calls = []

    class Config:
        LogicalDeviceConfiguration = staticmethod(lambda memory_limit: ("limit", memory_limit))

        @staticmethod
        def list_physical_devices(kind):
            return ["GPU:0"] if kind == "GPU" else []

        @staticmethod
        def get_logical_device_configuration(device):
            return None

        @staticmethod
        def set_logical_device_configuration(device, config):
            calls.append((device, config))

    class FakeTF:
        config = Config

    monkeypatch.setenv("COURSE_GPU_MEMORY_MIB", "12288")
    assert host.limit_gpu_memory(FakeTF) == 12288 and calls == [("GPU:0", [("limit", 12288)])]
    monkeypatch.delenv("COURSE_GPU_MEMORY_MIB")
    assert host.limit_gpu_memory(FakeTF) is None and len(calls) == 1


@pytest.mark.parametrize("layout, expected", [("node", "1 true None"), ("gpu", "1 true 2457")])  # CPU wheel: 1 replica
def test_the_kernel_sets_memory_before_tensorflow_starts(layout, expected):
    """`local_replicas`, the lessons' first call, in a fresh kernel-like process whose environment
    names GPUs (TensorFlow, the CPU wheel, finds none): before it, the kernel mapped nearly all of
    every GPU; now growth (node layout) or the kernel's share (gpu layout: nvidia-smi silent, so
    8192 MiB assumed, / 3) is in the environment before TensorFlow is imported."""
    code = ("import os, sys\nfrom helpers.environment import local_replicas\n"
            "n = local_replicas(cpu_replicas=1)\n"
            "print('SEEN', n, os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH'), os.environ.get('COURSE_GPU_MEMORY_MIB'),"
            " 'tensorflow' in sys.modules)")
    cvd = "0,1" if layout == "node" else "0"
    done = run_python(code, env={"CUDA_VISIBLE_DEVICES": cvd, "COURSE_CLASS_LAYOUT": layout, "SLURM_NTASKS": "2",
                                 "PATH": "/usr/bin:/bin"})
    line = next((l for l in done.stdout.splitlines() if l.startswith("SEEN")), done.stdout + done.stderr[-2000:])
    assert line == f"SEEN {expected} True", line


def test_tensorflow_takes_the_memory_share_on_a_real_gpu():
    """Where TensorFlow sees a GPU: the share becomes one logical GPU of that size. Skipped here."""
    code = ("import os\nos.environ['COURSE_GPU_MEMORY_MIB'] = '1024'\nfrom helpers.host import import_tensorflow\n"
            "tf = import_tensorflow()\nfound = tf.config.list_physical_devices('GPU')\n"
            "print('SEEN', [c.memory_limit for c in tf.config.get_logical_device_configuration(found[0])]"
            " if found else 'no GPU')")
    done = run_python(code)
    line = next((l for l in done.stdout.splitlines() if l.startswith("SEEN")), done.stderr[-2000:])
    if line == "SEEN no GPU":
        pytest.skip("TensorFlow sees no GPU here (CPU wheel, simulated GPUs only): the memory limit on a real "
                    "GPU is not verified")
    assert line == "SEEN [1024]", line


def test_the_lessons_all_reduce_follows_the_layout_and_the_build(monkeypatch):
    """`collective_for_this_process`, what lessons 03, 07 and 12 ask: NCCL only on GPUs of a process's own
    that its TensorFlow can use (the GPU wheel is stood in for here: this machine has the CPU wheel)."""
    from helpers import strategy

    monkeypatch.setattr(strategy, "tensorflow_is_cpu_build", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("COURSE_GPU_MEMORY_MIB", raising=False)
    assert strategy.collective_for_this_process() == "NCCL"  # node layout: an engine's own two GPUs
    assert strategy.collective_for_this_process(replicas=4) == "RING"  # two GPUs split into four
    assert strategy.collective_for_this_process(gpus=2) == "NCCL"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("COURSE_GPU_MEMORY_MIB", "12288")  # gpu layout: a share of the learner's GPU
    assert strategy.collective_for_this_process() == "RING"
    monkeypatch.delenv("COURSE_GPU_MEMORY_MIB")
    monkeypatch.setattr(strategy, "tensorflow_is_cpu_build", lambda: True)  # CPU wheel: NCCL would wait
    assert strategy.collective_for_this_process() == "RING"
    assert strategy.collective_for_this_process(gpus=2) == "RING"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(strategy, "tensorflow_is_cpu_build", lambda: False)
    assert strategy.collective_for_this_process() == "RING"  # no GPU



@pytest.mark.parametrize("given, expected", [(None, "true"), ("false", "false")])
def test_importing_the_course_makes_any_tensorflow_grow_its_gpu_memory(given, expected):
    """A kernel's data preparation starts TensorFlow through tensorflow-datasets before any plan of the
    course's: it mapped nearly all of every GPU the node layout's server sees, which its engines need
    next (tests/test_lessons_in_class_layouts.py found the kernel so). Importing `helpers` sets growth;
    a value in the environment is kept."""
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", **({"TF_FORCE_GPU_ALLOW_GROWTH": given} if given else {})}  # not pytest's
    done = subprocess.run([sys.executable, "-c", "import os, helpers\nprint('SEEN', os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH'))"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert f"SEEN {expected}" in done.stdout, done.stdout + done.stderr[-2000:]
