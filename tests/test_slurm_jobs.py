"""Jobs a lesson submits: a clean Slurm environment, the class's GPUs and node sharing (helpers.slurm_jobs)."""

from __future__ import annotations

import pytest

from helpers.errors import CourseError
from helpers.slurm_jobs import class_layout, explain, gpus_per_task, job_environment, job_options

# what a JupyterHub server started with --gpus-per-task=1 --mem=2G sees (Slurm 22.05)
SERVER = {"SLURM_JOB_ID": "41", "SLURM_GPUS_PER_TASK": "1", "SLURM_MEM_PER_NODE": "2048", "SLURM_JOB_PARTITION": "debug",
          "SLURM_NTASKS": "2", "SLURM_EXPORT_ENV": "PATH,SLURM_CONF", "SLURM_CONF": "/etc/slurm/slurm.conf",
          "SLURM_GPUS_ON_NODE": "2", "SLURM_JOB_GPUS": "0,1", "SLURMD_NODENAME": "node1", "SRUN_DEBUG": "3",
          "CUDA_VISIBLE_DEVICES": "0,1", "SBATCH_RESERVATION": "course", "SALLOC_ACCOUNT": "class",
          "PATH": "/usr/bin", "HOME": "/home/a"}


def test_the_environment_drops_what_slurm_set_for_the_server_and_keeps_the_rest():
    env = job_environment({"DATA_DIR": "/data", "EPOCHS": 3}, SERVER)
    assert env == {"SLURM_CONF": "/etc/slurm/slurm.conf", "SBATCH_RESERVATION": "course", "SALLOC_ACCOUNT": "class",
                   "PATH": "/usr/bin", "HOME": "/home/a", "DATA_DIR": "/data", "EPOCHS": "3"}


def test_the_jobs_own_values_win_and_may_name_slurm_variables():
    env = job_environment({"PATH": "/opt/bin", "SLURM_CONF": "/other.conf"}, SERVER)
    assert env["PATH"] == "/opt/bin" and env["SLURM_CONF"] == "/other.conf"


def test_the_environment_defaults_to_this_process(monkeypatch):
    monkeypatch.setenv("SLURM_MEM_PER_CPU", "100")
    monkeypatch.setenv("SBATCH_PARTITION", "class")
    env = job_environment({})
    assert "SLURM_MEM_PER_CPU" not in env and env["SBATCH_PARTITION"] == "class"


@pytest.mark.parametrize("setting, layout", [(None, "node"), ("", "node"), ("node", "node"), (" GPU ", "gpu")])
def test_the_layout(setting, layout):
    assert class_layout({} if setting is None else {"COURSE_CLASS_LAYOUT": setting}) == layout


@pytest.mark.parametrize("bad", ["nodes", "exclusive", "1"])
def test_a_bad_layout_is_one_line(bad):
    with pytest.raises(CourseError, match=f"COURSE_CLASS_LAYOUT='{bad}' is not a class layout: use node"):
        class_layout({"COURSE_CLASS_LAYOUT": bad})


@pytest.mark.parametrize("server, expected", [
    ({}, 0), ({"SLURM_GPUS_ON_NODE": "0"}, 0), ({"SLURM_GPUS_ON_NODE": "4"}, 1), ({"SLURM_JOB_GPUS": "2"}, 1),
    ({"SLURM_STEP_GPUS": "0,1"}, 1), ({"SLURM_JOB_GPUS": ""}, 0), ({"SLURM_STEP_GPUS": "NoDevFiles"}, 0),
])
def test_auto_gives_one_gpu_per_task_when_the_server_has_gpus(server, expected):
    assert gpus_per_task(server) == expected
    assert gpus_per_task({**server, "COURSE_JOB_GPUS_PER_TASK": "auto"}) == expected


@pytest.mark.parametrize("setting, expected", [("0", 0), ("2", 2), (" 1 ", 1)])
def test_a_number_of_gpus_wins_over_auto(setting, expected):
    assert gpus_per_task({"SLURM_GPUS_ON_NODE": "4", "COURSE_JOB_GPUS_PER_TASK": setting}) == expected


@pytest.mark.parametrize("bad", ["-1", "1.5", "one", "all"])
def test_a_bad_gpu_count_is_one_line(bad):
    with pytest.raises(CourseError, match=f"COURSE_JOB_GPUS_PER_TASK='{bad}' is not a number of GPUs"):
        gpus_per_task({"COURSE_JOB_GPUS_PER_TASK": bad})


@pytest.mark.parametrize("env, options", [
    ({}, ["--exclusive=user"]),
    (SERVER, ["--exclusive=user", "--gpus-per-task=1"]),
    ({**SERVER, "COURSE_JOB_GPUS_PER_TASK": "0"}, ["--exclusive=user"]),
    ({"COURSE_CLASS_LAYOUT": "gpu", "SLURM_GPUS_ON_NODE": "1"}, ["--oversubscribe", "--gpus-per-task=1"]),
    ({"COURSE_CLASS_LAYOUT": "gpu", "COURSE_JOB_GPUS_PER_TASK": "2"}, ["--oversubscribe", "--gpus-per-task=2"]),
])
def test_the_options_every_job_adds(env, options):
    assert job_options(env) == options


def test_the_line_a_lesson_prints_says_who_can_reach_the_ports():
    assert "--exclusive=user" in explain({})
    assert "classmates" in explain({"COURSE_CLASS_LAYOUT": "gpu"}) and "no authentication" in explain(
        {"COURSE_CLASS_LAYOUT": "gpu"})


def test_importing_it_imports_no_tensorflow():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import sys, helpers.slurm_jobs; print('tensorflow' in sys.modules)"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
