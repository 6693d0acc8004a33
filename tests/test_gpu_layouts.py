"""GPU layouts and step layouts, as pure decisions over the variables Slurm sets.

The environments below are what Slurm 22.05 gave the tasks on the local Slurm with simulated
GPUs (tests/test_slurm_gpus.py runs the same layouts through real srun, with and without
ConstrainDevices, where each task sees its GPUs renumbered from 0).
"""

from __future__ import annotations

import pytest

from helpers import gpus
from helpers.slurm import step as slurm_step
from helpers.errors import CourseError


def task_env(cvd: str | None, on_node: int | None, **more) -> dict:
    env = {k: str(v) for k, v in more.items()}
    if cvd is not None:
        env["CUDA_VISIBLE_DEVICES"] = cvd
    if on_node is not None:
        env["SLURM_GPUS_ON_NODE"] = str(on_node)
    return env


@pytest.mark.parametrize("layout, cvd_by_local_rank, tasks, expected", [
    # --ntasks-per-node=4 --gpus-per-task=1: each task its own GPU, node numbering
    ("gpus-per-task", ["0", "1", "2", "3"], 4, [("0",), ("1",), ("2",), ("3",)]),
    # the same with ConstrainDevices=yes: every task sees its GPU as 0
    ("gpus-per-task, cgroups", ["0", "0", "0", "0"], 4, [("0",), ("0",), ("0",), ("0",)]),
    # --ntasks-per-node=4 --gres=gpu:4: all see all 4 -> narrowed by local rank
    ("shared gres", ["0,1,2,3"] * 4, 4, [("0",), ("1",), ("2",), ("3",)]),
    # --ntasks-per-node=2 --gres=gpu:4: two each
    ("shared gres, 2 per node", ["0,1,2,3"] * 2, 2, [("0", "1"), ("2", "3")]),
    # --ntasks-per-node=1 --gres=gpu:4: all of them
    ("one task per node", ["0,1,2,3"], 1, [("0", "1", "2", "3")]),
    # --ntasks-per-node=2 --gres=gpu:4 --gpu-bind=single:1 (bound by Slurm, not per-task option)
    ("gpu-bind", ["0", "1"], 2, [("0",), ("1",)]),
])
def test_every_task_gets_gpus_of_its_own(layout, cvd_by_local_rank, tasks, expected):
    plans = [gpus.plan_for_task(tasks, local, tasks, task_env(cvd, 4)) for local, cvd in enumerate(cvd_by_local_rank)]
    assert [p.gpus for p in plans] == expected, layout
    assert len({p.replicas for p in plans}) == 1, "every worker needs the same number of replicas"
    if "cgroups" not in layout:  # node numbering: no two workers on one GPU
        used = [g for p in plans for g in p.gpus]
        assert len(used) == len(set(used))


def test_cpu_nodes_have_no_gpu_plan():
    plan = gpus.plan_for_task(2, 1, 2, task_env("", None))
    assert (plan.gpus, plan.how, plan.visible_devices, plan.env()) == ((), "cpu", None, {})
    assert gpus.plan_for_task(2, 1, 2, {}).how in ("cpu",)  # no GPU variables, no nvidia-smi here


def test_uneven_tasks_share_alike_and_say_what_stays_idle():
    """-n 3 over 2 nodes with --gres=gpu:4: 2 tasks on node1, 1 on node2; all must have 2."""
    node1 = [gpus.plan_for_task(2, local, 2, task_env("0,1,2,3", 4)) for local in range(2)]
    node2 = gpus.plan_for_task(1, 0, 2, task_env("0,1,2,3", 4))
    assert [p.gpus for p in node1] == [("0", "1"), ("2", "3")]
    assert node2.gpus == ("0", "1")
    assert "2 of 4 GPUs on this node stay idle" in node2.note


def test_a_task_alone_on_its_node_keeps_the_gpu_per_task_it_asked_for():
    """3 tasks on 2 nodes with --gpus-per-task=1: the lone task on node2 sees its one GPU, which is all
    the job has there (SLURM_GPUS_ON_NODE=1); it is bound, not 2 tasks sharing 1 GPU (a review found
    lesson 16's 3-worker job refused this way on the local Slurm)."""
    env = {**task_env("0", 1), "SLURM_GPUS_PER_TASK": "1"}
    plan = gpus.plan_for_task(1, 0, 2, env)
    assert (plan.gpus, plan.how) == (("0",), "bound")
    with pytest.raises(CourseError, match="share 1 GPU"):  # without --gpus-per-task it would be sharing
        gpus.plan_for_task(1, 0, 2, task_env("0", 1))


def test_fewer_gpus_than_tasks_is_a_clear_error():
    with pytest.raises(CourseError, match=r"4 tasks per node share 2 GPU\(s\).*--ntasks-per-node=2"):
        gpus.plan_for_task(4, 0, 4, task_env("0,1", 2))
    with pytest.raises(CourseError, match="some tasks share a GPU"):
        gpus.plan_for_task(4, 0, 4, task_env("0", 2))  # bound, but 4 tasks on 2 GPUs


