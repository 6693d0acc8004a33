"""Notebook 08's take-home script and the module beside it make the course's decisions without the course.

The script (assembled from the notebook's `%%writefile` cells, as the notebook writes it) imports
`mwms_slurm.py` (helpers/take_home/), which must place ranks on hosts and choose GPUs exactly as
`helpers.slurm.step` and `helpers.gpus` do, which CI runs on every GPU layout of the local Slurm;
here the same decisions are compared case by case, with Slurm's `scontrol show hostnames` replaced
by the course's own expansion. The real `srun` runs are in `tests/test_slurm_gpus.py` and
`tests/test_take_home.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from helpers.environment import PROXY_VARIABLES
from helpers.gpus import plan_for_task, visible_gpus
from helpers.slurm.step import expand_hostlist, expand_tasks_per_node, hosts_by_rank
from helpers.take_home import copy_beside, mwms_slurm
from tests.support.notebooks import written_program

SCRIPT = written_program("08_batch_job.ipynb", "{script}")
SBATCH = written_program("08_batch_job.ipynb", "{sbatch_file}")


@pytest.fixture
def module(monkeypatch):
    """The module the script imports, with a clean Slurm-free environment to fill in."""
    for name in [k for k in os.environ if k.startswith("SLURM") or k in ("CUDA_VISIBLE_DEVICES", "TF_CONFIG")]:
        monkeypatch.delenv(name)
    scontrol = lambda args, **kw: SimpleNamespace(stdout="\n".join(expand_hostlist(args[-1])))  # noqa: E731
    monkeypatch.setattr(mwms_slurm, "subprocess", SimpleNamespace(run=scontrol))
    return mwms_slurm


@pytest.mark.parametrize("nodelist, tasks, distribution", [
    ("node[1-2]", "4(x2)", None), ("node[1-2]", "2,1", None), ("node[1-2]", "2(x2)", "cyclic"),
    ("gpu[9-10]", "2(x2)", None), ("gpu[9-10],login1", "2,1,1", "cyclic"), ("node1", "3", "block"),
])
def test_ranks_land_where_the_course_puts_them(module, monkeypatch, nodelist, tasks, distribution):
    monkeypatch.setenv("SLURM_STEP_NODELIST", nodelist)
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", tasks)
    if distribution:
        monkeypatch.setenv("SLURM_DISTRIBUTION", distribution)
    expected = hosts_by_rank(expand_hostlist(nodelist), expand_tasks_per_node(tasks), distribution or "block")
    assert module.slurm_hosts() == expected


def _layout(hosts_spec: str, tasks: str, distribution: str = "block") -> list[str]:
    return hosts_by_rank(expand_hostlist(hosts_spec), expand_tasks_per_node(tasks), distribution)


# hosts of the step, CUDA_VISIBLE_DEVICES Slurm gives each rank, GPUs the job has per node
GPU_CASES = {
    "one task per GPU": (_layout("node[1-2]", "4(x2)"), ["0", "1", "2", "3"] * 2, "4"),
    "4 tasks share 4": (_layout("node[1-2]", "4(x2)"), ["0,1,2,3"] * 8, "4"),
    "2 tasks share 4": (_layout("node[1-2]", "2(x2)"), ["0,1,2,3"] * 4, "4"),
    "one task, all GPUs": (_layout("node[1-2]", "1(x2)"), ["0,1,2,3"] * 2, "4"),
    "bound by --gpu-bind": (_layout("node[1-2]", "2(x2)"), ["0", "1"] * 2, "4"),
    "uneven": (_layout("node[1-2]", "2,1"), ["0,1,2,3"] * 3, "4"),
    "cyclic": (_layout("node[1-2]", "2(x2)", "cyclic"), ["0,1,2,3"] * 4, "4"),
    "ConstrainDevices, bound": (_layout("node[1-2]", "4(x2)"), ["0"] * 8, "4"),
    "CPU nodes": (_layout("node[1-2]", "2(x2)"), [None] * 4, None),
    # CUDA reads CUDA_VISIBLE_DEVICES up to its first entry naming no device: "-1,0" names none, "0,-1,1" only 0
    "-1 first": (_layout("node[1-2]", "1(x2)"), ["-1,0"] * 2, None),
    "-1 in the middle": (_layout("node[1-2]", "1(x2)"), ["0,-1,1"] * 2, None),
    # -n 3 over 2 nodes with --gpus-per-task=1: the lone task on node2 sees the one GPU the job has there
    "3 tasks on 2 nodes, --gpus-per-task=1": (_layout("node[1-2]", "2,1"), ["0", "1", "0"], ["2", "2", "1"],
                                              {"SLURM_GPUS_PER_TASK": "1"}),
}


@pytest.mark.parametrize("case", list(GPU_CASES))
def test_every_worker_chooses_the_gpus_the_course_would(module, monkeypatch, case):
    hosts, visible, on_node, *more = GPU_CASES[case]
    for rank, host in enumerate(hosts):
        gpus_here = on_node[rank] if isinstance(on_node, list) else on_node
        env = {"SLURM_GPUS_ON_NODE": gpus_here, **(more[0] if more else {})} if gpus_here else {}
        if visible[rank] is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible[rank]
        for name in ("CUDA_VISIBLE_DEVICES", "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_TASK"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        course = plan_for_task(hosts.count(host), hosts[:rank].count(host), max(map(hosts.count, hosts)), env)
        assert module.choose_gpus(hosts, rank) == list(course.gpus), f"rank {rank}"
        if course.gpus:
            assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(course.gpus)


def test_more_tasks_than_shared_gpus_is_one_line(module, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "2")
    with pytest.raises(SystemExit, match="4 tasks per node share 2 GPU"):
        module.choose_gpus(["node1"] * 4, 0)


def test_the_sbatch_file_removes_every_proxy_variable_grpc_reads():
    unset = next(line.split()[1:] for line in SBATCH.splitlines() if line.startswith("unset "))
    assert set(PROXY_VARIABLES) <= set(unset), set(PROXY_VARIABLES) - set(unset)


def test_the_script_takes_its_plumbing_from_the_module_beside_it():
    """The script imports mwms_slurm (no copy of its functions), resolves with it before TensorFlow, and makes the
    strategy and the Keras fix with it; the module's Keras gate is the course's (helpers.keras_fix.VERIFIED)."""
    import ast

    from helpers import keras_fix

    tree = ast.parse(SCRIPT)
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "mwms_slurm"}
    assert any(isinstance(n, ast.Import) and [a.name for a in n.names] == ["mwms_slurm"] for n in tree.body)
    assert not defined & set(dir(mwms_slurm)), defined & set(dir(mwms_slurm))
    assert used == {"set_tf_config_from_slurm", "choose_gpus", "visible_gpus", "all_reduce_for",
                    "fix_keras_fit_for_multiworker", "make_strategy"}, used
    assert mwms_slurm.VERIFIED_KERAS == keras_fix.VERIFIED


def test_a_missing_dataset_is_one_line_not_a_traceback(tmp_path):
    script = tmp_path / "train_mwms.py"
    script.write_text(SCRIPT)
    copy_beside(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM") and k != "TF_CONFIG"}
    done = subprocess.run([sys.executable, str(script), "--data-dir", str(tmp_path / "none"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=240, env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 1
    assert "no prepared cifar10 in --data-dir" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("taken", ["RING", "AUTO"], ids=["as written", "make_strategy takes another all-reduce"])
def test_a_worker_alone_is_the_chief_and_writes_the_results(tmp_path, taken):
    """No TF_CONFIG and no Slurm step of 2 tasks (a lone process, or NODES=1): the only worker must keep the model and
    write result.json; a chief taken from the resolver's task_id (None then) wrote nothing and still exited 0.
    Fourth review, finding 4: the WORKER line reports the all-reduce the strategy holds; it recomputed
    all_reduce_for(GPUs seen), so a make_strategy that took another one than the plan's was reported as the plan's."""
    from helpers.data import ensure_data

    data = ensure_data(True)
    script = tmp_path / "train_mwms.py"
    script.write_text(SCRIPT)
    copy_beside(tmp_path)
    module = tmp_path / "mwms_slurm.py"
    chosen = "getattr(tf.distribute.experimental.CommunicationImplementation, implementation)"
    assert chosen in module.read_text()
    module.write_text(module.read_text().replace(chosen, f"tf.distribute.experimental.CommunicationImplementation.{taken}"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM") and k != "TF_CONFIG"}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(script), "--data-dir", str(data.data_dir), "--out", str(out),
                           "--epochs", "1", "--max-steps", "2", "--train-examples", "256", "--test-examples", "128"],
                          capture_output=True, text=True, timeout=300, env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "result.json").is_file() and (out / "model.keras").is_file(), sorted(p.name for p in out.iterdir())
    worker = json.loads(next(line[7:] for line in done.stdout.splitlines() if line.startswith("WORKER ")))
    assert worker["kept"] == str(out / "model.keras"), worker
    assert (worker["gpus_seen"], worker["all_reduce"]) == (0, taken), worker


@pytest.mark.parametrize("cpus", ["4", None], ids=["--cpus-per-task=4", "no --cpus-per-task"])
def test_the_sbatch_file_gives_srun_the_cores_and_ends_the_step_when_a_worker_fails(tmp_path, cpus):
    """The sbatch file run by bash with an `srun` that reports what it got: Slurm 22.05 and 23.02's srun take
    --cpus-per-task from SRUN_CPUS_PER_TASK, not from sbatch (23.11 reads SLURM_CPUS_PER_TASK again), and --kill-on-bad-exit=1 ends the workers still
    waiting for one that stopped (slurm.conf's KillOnBadExit defaults to 0). Third review, finding 12: a job without
    --cpus-per-task must leave SRUN_CPUS_PER_TASK unset (it was 1, an explicit -c that implies --exact)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/sh\necho "ARGS $*"\necho "CPUS ${SRUN_CPUS_PER_TASK:-unset}"\n')
    (fake / "srun").chmod(0o755)
    (tmp_path / "train.sbatch").write_text(SBATCH)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_ID": "1234", "DATA_DIR": "d", "SLURM_SUBMIT_DIR": str(tmp_path),
           **({"SLURM_CPUS_PER_TASK": cpus} if cpus else {})}
    done = subprocess.run(["bash", str(tmp_path / "train.sbatch")], capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    args = next(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("ARGS "))
    assert "--kill-on-bad-exit=1" in args[:args.index("train_mwms.py")], args
    assert f"CPUS {cpus or 'unset'}" in done.stdout.splitlines(), done.stdout


def test_the_sbatch_file_leaves_no_inherited_tf_config_to_the_workers(tmp_path):
    """Second review, finding 9: the script keeps a TF_CONFIG it is given, so one in the submitting shell (sbatch's
    --export=ALL passes it on) would send every task to that cluster instead of Slurm's: the file unsets it."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/sh\necho "TF_CONFIG ${TF_CONFIG-unset}"\n')
    (fake / "srun").chmod(0o755)
    (tmp_path / "train.sbatch").write_text(SBATCH)
    inherited = json.dumps({"cluster": {"worker": ["login1:2222", "login1:2223"]}, "task": {"type": "worker", "index": 0}})
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_ID": "1234", "DATA_DIR": "d", "SLURM_SUBMIT_DIR": str(tmp_path),
           "TF_CONFIG": inherited}
    done = subprocess.run(["bash", str(tmp_path / "train.sbatch")], capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    assert "TF_CONFIG unset" in done.stdout.splitlines(), done.stdout


def test_the_sbatch_file_asks_for_its_own_node_sharing_in_its_directive_block():
    """The proof reads the file's #SBATCH block as sbatch does (helpers.slurm.directives): the real file's counts."""
    from helpers.slurm.directives import sbatch_options

    assert "--exclusive=user" in sbatch_options(SBATCH), sbatch_options(SBATCH)
    assert "--gpus-per-task=1" not in sbatch_options(SBATCH), "the GPU line is meant to stay commented out"


def _plan(tmp_path, script_text: str, step: dict | None = None, given: dict | None = None) -> subprocess.CompletedProcess:
    """The script (`script_text`, with mwms_slurm.py beside it) run with --plan, outside Slurm or as the task of
    `step` (SLURM_* variables; `scontrol` a stand-in printing node1..nodeN); at its end, the process prints whether
    it holds TensorFlow. `given`: more variables, with or without a step."""
    script = tmp_path / "train_mwms.py"
    script.write_text(script_text)
    copy_beside(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM") and k != "TF_CONFIG"}
    if step:
        fake = tmp_path / "bin"
        fake.mkdir()
        nodes = int(step["SLURM_STEP_NUM_TASKS"])
        (fake / "scontrol").write_text(f'#!/bin/sh\nfor i in $(seq 1 {nodes}); do echo node$i; done\n')
        (fake / "scontrol").chmod(0o755)
        env = {**env, **step, "PATH": f"{fake}:{env['PATH']}"}
    env = {**env, **(given or {})}
    probe = ("import runpy, sys\nsys.path.insert(0, sys.argv[1].rpartition('/')[0])\nsys.argv = [sys.argv[1], '--plan']\n"
             "runpy.run_path(sys.argv[0], run_name='__main__')\nprint('TENSORFLOW', 'tensorflow' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.mark.parametrize("planted", [False, True], ids=["as written", "tensorflow imported at the top"])
def test_plan_answers_without_starting_tensorflow(tmp_path, planted):
    """Second review, finding 6: `--plan` is a check that costs seconds because it starts no TensorFlow (mwms_slurm
    imports it inside its functions). After the plan, `tensorflow` is not in sys.modules; a planted import is seen."""
    text = SCRIPT.replace("import mwms_slurm  #", "import tensorflow\nimport mwms_slurm  #", 1) if planted else SCRIPT
    assert (text != SCRIPT) == planted
    done = _plan(tmp_path, text)
    assert f"TENSORFLOW {planted}" in done.stdout.splitlines(), done.stdout[-2000:]


def test_a_task_of_a_large_step_prints_short_lines_with_its_own_procid(tmp_path):
    """Second review, findings 10 and 8: srun forwards a task's output in messages of at most 1 KB, so a longer line
    may be cut by another task's; the TASK line held every worker's address (4,399 bytes at 256 workers). It now
    holds the count when the list would pass 1 KB. Each task also reports its SLURM_PROCID with its value, so the
    lesson can check that each rank saw its own."""
    step = {"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "256", "SLURM_STEP_NODELIST": "node[1-256]",
            "SLURM_STEP_TASKS_PER_NODE": "1(x256)", "SLURMD_NODENAME": "node6", "SLURM_JOB_ID": "42"}
    out = _plan(tmp_path, SCRIPT, step).stdout.splitlines()
    assert max(len(line.encode()) + 1 for line in out) < 1024, max(out, key=len)[:200] + "..."
    task = json.loads(next(line[5:] for line in out if line.startswith("TASK ")))
    assert (task["rank"], task["address"], task["workers"]) == (5, "node6:20000", 256), task
    assert any(line.startswith("ENV 5 ") and "SLURM_PROCID=5" in line.split() for line in out), out


def test_env_lines_show_the_gpus_the_task_started_with_not_those_it_chose(tmp_path):
    """Third review, finding 2: task_environment says the GPU variables this task started with, but ran after
    resolve(), whose choose_gpus narrows CUDA_VISIBLE_DEVICES: rank 1 of 2 tasks sharing node1's 2 GPUs printed
    CUDA_VISIBLE_DEVICES=1. It is read before resolve(): ENV shows 0,1 as Slurm gave it, the plan keeps GPU 1."""
    step = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "node1",
            "SLURM_STEP_TASKS_PER_NODE": "2", "SLURMD_NODENAME": "node1", "SLURM_JOB_ID": "42",
            "SLURM_GPUS_ON_NODE": "2", "CUDA_VISIBLE_DEVICES": "0,1"}
    out = _plan(tmp_path, SCRIPT, step).stdout.splitlines()
    task = json.loads(next(line[5:] for line in out if line.startswith("TASK ")))
    assert (task["rank"], task["cvd"], task["gpus"]) == (1, "1", 1), task
    env = [name for line in out if line.startswith("ENV 1 ") for name in line.split()[2:]]
    assert "CUDA_VISIBLE_DEVICES=0,1" in env, env


def test_every_setting_the_module_reads_is_named_in_its_docstring():
    """Second review, finding 11: the take-home module reads MWMS_PORT_BASE and COURSE_GPU_MEMORY_MIB (the course's
    name, which its gpu class layout sets), besides what Slurm, CUDA and TensorFlow set; whoever takes it home must
    find both in its docstring as settings."""
    import ast
    import re
    from pathlib import Path

    source = Path(mwms_slurm.__file__).read_text()
    read = set(re.findall(r'os\.environ(?:\.get\(|\[)"([A-Z_]+)"', source))
    settings = {name for name in read if not name.startswith(("SLURM", "CUDA_")) and name != "TF_CONFIG"}
    assert settings == {"MWMS_PORT_BASE", "COURSE_GPU_MEMORY_MIB"}, settings
    doc = ast.get_docstring(ast.parse(source))
    assert not {name for name in settings if name not in doc}, doc


@pytest.mark.parametrize("cvd", ["-1", "NoDevFiles", "-1,"])
@pytest.mark.parametrize("in_step", [False, True], ids=["no Slurm", "a task of 2"])
def test_no_gpu_written_as_minus_one_or_nodevfiles_plans_no_gpu(tmp_path, cvd, in_step):
    """Fourth review, finding 5: CUDA_VISIBLE_DEVICES=-1 (hide every GPU) and Slurm's NoDevFiles mean no GPU, as
    helpers/gpus.py reads them; the script counted -1 as one GPU and planned NCCL (and outside Slurm NoDevFiles too)."""
    step = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "node[1-2]",
            "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURMD_NODENAME": "node2", "SLURM_JOB_ID": "42"} if in_step else None
    out = _plan(tmp_path, SCRIPT, step, {"CUDA_VISIBLE_DEVICES": cvd}).stdout.splitlines()
    task = json.loads(next(line[5:] for line in out if line.startswith("TASK ")))
    assert (task["gpus"], task["planned_all_reduce"]) == (0, "RING"), task


def test_a_worker_outside_slurm_plans_the_gpus_cuda_sees(tmp_path):
    """Review of lesson 08: resolve dropped every entry naming no GPU where choose_gpus (and CUDA) stop at the first:
    outside Slurm, CUDA_VISIBLE_DEVICES=0,-1,1 planned 2 GPUs where CUDA sees GPU 0 alone. Both read it through
    mwms_slurm.visible_gpus now."""
    out = _plan(tmp_path, SCRIPT, None, {"CUDA_VISIBLE_DEVICES": "0,-1,1"}).stdout.splitlines()
    task = json.loads(next(line[5:] for line in out if line.startswith("TASK ")))
    assert (task["gpus"], task["planned_all_reduce"]) == (1, "NCCL"), task


@pytest.mark.parametrize("environ, smi, expected", [
    ({}, 2, ["0", "1"]),  # a workstation, or GPU nodes whose GPUs Slurm does not constrain: CUDA sees them all
    ({}, None, []),  # no nvidia-smi: a CPU node
    ({"CUDA_VISIBLE_DEVICES": ""}, 2, []),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, 2, ["0", "1"]),
    ({"CUDA_VISIBLE_DEVICES": "0,-1,1"}, 2, ["0"]),  # as CUDA reads it: up to the first entry naming none
    ({"CUDA_VISIBLE_DEVICES": "-1,0"}, 2, []),
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, 2, []),
    ({"CUDA_VISIBLE_DEVICES": " 2 , 3 "}, 2, ["2", "3"]),
    ({"GPU_DEVICE_ORDINAL": "1"}, 2, ["1"])],  # ROCm's/OpenCL's variable (CUDA reads only CUDA_VISIBLE_DEVICES): alone
    ids=["unset, 2 listed", "unset, no nvidia-smi", "empty", "0,1", "0,-1,1", "-1,0", "NoDevFiles", "spaces",
         "GPU_DEVICE_ORDINAL"])
def test_the_take_home_visible_gpus_answers_as_the_courses(environ, smi, expected, tmp_path, monkeypatch):
    """Both copies read CUDA_VISIBLE_DEVICES as CUDA does ("-1,0" names no GPU, "0,-1,1" only GPU 0), and
    GPU_DEVICE_ORDINAL (ROCm's and OpenCL's, which Slurm sets beside it; CUDA never reads it) only where it is set alone.
    Review of lesson 08: with CUDA_VISIBLE_DEVICES unset the take-home copy returned [] where CUDA (and the
    course's helpers.gpus.visible_gpus, through `nvidia-smi -L`) sees every GPU, so the shipped job, submitted
    unchanged on GPU nodes, planned 'gpus: 0, RING' while make_strategy took every GPU with NCCL in each task of a
    node. Both copies, on the same environments, with a stand-in nvidia-smi listing `smi` GPUs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if smi is not None:
        lines = "".join(f"GPU {i}: NVIDIA A100 (UUID: GPU-{i})\\n" for i in range(smi))
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{lines}'\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    for name in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert (mwms_slurm.visible_gpus(), visible_gpus()) == (expected, expected)
