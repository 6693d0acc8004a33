"""Jobs a lesson submits: a clean Slurm environment, the class's GPUs and node sharing (helpers.slurm.submit)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.errors import CourseError
from helpers.slurm import nodes
from helpers.slurm.directives import sbatch_options
from helpers.slurm.submit import class_layout, explain, gpus_per_task, job_environment, job_options

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

    done = subprocess.run([sys.executable, "-c", "import sys, helpers.slurm.submit; print('tensorflow' in sys.modules)"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


# ------------------------------------------------------------ the job scripts and templates
def _lesson_job_scripts() -> dict[str, str]:
    """Every job script the lessons write (%%writefile cells with #SBATCH lines), by notebook and name."""
    from pathlib import Path

    from tests.support.notebooks import written_programs

    found = {}
    for notebook in sorted(p.name for p in (Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for name, text in written_programs(notebook).items():
            if "\n#SBATCH " in text:
                found[f"{notebook[:2]} {name}"] = text
    return found


LESSON_SCRIPTS = _lesson_job_scripts()


def test_the_lessons_that_submit_jobs_are_all_found():
    assert {key[:2] for key in LESSON_SCRIPTS} >= {"08", "11", "16", "17"}, sorted(LESSON_SCRIPTS)


# job scripts that ask for no GPU on purpose, and why: they carry no commented GPU line
ASK_FOR_NO_GPU = {'17 "stack.sbatch"}': "lists the software stack, imports TensorFlow without training",
                  '16 "read_shards.sbatch"}': "reads sharded files, trains nothing; run on CPUs only (submitted without GPUs)"}


@pytest.mark.parametrize("key", sorted(LESSON_SCRIPTS))
def test_every_lesson_job_script_keeps_other_users_off_its_nodes(key):
    """Every job a lesson writes carries `#SBATCH --exclusive=user` (the gpu layout's learners undo it on sbatch's
    command line: helpers.slurm.submit.job_options), whether it asks for a GPU or not."""
    text = LESSON_SCRIPTS[key]
    assert "--exclusive=user" in sbatch_options(text), f"{key}: no #SBATCH --exclusive=user"
    assert ("##SBATCH --gpus-per-task=1" in text) != (key in ASK_FOR_NO_GPU), f"{key}: commented GPU line"


@pytest.mark.parametrize("key", sorted(LESSON_SCRIPTS))
def test_every_lesson_job_script_is_take_home(key):
    """No `python -m helpers` in a job script; the proxies it unsets are the course's list."""
    from helpers.environment import PROXY_VARIABLES

    text = LESSON_SCRIPTS[key]
    assert "-m helpers" not in text, f"{key} calls the course's package"
    unset = [line.split("#")[0].split()[1:] for line in text.splitlines() if line.startswith("unset ")]
    if "srun" in text:  # a job that starts no workers needs none
        assert unset and set(PROXY_VARIABLES) <= set(unset[0]), f"{key}: unsets {unset}"


@pytest.mark.parametrize("script", ["train.sbatch", "engines.sbatch"])
def test_the_course_job_scripts_keep_other_users_off_their_nodes(script):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "slurm" / script).read_text()
    assert "--exclusive=user" in sbatch_options(text)


@pytest.mark.parametrize("layout, line", [(None, True), ("node", True), ("gpu", False)])
def test_the_engines_batch_template_follows_the_layout(monkeypatch, layout, line):
    from helpers.engines.on_slurm import batch_template
    from helpers.slurm.request import SlurmRequest

    if layout is None:
        monkeypatch.delenv("COURSE_CLASS_LAYOUT", raising=False)
    else:
        monkeypatch.setenv("COURSE_CLASS_LAYOUT", layout)
    assert ("#SBATCH --exclusive=user" in batch_template(SlurmRequest()).splitlines()) == line


# ------------------------------------------------------------ the doctor's line on node sharing
PARTITIONS = [{"PartitionName": "debug", "Default": "YES", "ExclusiveUser": "NO", "OverSubscribe": "NO"},
              {"PartitionName": "class", "Default": "NO", "ExclusiveUser": "YES", "OverSubscribe": "NO"},
              {"PartitionName": "whole", "Default": "NO", "ExclusiveUser": "NO", "OverSubscribe": "EXCLUSIVE"}]


@pytest.fixture
def scontrol(monkeypatch):
    from helpers import doctor
    from helpers.slurm import nodes

    reservations = {"solo": [{"Users": "alice"}], "course": [{"Users": "alice,bob"}]}

    def fields(args):
        if args[0] == "partition":
            return [r for r in PARTITIONS if len(args) == 1 or r["PartitionName"] == args[1]]
        return reservations.get(args[1], [])
    monkeypatch.setattr(nodes, "scontrol_records", fields)
    for name in ("SBATCH_RESERVATION", "SLURM_JOB_RESERVATION", "COURSE_CLASS_LAYOUT"):
        monkeypatch.delenv(name, raising=False)
    return doctor


@pytest.mark.parametrize("partition, reservation, exclusive, words", [
    (None, None, False, "partition debug lets users share nodes (ExclusiveUser=NO, OverSubscribe=NO)"),
    ("class", None, True, "partition class is ExclusiveUser=YES"),
    ("whole", None, True, "OverSubscribe=EXCLUSIVE: whole nodes per job"),
    (None, "solo", True, "reservation solo is for alice alone"),
    (None, "course", False, "reservation course is for 2 users"),
    ("nosuch", None, False, "partition nosuch not shown"),
])
def test_the_doctor_says_whether_slurm_keeps_other_users_off_the_nodes(scontrol, monkeypatch, partition, reservation,
                                                                         exclusive, words):
    if reservation:
        monkeypatch.setenv("SBATCH_RESERVATION", reservation)
    found, said = nodes.sharing_of(partition)
    assert found == exclusive and words in said, said


@pytest.mark.parametrize("layout, partition, level, words", [
    ("node", None, "go", "every job the course submits adds --exclusive=user"),
    ("gpu", None, "warn", "classmates' jobs on the same node can reach"),
    ("gpu", "class", "go", "ExclusiveUser=YES"),
    ("nodes", None, "no-go", "COURSE_CLASS_LAYOUT='nodes' is not a class layout"),
])
def test_the_doctor_line_follows_the_layout(scontrol, monkeypatch, layout, partition, level, words):
    monkeypatch.setenv("COURSE_CLASS_LAYOUT", layout)
    check = scontrol.check_node_sharing(partition)
    assert check.level == level and words in check.detail, check


def _fake_slurm(tmp_path, monkeypatch, listed_polls: int, state: str = "RUNNING(None)") -> Path:
    """squeue that lists job 7 for its first `listed_polls` calls, then never; scancel that notes its calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/polls\n'
                                    f'[ "$(wc -l < {tmp_path}/polls)" -le {listed_polls} ] && echo "{state}"\nexit 0\n')
    (bin_dir / "scancel").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/scancel\n')
    for tool in ("squeue", "scancel"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return tmp_path / "scancel"


def test_follow_job_warns_once_when_asked_and_returns_the_log_once_the_job_is_gone(tmp_path, monkeypatch, capsys):
    """Lesson 11's watcher: SIGUSR1 once the log says so (never twice), the job's end taken from the
    first poll where squeue, asked about this job alone, answers without it, and the log returned."""
    from helpers.slurm.submit import follow_job

    scancel = _fake_slurm(tmp_path, monkeypatch, listed_polls=5)
    log = tmp_path / "job-7.out"
    log.write_text("EVENT saved\n")
    text = follow_job("7", log, "custom, warned", warn_when=lambda t: "saved" in t, first_s=0.01)
    assert text == "EVENT saved\n"
    assert scancel.read_text().splitlines() == ["--signal=USR1 7"], "warned once"
    polls = (tmp_path / "polls").read_text().splitlines()
    assert len(polls) == 5 + 1, "ended at the first poll without the job"
    assert all(" -j 7 " in f" {p} " for p in polls), f"every poll names the job, none lists the whole queue: {polls}"
    said = capsys.readouterr().out
    assert "job 7: RUNNING(None)" in said and "job 7: sent SIGUSR1" in said and "job 7: ended" in said, said


def test_follow_job_never_warns_unasked_and_cancels_a_job_past_its_deadline(tmp_path, monkeypatch):
    from helpers.slurm.submit import follow_job

    scancel = _fake_slurm(tmp_path, monkeypatch, listed_polls=10**6)  # never leaves the queue
    log = tmp_path / "job-7.out"
    log.write_text("EVENT saved\n")
    with pytest.raises(CourseError, match=r"did not end within 0 s \(last seen RUNNING\(None\)\): cancelled"):
        follow_job("7", log, "never warned", deadline_s=0.3, first_s=0.01)
    assert scancel.read_text().splitlines() == ["7"], "cancelled, never warned"


def test_follow_job_says_so_when_a_job_ended_without_its_log(tmp_path, monkeypatch):
    from helpers.slurm.submit import follow_job

    _fake_slurm(tmp_path, monkeypatch, listed_polls=0)
    with pytest.raises(CourseError, match="ended without writing its log job-7.out"):
        follow_job("7", tmp_path / "job-7.out", "fit", first_s=0.01)


@pytest.mark.parametrize("listed_polls,gone", [(3, True), (10**6, False)])
def test_a_restart_waits_until_the_old_engines_job_has_left_the_queue(tmp_path, monkeypatch, listed_polls, gone):
    """The engines' restart submits its new job only once the old one is out of the queue
    (COMPLETING included), else `--spread-job` put both engines on the node freed first; a job that
    stays is a False at the deadline, never a wait without end."""
    from helpers.slurm.queue import wait_gone

    _fake_slurm(tmp_path, monkeypatch, listed_polls=listed_polls, state="COMPLETING")
    assert wait_gone(["7"], deadline_s=1.5) is gone
    polls = len((tmp_path / "polls").read_text().splitlines())
    assert polls == 4 if gone else polls > 3, polls