def test_resolving_twice_keeps_the_first_decision():
    first = gpus.plan_for_task(2, 1, 2, task_env("0,1,2,3", 4))
    again = gpus.plan_for_task(2, 1, 2, task_env(first.visible_devices, 4))
    assert again.gpus == first.gpus == ("2", "3")


@pytest.mark.parametrize("n, visible, expected, how", [
    (2, "0,1,2,3", [("0", "1"), ("2", "3")], "shared"),
    (2, "0,1", [("0",), ("1",)], "shared"),
    (1, "0,1", [("0", "1")], "all"),
    (2, "0", [(), ()], "hidden"),  # one GPU, two workers: both on CPU, and a note
    (2, "", [(), ()], "cpu"),
])
def test_local_workers_get_a_gpu_each(n, visible, expected, how):
    plans = [gpus.plan_for_local_worker(n, i, {"CUDA_VISIBLE_DEVICES": visible}) for i in range(n)]
    assert [p.gpus for p in plans] == expected and plans[0].how == how
    if how == "hidden":
        assert plans[0].visible_devices == "" and "run on CPU" in plans[0].note
    if expected[0]:
        assert plans[0].env()["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"


# ------------------------------------------------------------------- step layouts
def step_env(procid: int, nodelist: str, tasks: str, **more) -> dict:
    counts = slurm_step.expand_tasks_per_node(tasks)
    return {"SLURM_PROCID": str(procid), "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_TASKS_PER_NODE": tasks,
            "SLURM_STEP_NUM_TASKS": str(sum(counts)), "SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0",
            **{k: str(v) for k, v in more.items()}}


def test_hosts_in_slurm_order_not_sorted():
    """gpu[9-10]: rank 0 runs on gpu9; TensorFlow's resolver sorts the names and says gpu10."""
    layout = slurm_step.step_layout(step_env(0, "gpu[9-10]", "1(x2)", SLURM_NODEID=0, SLURM_LOCALID=0))
    assert layout.workers(12000) == ["gpu9:12000", "gpu10:12000"]


def test_cyclic_distribution_as_slurm_placed_it():
    """srun -N2 -n4 --distribution=cyclic gave ranks 0,2,3 on node1 and 1 on node2 (tasks 3,1)."""
    seen = {0: ("0", "0"), 1: ("1", "0"), 2: ("0", "1"), 3: ("0", "2")}  # rank -> (SLURM_NODEID, SLURM_LOCALID)
    for rank, (node, local) in seen.items():
        layout = slurm_step.step_layout(step_env(rank, "node[1-2]", "3,1", SLURM_DISTRIBUTION="cyclic",
                                                 SLURM_NODEID=node, SLURM_LOCALID=local))
        assert layout.local_rank == int(local)
    assert layout.workers(10000) == ["node1:10000", "node2:10000", "node1:10001", "node1:10002"]


def test_a_task_that_is_not_where_the_layout_says_stops():
    env = step_env(1, "node[1-2]", "2(x2)", SLURM_NODEID=1, SLURM_LOCALID=0, SLURM_DISTRIBUTION="plane=2")
    with pytest.raises(CourseError, match="block and cyclic"):
        slurm_step.step_layout(env)
    env = step_env(1, "node[1-2]", "2(x2)", SLURM_NODEID=1, SLURM_LOCALID=0)  # block says node1
    with pytest.raises(CourseError, match="rank 1 runs on node 1 as local task 0.*puts it on node1"):
        slurm_step.step_layout(env)


@pytest.mark.parametrize("spec", ["node[1-", "node[a-b]", ""])
def test_bad_host_lists(spec):
    with pytest.raises(CourseError):
        slurm_step.expand_hostlist(spec)


def test_port_blocks_of_nearby_jobs_and_steps_do_not_overlap():
    def block(job: int, step: int, per_node: int = 4) -> range:
        layout = slurm_step.StepLayout(rank=0, nodes=("n1",), tasks=(per_node,), hosts=("n1",) * per_node,
                                       job_id=job, step_id=step)
        base = slurm_step.port_base(layout, 10000, 20000)
        assert 10000 <= base and base + per_node - 1 <= 20000
        return range(base, base + per_node)

    blocks = [block(job, step) for job in range(100, 140) for step in range(slurm_step.STEPS_PER_JOB)]
    ports = [p for b in blocks for p in b]
    assert len(ports) == len(set(ports)), "two steps of nearby jobs share a port"
    with pytest.raises(CourseError, match="fewer ports than the 4 tasks"):
        slurm_step.port_base(slurm_step.StepLayout(0, ("n1",), (4,), ("n1",) * 4, 1, 0), 10000, 10002)
