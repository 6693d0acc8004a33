"""The Slurm engine path's decisions, without a Slurm (the real runs are in test_slurm.py)."""

from __future__ import annotations

import getpass
import os
import shlex
from types import SimpleNamespace

import pytest

from helpers.errors import CourseError
from helpers.engines.on_slurm import batch_template, want_slurm
from helpers.slurm.queue import check_tasks_available
from helpers.slurm.request import SlurmRequest
from helpers.slurm.step import in_allocation


def test_engines_are_local_unless_slurm_is_asked_for(monkeypatch):
    for name in ("COURSE_ENGINES", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NTASKS", "SLURM_NPROCS"):
        monkeypatch.delenv(name, raising=False)
    assert want_slurm(None) is False
    monkeypatch.setenv("COURSE_ENGINES", "slurm")
    assert want_slurm(None) is True
    assert want_slurm(False) is False  # the argument wins
    monkeypatch.setenv("COURSE_ENGINES", "slrum")
    with pytest.raises(CourseError, match="COURSE_ENGINES='slrum' is not understood: use auto, local, slurm"):
        want_slurm(None)


@pytest.mark.parametrize("job, step, tasks, n, expected", [
    (None, None, None, 2, False),   # outside Slurm: local
    ("7", None, "2", 2, True),      # a 2-task allocation (salloc -n 2, a hub's server job): its tasks
    ("7", None, "2", 4, False),     # 4 engines in 2 tasks (lesson 12's parameter-server cluster): local
    ("7", None, "1", 1, False),     # one task: local (srun would take the only task the kernel holds)
    ("7", "0", "2", 2, False),      # inside a job step (srun'd program): no step within a step
    ("7", None, None, 2, False),    # an allocation by nodes only: it counts no tasks
])
def test_auto_takes_the_allocations_tasks_when_they_hold_the_engines(monkeypatch, job, step, tasks, n, expected):
    monkeypatch.delenv("COURSE_ENGINES", raising=False)  # auto, the default
    for name, value in (("SLURM_JOB_ID", job), ("SLURM_STEP_ID", step), ("SLURM_NTASKS", tasks)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_NPROCS", raising=False)
    assert want_slurm(None, n) is expected
    monkeypatch.setenv("COURSE_ENGINES", "local")
    assert want_slurm(None, n) is False
    monkeypatch.setenv("COURSE_ENGINES", "slurm")
    assert want_slurm(None, n) is True


def test_local_engines_start_without_the_slurm_task_variables(tmp_path):
    """Inside an allocation, local engines would inherit the batch step's SLURM_PROCID (0 for each)."""
    import subprocess

    from helpers.engines.cluster import LOCAL_ENGINE_CMD

    probe = LOCAL_ENGINE_CMD[2].replace("runpy.run_module('ipyparallel.engine', run_name='__main__', alter_sys=True)",
                                        "print(sorted(k for k in os.environ if k.startswith('SLURM_')))")
    assert probe != LOCAL_ENGINE_CMD[2]
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "2", "SLURM_PROCID": "0",
           "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_STEP_ID": "batch", "SLURM_STEP_NUM_TASKS": "1",
           "SLURM_TASK_PID": "99", "SLURM_GTIDS": "0"}
    seen = subprocess.run([LOCAL_ENGINE_CMD[0], "-c", probe], env=env, capture_output=True, text=True, timeout=30)
    assert seen.stdout.strip() == "['SLURM_JOB_ID', 'SLURM_NTASKS']", seen


def test_request_from_environment(monkeypatch):
    monkeypatch.setenv("COURSE_SLURM_PARTITION", "gpu")
    monkeypatch.setenv("COURSE_SLURM_TASKS_PER_NODE", "4")
    monkeypatch.setenv("COURSE_SLURM_GPUS_PER_TASK", "1")
    request = SlurmRequest.from_env()
    assert (request.partition, request.tasks_per_node, request.gpus_per_task) == ("gpu", 4, 1)
    script = batch_template(request)
    for line in ("#SBATCH --ntasks={n}", "#SBATCH --partition=gpu", "#SBATCH --ntasks-per-node=4",
                 "#SBATCH --gpus-per-task=1", "unset SLURM_EXPORT_ENV", "srun --export=ALL {program_and_args}"):
        assert line in script
    assert "account" not in script  # unset fields leave the site's defaults
    monkeypatch.setenv("COURSE_SLURM_TASKS_PER_NODE", "four")
    with pytest.raises(CourseError, match="COURSE_SLURM_TASKS_PER_NODE='four' must be a whole number"):
        SlurmRequest.from_env()


def test_allocation_detection(monkeypatch):
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert not in_allocation()
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    assert in_allocation()
    monkeypatch.setenv("SLURM_STEP_ID", "0")  # inside a step, srun would nest
    assert not in_allocation()


def test_more_engines_than_tasks(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    check_tasks_available(2)
    with pytest.raises(CourseError, match="3 engines asked for, but this allocation .job 12. has 2 tasks"):
        check_tasks_available(3)
    monkeypatch.setenv("SLURM_NTASKS", "x")
    with pytest.raises(CourseError, match="SLURM_NTASKS='x' is not a number"):
        check_tasks_available(1)


def test_slurm_asked_for_without_slurm_commands(monkeypatch, tmp_path):
    from helpers.engines import start_engines

    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo, sbatch, srun
    with pytest.raises(CourseError, match="`sinfo` not found: Slurm's commands must be on PATH"):
        start_engines(2, slurm=True)


@pytest.mark.parametrize("shape, n, expected", [
    ((2, 0), 2, (2, 1, None)),  # CPU nodes: one engine per node
    ((2, 0), 3, (2, 2, None)),  # more engines than nodes: spread evenly (2 + 1)
    ((8, 0), 3, (3, 1, None)),
    ((2, 4), 2, (1, 2, 1)),  # GPU nodes: one engine per GPU, a node filled first
    ((2, 4), 6, (2, 4, 1)),
])
def test_engines_are_spread_the_way_the_nodes_say(monkeypatch, shape, n, expected):
    from helpers.slurm import request as slurm_request

    monkeypatch.setattr(slurm_request, "partition_shape", lambda partition=None: shape)
    request = SlurmRequest().spread(n)
    assert (request.nodes, request.tasks_per_node, request.gpus_per_task) == expected
    assert f"#SBATCH --nodes={expected[0]}" in batch_template(request)
    assert SlurmRequest(tasks_per_node=3).spread(n).nodes is None  # what the user asked for stays


@pytest.mark.parametrize("name, value", [("PARTITION", "gpu\n#SBATCH --uid=0"), ("ACCOUNT", "{cluster_id}"),
                                         ("TIME", "1:00:00 --mem=1T")])
def test_slurm_settings_cannot_add_lines_to_the_batch_script(monkeypatch, name, value):
    monkeypatch.setenv(f"COURSE_SLURM_{name}", value)
    with pytest.raises(CourseError, match=f"COURSE_SLURM_{name}=.* is not a Slurm name or time"):
        SlurmRequest.from_env()
    with pytest.raises(CourseError, match="is not a Slurm name or time"):
        batch_template(SlurmRequest(**{name.lower(): value}))


def test_polling_backs_off_to_a_few_seconds():
    """Waiting for a queued job: quick first polls, then at most one every 5 s (scontrol) per learner."""
    from itertools import islice

    from helpers.slurm.queue import backoff

    pauses = list(islice(backoff(0.5, 5.0), 30))
    assert pauses[0] == 0.5 and pauses == sorted(pauses) and max(pauses) == 5.0
    assert sum(pauses) > 100, "30 polls should span minutes, not the 15 s of a fixed 0.5 s"


CLUSTER = "course-1700000000-ab12"
NAMES = [  # a job's name; whether it is a course engines job (class end, adopt_job); whether it is CLUSTER's
    ("tf-course-engines", True, False),  # slurm/engines.sbatch's
    (f"tf-course-engines-{CLUSTER}", True, True),
    ("tf-course-engines-course-1700000000-cd34", True, False),  # another cluster of the course
    ("tf-course-enginesX", False, False),
    ("tf-course-engines x", False, False),  # a name with a space: scontrol shows it as it is
    ("ipengine-1700000000-ab12", False, False),  # a learner's own ipyparallel engines
]


def _fake_squeue(tmp_path, monkeypatch, row: str) -> None:
    """`squeue` on PATH that prints one `%u %j` row, as the real one does for `-j JOB -o '%u %j'`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(row)}\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


@pytest.mark.parametrize("name, course, this_cluster", NAMES)
def test_one_rule_says_whether_an_engines_job_is_ours(tmp_path, monkeypatch, name, course, this_cluster):
    """`class end` (is_engines_job_name), adopting or cancelling a job by id (SlurmJob) and stopping a
    cluster from its file (prune_foreign through slurm.queue) answer alike for the same job."""
    import helpers.engines.on_slurm as on_slurm
    from helpers.engines.ownership import prune_foreign

    me = getpass.getuser()
    assert on_slurm.is_engines_job_name(name) is course
    assert on_slurm.is_engines_job_name(name, CLUSTER) is this_cluster
    cancelled = []
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setattr(on_slurm, "job_record", lambda job: f"JobId={job} JobName={name} UserId={me}(0) GroupId=x(0)")
    monkeypatch.setattr(on_slurm, "cancel", lambda *ids, **_: cancelled.extend(ids))
    on_slurm.SlurmJob("42").cancel_if_ours()
    assert cancelled == (["42"] if course else []), f"{name!r}: {cancelled}"
    _fake_squeue(tmp_path, monkeypatch, f"{me} {name}")
    cluster = SimpleNamespace(cluster_id=CLUSTER, controller=None, engines={"slurm": SimpleNamespace(job_id="42")})
    left = prune_foreign(cluster)
    assert bool(cluster.engines) is this_cluster and bool(left) is not this_cluster, f"{name!r}: {left}"


def test_another_users_job_with_the_courses_name_is_not_ours(tmp_path, monkeypatch):
    import helpers.engines.on_slurm as on_slurm
    from helpers.engines.ownership import prune_foreign

    cancelled = []
    monkeypatch.setattr(on_slurm, "job_record", lambda job: f"JobId={job} JobName=tf-course-engines UserId=someone(9)")
    monkeypatch.setattr(on_slurm, "cancel", lambda *ids, **_: cancelled.extend(ids))
    on_slurm.SlurmJob("42").cancel_if_ours()
    _fake_squeue(tmp_path, monkeypatch, f"someone tf-course-engines-{CLUSTER}")
    cluster = SimpleNamespace(cluster_id=CLUSTER, controller=None, engines={"slurm": SimpleNamespace(job_id="42")})
    assert not cancelled and prune_foreign(cluster) and not cluster.engines
