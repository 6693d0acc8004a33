"""The GPU layout matrix through a real Slurm with simulated GPUs (slurm/local/up --gpus 4).

Every case is a real `srun` (one through `sbatch`); every task resolves its cluster with the
course's resolver and reports rank, host, worker address, CUDA_VISIBLE_DEVICES after
resolution, replicas and the all-reduce it would use. TensorFlow (CPU wheel) never sees these
GPUs: this checks resolution and binding, not kernels. The matrix resolves the step without
TensorFlow (`resolve_step`, what the resolver is built from: importing TensorFlow in each of 8
tasks on 2 cores cost seconds per case); the `sbatch` case builds the resolver itself and must
report the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import squeue_empty

ROOT = Path(__file__).resolve().parents[1]
FAKEBIN = ROOT / "tests" / "fakebin"
pytestmark = pytest.mark.slurm

PROBE = """
import json, os, sys
from helpers.resolver import resolve_step
from helpers.strategy import communication_for
layout, plan, workers = resolve_step()
me = {"rank": layout.rank, "address": workers[layout.rank]}
print("TASK " + json.dumps({"rank": layout.rank, "host": os.environ["SLURMD_NODENAME"], "address": workers[layout.rank],
      "workers": workers, "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "replicas": plan.replicas,
      "all_reduce": communication_for(plan.replicas), "how": plan.how, "note": plan.note,
      "tensorflow": "tensorflow" in sys.modules}))
"""
PROBE_WITH_TF = """
import json, os
from helpers.resolver import describe, slurm_resolver
from helpers.strategy import communication_for, worker_gpus
res = slurm_resolver()
me = describe(res)
print("TASK " + json.dumps({"rank": me["rank"], "host": os.environ["SLURMD_NODENAME"], "address": me["address"],
      "workers": me["workers"], "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "replicas": worker_gpus(res),
      "all_reduce": communication_for(worker_gpus(res)), "how": res.gpu_plan.how, "note": res.gpu_plan.note,
      "tensorflow": True}))
"""


def _env(slurm, nvidia_smi: bool = True) -> dict:
    """The test's environment; with the stand-in nvidia-smi (4 GPUs) on PATH, as on a GPU node."""
    path = f"{FAKEBIN}:{slurm['env']['PATH']}" if nvidia_smi else slurm["env"]["PATH"]
    return {**slurm["env"], "PATH": path, "TF_CPP_MIN_LOG_LEVEL": "3"}


def _tasks(stdout: str) -> list[dict]:
    return sorted((json.loads(l[5:]) for l in stdout.splitlines() if l.startswith("TASK ")), key=lambda t: t["rank"])


def _srun(slurm, args: list[str], nvidia_smi: bool = True) -> list[dict]:
    done = subprocess.run(["srun", "--time=5", *args, sys.executable, "-c", PROBE], env=_env(slurm, nvidia_smi),
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return _tasks(done.stdout)


def _assert_sound(tasks: list[dict], replicas: int) -> None:
    """Same cluster everywhere, each task at its own address on its own host, own GPUs."""
    assert len({json.dumps(t["workers"]) for t in tasks}) == 1, "tasks disagree about the cluster"
    workers = tasks[0]["workers"]
    assert [t["address"] for t in tasks] == workers and len(set(workers)) == len(workers)
    assert all(t["address"].split(":")[0] == t["host"] for t in tasks), "a rank was placed on another host"
    # the course's resolver says replicas/all_reduce; notebook 08's script, planning only: gpus/planned_all_reduce
    assert {t.get("replicas", t.get("gpus")) for t in tasks} == {replicas}
    assert {t.get("all_reduce", t.get("planned_all_reduce")) for t in tasks} == {"NCCL" if replicas else "RING"}
    for host in {t["host"] for t in tasks}:
        used = [g for t in tasks if t["host"] == host for g in (t["cvd"] or "").split(",") if g]
        assert len(used) == len(set(used)), f"two workers on one GPU of {host}: {used}"


# layout -> srun options, replicas per worker, CUDA_VISIBLE_DEVICES by rank after resolution
MATRIX = {
    "one task per GPU (--gpus-per-task=1)": (["-N2", "--ntasks-per-node=4", "--gpus-per-task=1"], 1,
                                            ["0", "1", "2", "3", "0", "1", "2", "3"]),
    "4 tasks share --gres=gpu:4": (["-N2", "--ntasks-per-node=4", "--gres=gpu:4"], 1,
                                   ["0", "1", "2", "3", "0", "1", "2", "3"]),
    "2 tasks share --gres=gpu:4": (["-N2", "--ntasks-per-node=2", "--gres=gpu:4"], 2, ["0,1", "2,3", "0,1", "2,3"]),
    "one task per node, all GPUs": (["-N2", "--ntasks-per-node=1", "--gres=gpu:4"], 4, ["0,1,2,3", "0,1,2,3"]),
    "bound by --gpu-bind": (["-N2", "--ntasks-per-node=2", "--gres=gpu:4", "--gpu-bind=single:1"], 1,
                            ["0", "1", "0", "1"]),
    "uneven: 3 tasks on 2 nodes": (["-N2", "-n3", "--gres=gpu:4"], 2, ["0,1", "2,3", "0,1"]),
    "cyclic distribution": (["-N2", "-n4", "--ntasks-per-node=2", "--distribution=cyclic", "--gres=gpu:4"], 2,
                            ["0,1", "0,1", "2,3", "2,3"]),
    "CPU nodes": (["-N2", "--ntasks-per-node=2"], 0, [None, None, None, None]),
}


@pytest.mark.parametrize("layout", list(MATRIX))
def test_layout_resolves(slurm, layout, report):
    args, replicas, cvd = MATRIX[layout]
    tasks = _srun(slurm, args, nvidia_smi=replicas > 0)
    assert [t["cvd"] for t in tasks] == cvd, tasks
    _assert_sound(tasks, replicas)
    assert not any(t["tensorflow"] for t in tasks), "the step resolved without TensorFlow"
    if layout.startswith("uneven"):
        assert "2 of 4 GPUs on this node stay idle" in tasks[2]["note"]
    report(f"GPU layout {layout}: " + "; ".join(f"rank {t['rank']} {t['address']} GPU {t['cvd'] or '-'} "
                                                f"x{t['replicas']} {t['all_reduce']}" for t in tasks))
    assert squeue_empty(slurm["env"])


def test_gpus_slurm_does_not_manage(slurm):
    """No gres asked for (a site whose Slurm does not manage GPUs), nvidia-smi lists 4: without a
    decision every task would use all 4, so they are shared by local rank."""
    tasks = _srun(slurm, ["-N1", "--ntasks-per-node=2"])
    assert [t["cvd"] for t in tasks] == ["0,1", "2,3"]
    _assert_sound(tasks, 2)


def test_fewer_gpus_than_tasks_is_one_clear_line(slurm):
    probe = ("import sys\nfrom helpers.errors import CourseError\nfrom helpers.resolver import slurm_resolver\n"
             "try:\n    slurm_resolver()\nexcept CourseError as e:\n    print('ERROR', e)\n    sys.exit(3)\n")
    done = subprocess.run(["srun", "--time=5", "-N1", "--ntasks-per-node=4", "--gres=gpu:2", sys.executable, "-c", probe],
                          env=_env(slurm), capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode != 0
    errors = [l for l in done.stdout.splitlines() if l.startswith("ERROR")]
    assert len(errors) == 4 and all("4 tasks per node share 2 GPU(s)" in e for e in errors), done.stdout
    assert squeue_empty(slurm["env"])


def test_layout_through_sbatch(slurm, tmp_path):
    """The usual batch job: one task per GPU on two nodes, srun inside sbatch."""
    out = tmp_path / "job.out"
    done = subprocess.run(["sbatch", "--wait", "-N2", "--ntasks-per-node=4", "--gpus-per-task=1", "--time=5",
                           f"--output={out}", "--wrap", f"srun {sys.executable} -c '{PROBE_WITH_TF}'"],
                          env=_env(slurm), capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, out.read_text()[-3000:] if out.exists() else done.stderr
    tasks = _tasks(out.read_text())
    assert [t["cvd"] for t in tasks] == ["0", "1", "2", "3"] * 2
    assert [t["host"] for t in tasks] == ["node1"] * 4 + ["node2"] * 4
    _assert_sound(tasks, 1)
    assert squeue_empty(slurm["env"])


# ------------------------------------------------------------ notebook 08's take-home script
# (before the device-cgroup tests below: their module fixture keeps ConstrainDevices on to the end)
@pytest.fixture(scope="module")
def batch_job(tmp_path_factory) -> Path:
    """Notebook 08's script, mwms_slurm.py and the sbatch file, as the notebook writes them, in a directory of their own."""
    from helpers.take_home import copy_beside
    from tests.support.notebooks import written_program

    directory = tmp_path_factory.mktemp("batch_job")
    (directory / "train_mwms.py").write_text(written_program("08_batch_job.ipynb", "{script}"))
    copy_beside(directory)  # mwms_slurm.py, which the script imports
    (directory / "train_mwms.sbatch").write_text(written_program("08_batch_job.ipynb", "{sbatch_file}"))
    return directory


@pytest.mark.parametrize("layout", list(MATRIX))
def test_batch_job_script_plans_every_layout(slurm, batch_job, layout, report):
    """The script that imports nothing from the course places workers and GPUs as the course does."""
    args, replicas, cvd = MATRIX[layout]
    done = subprocess.run(["srun", "--time=5", *args, sys.executable, str(batch_job / "train_mwms.py"), "--plan"],
                          env=_env(slurm, replicas > 0), capture_output=True, text=True, timeout=300, cwd=batch_job)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tasks = _tasks(done.stdout)
    assert [t["cvd"] for t in tasks] == cvd, tasks
    _assert_sound(tasks, replicas)
    assert squeue_empty(slurm["env"])


def test_batch_job_trains_with_one_gpu_per_task(slurm, batch_job, prepared_dir, tmp_path):
    """The sbatch file as written, with the usual GPU request added on the command line: two
    workers on two nodes, each bound to GPU 0 of its node, train to identical weights (on CPU:
    the TensorFlow here is the CPU wheel, so it trains with ring all-reduce)."""
    env = {**_env(slurm), "PYTHON": sys.executable, "DATA_DIR": str(prepared_dir), "OUT": str(tmp_path / "run")}
    done = subprocess.run(["sbatch", "--wait", "--parsable", "--gpus-per-task=1", "train_mwms.sbatch", "--epochs", "1",
                           "--train-examples", "256", "--test-examples", "64"], env=env, capture_output=True,
                          text=True, timeout=600, cwd=batch_job)
    job = done.stdout.strip()
    log = (batch_job / f"tf-mwms-{job}.out").read_text()
    assert done.returncode == 0, log[-4000:]
    workers = sorted((json.loads(l[7:]) for l in log.splitlines() if l.startswith("WORKER ")), key=lambda w: w["rank"])
    assert [(w["host"], w["cvd"]) for w in workers] == [("node1", "0"), ("node2", "0")], workers
    assert len({w["weights"] for w in workers}) == 1, workers
    assert json.loads((tmp_path / "run" / "result.json").read_text())["workers"] == 2
    assert squeue_empty(slurm["env"])


# ------------------------------------------------------------ with device cgroups
DEVICES = """
import errno, glob, os
allowed = []
for path in sorted(glob.glob(os.environ["COURSE_TEST_GPU_DEVICES"] + "/nvidia*")):
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as exc:
        if exc.errno != errno.EPERM:  # ENXIO: allowed, but nothing behind the fake device
            allowed.append(path.rsplit("nvidia", 1)[1])
    else:
        allowed.append(path.rsplit("nvidia", 1)[1])
print("DEVICES " + json.dumps({"rank": me["rank"], "allowed": allowed}))
"""


@pytest.fixture(scope="module")
def cgroup_slurm(slurm):
    """The same cluster restarted with ConstrainDevices=yes, and back without it afterwards."""
    def up(*extra: str) -> None:
        done = subprocess.run([str(ROOT / "slurm/local/up"), "--nodes", "2", "--gpus", "4", "--cpu-nodes", "2",
                               *extra], env=slurm["env"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr

    up("--cgroup")
    try:
        yield {**slurm, "devices": str(Path(slurm["env"]["COURSE_SLURM_DIR"]) / "dev")}
    finally:
        up()


# notebook 08's script as a probe: its plan (which sets CUDA_VISIBLE_DEVICES), then the device check
BATCH_JOB_PROBE = """
import json, os, runpy, sys
sys.argv = [os.environ["COURSE_TEST_SCRIPT"], "--plan"]
sys.path.insert(0, os.path.dirname(sys.argv[0]))  # mwms_slurm.py, beside the script (run_path does not add it)
runpy.run_path(sys.argv[0], run_name="__main__")
me = {"rank": int(os.environ["SLURM_PROCID"])}
"""


@pytest.mark.parametrize("program", ["course", "batch job script"])
@pytest.mark.parametrize("layout", ["one task per GPU (--gpus-per-task=1)", "4 tasks share --gres=gpu:4",
                                    "2 tasks share --gres=gpu:4", "bound by --gpu-bind"])
def test_layout_resolves_with_device_cgroups(cgroup_slurm, batch_job, layout, program, report):
    """Each task sees its GPUs numbered from 0 and may open only those; after resolution every
    worker uses GPUs of its own (the device files it may open, indexed by its CUDA_VISIBLE_DEVICES).
    The same for the course's resolver and for notebook 08's script, which imports no course code."""
    args, replicas, _ = MATRIX[layout]
    env = {**_env(cgroup_slurm), "COURSE_TEST_GPU_DEVICES": cgroup_slurm["devices"],
           "COURSE_TEST_SCRIPT": str(batch_job / "train_mwms.py")}
    probe = PROBE if program == "course" else BATCH_JOB_PROBE
    done = subprocess.run(["srun", "--time=5", *args, sys.executable, "-c", probe + DEVICES], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tasks = _tasks(done.stdout)
    allowed = {d["rank"]: d["allowed"] for d in (json.loads(l[8:]) for l in done.stdout.splitlines()
                                                 if l.startswith("DEVICES "))}
    if "share" not in layout:
        assert all(t["cvd"] == "0" for t in tasks), tasks  # bound: renumbered from 0
    for t in tasks:
        t["cvd"] = ",".join(allowed[t["rank"]][int(i)] for i in t["cvd"].split(","))  # the node's device
    _assert_sound(tasks, replicas)
    report(f"GPU layout {layout}, ConstrainDevices=yes, {program}: " + "; ".join(
        f"rank {t['rank']} {t['address']} device {t['cvd']} x{t.get('replicas', t.get('gpus'))}" for t in tasks))
    assert squeue_empty(cgroup_slurm["env"])


def test_two_jobs_on_one_node_get_different_ports(slurm):
    """Two steps sharing node1 at the same time: their workers bind their ports and hold them."""
    hold = PROBE + """
import socket, time
port = int(me["address"].rsplit(":", 1)[1])
with socket.socket() as s:
    s.bind(("0.0.0.0", port)); s.listen(); time.sleep(4)
print("HELD", port)
"""
    jobs = [subprocess.Popen(["srun", "--time=5", "-w", "node1", "-n2", sys.executable, "-c", hold], env=_env(slurm),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(2)]
    outputs = [job.communicate(timeout=300) for job in jobs]
    for job, (out, err) in zip(jobs, outputs):
        assert job.returncode == 0, out[-2000:] + err[-2000:]
    held = [int(l.split()[1]) for out, _ in outputs for l in out.splitlines() if l.startswith("HELD")]
    assert len(held) == 4 and len(set(held)) == 4, held
    assert squeue_empty(slurm["env"])
