"""A real Slurm: 2 emulated nodes (network namespaces) brought up by slurm/local/up.

Needs root (the script installs Slurm and creates namespaces). Elsewhere these tests are
skipped with the reason; CI sets COURSE_REQUIRE_SLURM=1, which turns the skip into a failure.
The lessons that reach Slurm run here as a user runs them, `make course LESSONS=...` with the local
Slurm answering (the nbval pass hides Slurm from the lessons), each once.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.results import parse_result_lines
from tests.conftest import leftovers as _leftovers
from tests.conftest import squeue_empty as _squeue_empty
from tests.conftest import workers_visible_devices
from tests.support.required import unavailable
from tests.support.engines_tutorial import check_tutorial_findings, tutorial_on_engines

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slurm


def _job_processes(within: float = 15.0) -> list[str]:
    """Processes that run inside a Slurm job (engines, TF workers, srun, slurmstepd), not the
    daemons, still there after `within` seconds (slurmstepd exits a moment after its job)."""
    deadline = time.monotonic() + within
    while True:
        found = [p for p in _leftovers() if "[slurmd]" not in p and "[slurmctld]" not in p]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


ENGINES_SCRIPT = """
import json, os, sys
from helpers.engines import start_engines
engines = start_engines(int(sys.argv[1]), slurm=True, timeout=120)
print("ENGINES " + json.dumps({"identities": engines.identities(), "ranks": engines.ranks,
                               "workers": engines.setup_multiworker(), "stop_s": engines.stop()}))
"""


def _no_slurm_settings(monkeypatch) -> None:
    """A user who set nothing: outside an allocation, no COURSE_SLURM_* variable."""
    import os

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    for name in [k for k in os.environ if k.startswith("COURSE_SLURM_")]:
        monkeypatch.delenv(name)


def _engines_report(stdout: str) -> dict:
    line = next((l for l in stdout.splitlines() if l.startswith("ENGINES ")), None)
    assert line, stdout
    return json.loads(line[len("ENGINES "):])


def _secrets_outside_the_connection_file(engines, env: dict) -> list[str]:
    """Where the engines' connection secrets (the HMAC key, any CurveZMQ secret key of the controller's
    engine connection file) show up besides that file: an engine's environment, `scontrol show job -dd`,
    the job's stored batch script. Empty when nowhere."""
    security = Path(engines.cluster.profile_dir) / "security"
    info = json.loads(next(security.glob(f"ipcontroller-{engines.cluster_id}-engine.json")).read_text())
    hidden = [value for name, value in info.items() if (name == "key" or "secret" in name) and value]
    assert info.get("key"), sorted(info)
    engines.view.execute("import os; env_text = chr(10).join(f'{k}={v}' for k, v in os.environ.items())", block=True)
    job = next(es.job_id for es in engines.cluster.engines.values() if getattr(es, "job_id", None))
    shown = {f"engine {i} environment": text for i, text in enumerate(engines.view.pull("env_text", block=True))}
    for what in (["scontrol", "show", "job", "-dd", str(job)], ["scontrol", "write", "batch_script", str(job), "-"]):
        done = subprocess.run(what, env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        shown[" ".join(what[:3])] = done.stdout
    return sorted(where for where, text in shown.items() for secret in hidden if secret in text)


def test_engines_by_sbatch_land_on_both_nodes(slurm, monkeypatch, tmp_path):
    """From outside an allocation: one sbatch job whose srun starts one engine per task; TensorFlow's
    tutorial code (the no-argument strategy) then forms one cluster of them."""
    from helpers.engines import start_engines
    from helpers.slurm.request import SlurmRequest

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    engines = start_engines(2, slurm=True, request=SlurmRequest(tasks_per_node=1), timeout=120, activate=False)
    try:
        found = sorted(engines.identities(), key=lambda i: i["procid"])
        assert [(i["procid"], i["host"]) for i in found] == [(0, "node1"), (1, "node2")]
        assert all(i["slurm_step"] for i in found)
        assert engines.ranks == {i["engine_id"]: i["procid"] for i in found}
        # the key reaches the engines through the owner-only connection file, never the job's
        # environment (which Slurm may store in its accounting, readable by others): its value, under
        # any name, is in no engine's environment, and neither in what Slurm shows of the job
        assert _secrets_outside_the_connection_file(engines, slurm["env"]) == []
        workers = engines.setup_multiworker()
        assert [w["address"].split(":")[0] for w in workers] == ["node1", "node2"]
        # issue 44: TensorFlow's custom-loop tutorial, `MultiWorkerMirroredStrategy()` with no arguments,
        # on these engines: one cluster of both nodes, as the course's Slurm resolver gives it
        started = time.perf_counter()
        seen = tutorial_on_engines(engines, tmp_path)
        print(f"the tutorial on 2 Slurm engines: {seen} in {time.perf_counter() - started:.1f} s")
        check_tutorial_findings(seen, workers)
        assert all(s["course"]["kind"] == "CourseSlurmClusterResolver" for s in seen), seen
    finally:
        engines.stop()
    assert _squeue_empty(slurm["env"]), "stopping the engines must cancel their Slurm job"
    left = _job_processes()
    assert not left, left


def test_engines_by_srun_inside_an_allocation(slurm):
    """Inside salloc (or a JupyterHub server that is a Slurm job): engines as an srun step."""
    done = subprocess.run(["salloc", "-N", "2", "--ntasks-per-node=1", "--time=5", sys.executable, "-c",
                           ENGINES_SCRIPT, "2"], env=slurm["env"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = _engines_report(done.stdout)
    assert sorted((i["procid"], i["host"]) for i in report["identities"]) == [(0, "node1"), (1, "node2")]
    assert report["stop_s"] < 120, report["stop_s"]  # a stop that hangs on its step fails; what it left: below
    assert _squeue_empty(slurm["env"])
    left = _job_processes()
    assert not left, left


def test_more_engines_than_allocated_tasks_is_a_clear_error(slurm):
    done = subprocess.run(["salloc", "-n", "1", "--time=5", sys.executable, "-c", ENGINES_SCRIPT, "2"],
                          env=slurm["env"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode != 0
    assert "2 engines asked for, but this allocation" in done.stderr and "has 1 tasks" in done.stderr
    assert _squeue_empty(slurm["env"])


def _make_course(notebook: str, env: dict, cell_timeout: int = 600) -> None:
    """Run one lesson as a user does: `make course` with the local Slurm answering (docs/slurm.md), its
    executed copy kept beside the test's output; fail with the runner's table and the failing cell's error."""
    out = Path(env["COURSE_OUTPUT_DIR"]) / "course-build"
    done = subprocess.run(["make", "--no-print-directory", "course", f"LESSONS=notebooks/{notebook}.ipynb",
                           f"COURSE_BUILD_DIR={out}"], env={**env, "COURSE_BUILD_DIR": str(out)},
                          capture_output=True, text=True, timeout=2 * cell_timeout, cwd=ROOT)
    executed = out / "notebooks" / f"{notebook}.ipynb"
    errors = "" if not executed.exists() else "\n".join(
        "\n".join(o.get("traceback", [])) for c in json.loads(executed.read_text())["cells"]
        for o in c.get("outputs", []) if o.get("output_type") == "error")
    assert done.returncode == 0 and f"{notebook}.ipynb  ok" in done.stdout, (
        f"make course: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}\n{errors[-4000:]}")


@pytest.mark.parametrize("notebook", ["06_fault_tolerance", "15_models_you_keep"])
def test_notebook_with_engines_on_slurm(slurm, tmp_path, notebook):
    """The same notebook as the local run, starting its own engines as Slurm tasks on both nodes;
    06 kills one of them mid-training and resumes on fresh engines; 15 keeps the chief's file only,
    each engine checking its own path (ranks from SLURM_PROCID, not engine ids). (03 runs whole on
    Slurm engines in test_lessons_in_class_layouts, its start-up in test_hub, test_ipcluster, test_ipcmagic
    and test_ood; 04 whole on local engines in the nbval pass, its custom loop across two Slurm nodes in
    test_mwms_across_two_nodes_with_slurm_resolver: a lesson's cells after its start-up do not depend on
    how its engines were started.)"""
    env = {**slurm["env"], "COURSE_ENGINES": "slurm", "COURSE_SLURM_TASKS_PER_NODE": "1",
           "COURSE_MODE": "quick", "COURSE_OUTPUT_DIR": str(tmp_path)}
    before = sorted(p.name for p in (ROOT / "notebooks").iterdir())
    _make_course(notebook, env)
    if notebook.startswith("03"):
        assert (tmp_path / "models" / "03_multiworker.keras").exists(), "the chief saves the model"
    if notebook.startswith("15"):
        assert (tmp_path / "models" / "15_best.keras").exists(), "the chief keeps the best epoch's file"
    after = sorted(p.name for p in (ROOT / "notebooks").iterdir() if not p.name.startswith("."))
    assert after == [n for n in before if not n.startswith(".")], "the run left files among the notebooks"
    assert _squeue_empty(slurm["env"])
    left = _job_processes()
    assert not left, left


def test_tasks_land_on_two_hosts(slurm):
    done = subprocess.run(["srun", "-N", "2", "--ntasks-per-node", "1", "bash", "-c",
                           "echo $SLURM_PROCID $(hostname) $(hostname -I)"],
                          env=slurm["env"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = sorted(line.split() for line in done.stdout.splitlines())
    assert [r[:2] for r in rows] == [["0", "node1"], ["1", "node2"]]
    assert rows[0][2] != rows[1][2], "each node must have its own address"
    assert _squeue_empty(slurm["env"])


TRAIN = ["--mode", "quick", "--epochs", "1", "--steps-per-epoch", "3", "--train-examples", "256", "--skip-eval"]


@pytest.mark.parametrize("loop", ["custom", "fit"])
def test_mwms_across_two_nodes_with_slurm_resolver(slurm, loop, prepared_dir):
    done = subprocess.run(["srun", "-N", "2", "--ntasks-per-node", "1", "--time", "10",
                           sys.executable, "-m", "helpers", "train", "--strategy", "multiworker", "--loop", loop,
                           "--data-dir", str(prepared_dir), *TRAIN],
                          # a web proxy gRPC would use (tried: workers then hang); the course removes it
                          env={**slurm["env"], "TF_CPP_MIN_LOG_LEVEL": "2", "grpc_proxy": "http://127.0.0.1:9"},
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = sorted(parse_result_lines(done.stdout), key=lambda r: r["rank"])
    assert [(r["rank"], r["host"]) for r in results] == [(0, "node1"), (1, "node2")]
    assert all(r["strategy"] == "MultiWorkerMirroredStrategy" and r["workers"] == 2 for r in results)
    assert results[0]["weights"] == results[1]["weights"]
    assert _squeue_empty(slurm["env"])


def test_engines_job_with_controller_inside(slurm, tmp_path):
    """slurm/engines.sbatch runs controller and engines in the job; the notebook attaches."""
    from helpers.engines import adopt_job

    env = {**slurm["env"], "COURSE_DIR": str(ROOT), "COURSE_PYTHON": sys.executable}
    done = subprocess.run(["sbatch", "--parsable", "--cpus-per-task=1", "--time=10",
                           f"--output={tmp_path}/engines-%j.out", str(ROOT / "slurm/engines.sbatch")],
                          env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    engines = adopt_job(job, timeout=120, activate=False)
    try:
        found = sorted(engines.identities(), key=lambda i: i["procid"])
        assert [(i["procid"], i["host"]) for i in found] == [(0, "node1"), (1, "node2")]
        connection = engines.cluster.connection_file()
        assert connection.stat().st_mode & 0o077 == 0, "connection files must be private"
    finally:
        engines.stop()
    assert _squeue_empty(slurm["env"]), "stopping attached engines must cancel their job"
    assert not connection.exists()
    left = _job_processes()
    assert not left, left


def test_adopting_a_job_that_is_not_there(slurm):
    from helpers.engines import adopt_job
    from helpers.errors import CourseError

    with pytest.raises(CourseError, match="Slurm job 999999 not found"):
        adopt_job("999999", timeout=10, activate=False)


def test_scaling_sweep_and_its_batch_training_jobs(slurm, prepared_dir, tmp_path):
    """slurm/sweep submits slurm/train.sbatch for 1 and 2 workers (a task a node) and prints one table; its
    2-worker job is also read as the batch training script's run: it ended well, its chief wrote the results,
    its workers ran on node1 and node2 and hold one set of weights, with a web proxy gRPC would use in the
    submitter's environment (tried: workers then hang; the job script removes it). Until 2026-11-30
    test_batch_training_script submitted that same job (2 nodes, a task each, the same options and
    arguments) once more with sbatch --wait."""
    env = {**slurm["env"], "COURSE_DATA_DIR": str(prepared_dir), "COURSE_OUTPUT_DIR": str(tmp_path),
           "COURSE_PYTHON": sys.executable, "SWEEP_SBATCH_ARGS": "--cpus-per-task=1 --time=10",
           "grpc_proxy": "http://127.0.0.1:9"}
    done = subprocess.run([str(ROOT / "slurm/sweep"), "--workers", "1 2", "--tasks-per-node", "1", "--", *TRAIN],
                          env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("train-")]
    assert sorted(int(r[2]) for r in rows) == [1, 2], done.stdout  # the workers column
    assert all(float(r[4]) > 0 for r in rows)  # images/s
    assert len(list((tmp_path / "results").glob("train-*.json"))) == 2
    job = re.search(r"^submitted 2 worker\(s\) on 2 node\(s\): job (\d+)$", done.stdout, re.M).group(1)
    log = (tmp_path / "logs" / f"sweep-{job}.out").read_text()
    # the job script's last line, after its srun (set -e): the job's steps ended with exit 0
    assert f"results: {tmp_path}/results/train-{job}.json" in log, log[-3000:]
    results = json.loads((tmp_path / "results" / f"train-{job}.json").read_text())
    assert results["workers"] == 2 and results["rank"] == 0 and results["images_per_s"] > 0
    printed = parse_result_lines(log)
    assert sorted(r["host"] for r in printed) == ["node1", "node2"]
    assert len({r["weights"] for r in printed}) == 1
    assert _squeue_empty(slurm["env"])


REFUSED = ("`sbatch` refused the engines' job (exit status 1; its message is printed above): check "
           "COURSE_SLURM_PARTITION, _ACCOUNT, _TIME and what the partition allows (`sinfo`)")


def test_engines_that_cannot_start_are_a_clear_error(slurm, monkeypatch, capfd):
    """A job Slurm refuses, and a job that stays pending: one line each, and nothing left queued.
    docs/troubleshooting.md's row "Slurm refuses the engines' job" on the real Slurm: the whole line
    with its hint, and Slurm's own reason printed above it (what "its message is printed above" says)."""
    from helpers.engines import start_engines
    from helpers.errors import CourseError
    from helpers.slurm.request import SlurmRequest

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(CourseError, match="no nodes in partition nosuch: check COURSE_SLURM_PARTITION"):
        start_engines(2, slurm=True, request=SlurmRequest(partition="nosuch"), activate=False)
    # more GPUs than a node has (4), and a GPU from the partition whose nodes have none
    for request in (SlurmRequest(gpus_per_task=5), SlurmRequest(partition="cpu", gpus_per_task=1)):
        capfd.readouterr()
        with pytest.raises(CourseError) as refused:
            start_engines(2, slurm=True, request=request, activate=False)
        printed = capfd.readouterr().err
        assert str(refused.value) == REFUSED, (request, str(refused.value))
        assert re.search(r"^sbatch: error: .*(not available|Invalid generic resource)", printed, re.M), (request, printed[-2000:])
    hold = subprocess.run(["sbatch", "--parsable", "-N", "2", "--exclusive", "--time=5", "--output=/dev/null",
                           "--wrap", "sleep 300"], env=slurm["env"], capture_output=True, text=True, timeout=60)
    assert hold.returncode == 0, hold.stderr
    try:
        with pytest.raises(CourseError, match=r"only 0 of 2 engines registered \(within 5 s\): Slurm job \d+ is PENDING"):
            start_engines(2, slurm=True, request=SlurmRequest(tasks_per_node=1), timeout=5, activate=False)
    finally:
        subprocess.run(["scancel", hold.stdout.strip().split(";")[0]], env=slurm["env"], timeout=30)
    assert _squeue_empty(slurm["env"])
    # controllers are not always our children (ipyparallel may reparent them): look for them by name
    import psutil

    left = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if ("ipyparallel.controller" in " ".join(proc.info["cmdline"] or [])
                    and "test_engines_that_cannot_start" in proc.environ().get("PYTEST_CURRENT_TEST", "")):
                left.append(proc.pid)
        except psutil.Error:
            continue
    assert not left, f"controllers left running after refused/pending engine jobs: {left}"


def test_engines_with_no_settings_spread_one_per_gpu_and_leave_the_queue(slurm, monkeypatch, report):
    """6 engines, no COURSE_SLURM_* at all, on nodes with 4 (simulated) GPUs: one engine per GPU,
    so they fill node1 and go on to node2 (asked for tasks only, Slurm put them all on node1);
    with TensorFlow loaded on them, their job leaves squeue within seconds of stop()."""
    from helpers.engines import start_engines

    _no_slurm_settings(monkeypatch)
    engines = start_engines(6, slurm=True, timeout=120, activate=False)
    try:
        placement = engines.placement()
        found = engines.identities()
        assert sorted({i["host"] for i in found}) == ["node1", "node2"], placement
        for host in ("node1", "node2"):
            gpus = [i["gpus"] for i in found if i["host"] == host]
            assert all(len(g.split(",")) == 1 for g in gpus) and len(set(gpus)) == len(gpus), placement
        engines.view.execute("from helpers.host import import_tensorflow; "
                             "tf = import_tensorflow(); x = tf.constant(1.0) + 1", block=True)
    finally:
        stop_s = engines.stop()
    started = time.monotonic()
    # 6.7 s in an earlier session, 8.2-8.7 s here on 2026-11-23 (with or without the requeue settings
    # of slurm/local/up), once over 10 s in CI: Slurm's completing and purge, not the course
    assert _squeue_empty(slurm["env"], within=20), "the engines' job is still in squeue 20 s after stop()"
    report(f"6 engines, no settings: {placement}; stop() {stop_s:.2f} s, squeue empty "
           f"{time.monotonic() - started:.1f} s later")
    left = _job_processes()
    assert not left, left


@pytest.mark.parametrize("n, expected", [(2, [("node3", 1), ("node4", 1)]), (3, [("node3", 2), ("node4", 1)])])
def test_engines_with_no_settings_spread_one_per_cpu_node(slurm, monkeypatch, n, expected):
    """The partition of CPU nodes: one engine per node while there are nodes, then evenly."""
    from collections import Counter

    from helpers.engines import start_engines

    _no_slurm_settings(monkeypatch)
    monkeypatch.setenv("COURSE_SLURM_PARTITION", "cpu")
    engines = start_engines(n, slurm=True, timeout=120, activate=False)
    try:
        hosts = Counter(i["host"] for i in engines.identities())
        assert sorted(hosts.items()) == expected, engines.placement()
        assert all(i["gpus"] == "" for i in engines.identities())
    finally:
        engines.stop()
    assert _squeue_empty(slurm["env"], within=10)


@pytest.mark.parametrize("plant", ["another user's directory", "a symbolic link"])
def test_local_slurm_scripts_refuse_a_planted_state_directory(tmp_path, plant):
    """Root runs slurm/local/up and down and trusts the state directory: one created first by
    another user (or a link to elsewhere) is refused before anything is read, killed or removed."""
    import os
    import shutil

    if os.geteuid() != 0:
        unavailable("needs root (the scripts run as root)", "COURSE_REQUIRE_SLURM")
    target = tmp_path / "victim"
    target.mkdir()
    (target / "keep").write_text("not Slurm's")
    state = tmp_path / "state"
    if plant == "a symbolic link":
        state.symlink_to(target)
    else:
        state.mkdir(mode=0o777)
        shutil.chown(state, user="nobody")
        (state / "slurmctld.pid").write_text(str(os.getpid()))  # "kill this" for root
    for script in ("up", "down"):
        done = subprocess.run([str(ROOT / "slurm/local" / script)], env={**os.environ, "COURSE_SLURM_DIR": str(state)},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and "refusing" in done.stderr, (script, done.stdout, done.stderr)
    assert (target / "keep").exists() and state.exists()


def test_local_slurm_keeps_its_state_where_no_other_user_can_create_it_first():
    """Absent when `down` checks it, a state directory under world-writable /var/tmp could be
    made by anyone before root reads PID files from it; root's /run cannot."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "COURSE_SLURM_DIR"}
    state = subprocess.run(["bash", "-c", f"source {ROOT / 'slurm/local/common.sh'}; echo $STATE"], env=env,
                           capture_output=True, text=True, timeout=30).stdout.strip()
    assert state == "/run/course-slurm", state
    parent = os.stat(os.path.dirname(state))
    assert parent.st_uid == 0 and not parent.st_mode & 0o022, oct(parent.st_mode)
    down = (ROOT / "slurm/local/down").read_text()
    assert down.count('[ -d "$STATE" ] && check_state_dir "$STATE"') == 2  # PID files read only after a check at use


def _attach_is_refused_and_job_left_running(slurm, submit: list[str], refusal: str) -> None:
    """Submit a job that is not this user's engines job, attach to its id: refused, still queued."""
    from helpers.engines import adopt_job
    from helpers.errors import CourseError

    submitted = subprocess.run([*submit, "--parsable", "--time=5", "--output=/dev/null", "--chdir=/tmp",
                                "--wrap", "sleep 120"], env=slurm["env"], capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    try:
        with pytest.raises(CourseError, match=refusal.format(job=job)):
            adopt_job(job, timeout=10, activate=False)
        time.sleep(1)
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=slurm["env"], capture_output=True,
                               text=True, timeout=30).stdout.strip()
        assert state in ("RUNNING", "PENDING"), f"the job was touched: {state!r}"
    finally:
        subprocess.run(["scancel", job], env=slurm["env"], timeout=30)
    assert _squeue_empty(slurm["env"])


def test_adopting_a_job_that_is_not_an_engines_job_leaves_it_alone(slurm):
    """A mistyped id that names the user's long training run: refused, and the job still runs."""
    _attach_is_refused_and_job_left_running(slurm, ["sbatch", "--job-name=multi-day-training"],
                                            "Slurm job {job} is 'multi-day-training' of user .*left alone")


def test_adopting_another_users_engines_job_leaves_it_alone(slurm, other_user):
    """An account coordinator (root here, who could cancel anything) attaches to an id that names
    another user's engines job, even one with the engines job's own name: refused, left running."""
    _attach_is_refused_and_job_left_running(
        slurm, ["runuser", "-u", other_user["name"], "--", "sbatch", "--job-name=tf-course-engines"],
        "Slurm job {job} is 'tf-course-engines' of user " + other_user["name"])


KILLED_KERNEL = """
import time
from helpers.engines import start_engines
engines = start_engines(2, slurm=True, timeout=120, activate=False)
print("READY", flush=True)
time.sleep(600)
"""


def test_slurm_engines_job_cancelled_when_the_kernel_is_killed(slurm, monkeypatch, report):
    """A kernel with Slurm engines is SIGKILLed: the watcher cancels the engines' job (it would
    otherwise hold its nodes until the time limit)."""
    import signal

    env = {k: v for k, v in slurm["env"].items() if k != "SLURM_JOB_ID"}
    kernel = subprocess.Popen([sys.executable, "-c", KILLED_KERNEL], env=env, stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert kernel.stdout.readline().strip() == "READY"
        assert "tf-course-engines-" in (subprocess.run(["squeue", "-h", "-o", "%j"], env=env, capture_output=True,
                                                       text=True).stdout)
        killed = time.perf_counter()
        kernel.send_signal(signal.SIGKILL)
        kernel.wait(timeout=30)
        assert _squeue_empty(slurm["env"], within=30), "the killed kernel's engines job is still queued"
        report(f"SIGKILL of a kernel with Slurm engines: squeue empty {time.perf_counter() - killed:.1f} s later")
    finally:
        if kernel.poll() is None:
            kernel.kill()
    assert not _job_processes()


def test_slurm_engines_stopped_when_a_notebook_cell_fails(slurm, monkeypatch, report):
    """The user's path: a notebook starts Slurm engines, a later cell fails, nbclient shuts the kernel
    down; the engines' job is gone from the queue."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from nbformat.v4 import new_code_cell, new_notebook

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    nb = new_notebook(cells=[
        new_code_cell("from helpers.engines import cluster\nengines = cluster.start_engines(2, slurm=True)"),
        new_code_cell("import subprocess\nprint(subprocess.run(['squeue', '-h', '-o', '%j'], capture_output=True, "
                      "text=True).stdout)"),
        new_code_cell("raise RuntimeError('a lesson cell fails')"),
    ])
    with pytest.raises(CellExecutionError):
        NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    queued = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert "tf-course-engines-course-" in queued, f"the engines' job should have been queued while the notebook ran: {queued}"
    assert _squeue_empty(slurm["env"], within=30), "the failed notebook's engines job is still queued"
    assert not _job_processes()
    report("notebook with Slurm engines and a failing cell: engines' job gone from squeue after the kernel ended")


def test_batch_job_notebook_submits_its_job_to_slurm(slurm, tmp_path):
    """Notebook 08 writes the take-home script and sbatch file, submits them to the local Slurm,
    waits, and proves from the job's output that its workers ran on both nodes, and from Slurm that
    the job ran --exclusive=user with the GPUs it asked for: none (COURSE_JOB_GPUS_PER_TASK=auto,
    outside a job with GPUs). The same lesson from a GPU server, its workers a (simulated) GPU each:
    test_hub_jobs; the setting's decisions: test_slurm_jobs."""
    env = {**slurm["env"], "COURSE_MODE": "quick", "COURSE_OUTPUT_DIR": str(tmp_path), "COURSE_JOB_GPUS_PER_TASK": "auto"}
    _make_course("08_batch_job", env)
    logs = list((tmp_path / "batch_job").glob("tf-mwms-*.out"))
    assert len(logs) == 1, "the notebook ran its job without Slurm"
    text = logs[0].read_text()
    assert "WORKER" in text and (tmp_path / "batch_job" / "run" / "model.keras").exists()
    visible = workers_visible_devices(text)
    assert visible == ["null"], f"CUDA_VISIBLE_DEVICES of the workers: {visible}"
    assert _squeue_empty(slurm["env"])


def test_input_notebook_stages_its_shards_once_on_slurm(slurm, tmp_path, report):
    """Notebook 16 on the local Slurm as docs/slurm.md offers it to `make course`: without COURSE_NODE_LOCAL,
    its nodes sharing one /tmp (the staging's mkdir failed on the second node: "File exists"). This is the job
    script's one-directory branch: each job copies the TFRecord files once with cp (no sbcast), its workers
    (2, then 3, on node1 and node2) read their FILE shards from there, the notebook's proof counts the
    examples; here: both jobs staged with cp, their workers ran on both nodes, and the copies are gone.
    The other branch, each node's own disk (COURSE_NODE_LOCAL): one sbcast of a tar, unpacked on every node,
    each node's copy checked byte for byte, private to its node, unseen from the login side and gone at the
    end and on scancel, runs the same job script with a stand-in reader in test_slurm_job_isolation
    (test_lesson_16_copies_are_private_and_gone_at_the_end_and_on_scancel; the nodes sharing a directory:
    test_lesson_16_stages_once_where_the_nodes_share_one_directory). Until 2026-11-29 the lesson also ran
    whole with node-local disks, a second run of the same cells and proof."""
    env = {**slurm["env"], "COURSE_MODE": "quick", "COURSE_OUTPUT_DIR": str(tmp_path)}
    env.pop("COURSE_NODE_LOCAL")
    _make_course("16_input_at_scale", env)
    logs = sorted((tmp_path / "input_at_scale").glob("tf-shards-*.out"))
    assert len(logs) == 2, "the notebook ran its jobs without Slurm"
    staged = []
    for log in logs:
        text = log.read_text()
        assert re.search(r"^STAGED 2 nodes \d+ ms \(one cp, one directory for all nodes\)$", text, re.M), text[-2000:]
        hosts = set(re.findall(r"^WORKER \d+ on (node\d):", text, re.M))
        assert hosts == {"node1", "node2"}, text[-2000:]
        staged.append(re.search(r"^STAGED 2 nodes (\d+) ms", text, re.M).group(1))
    jobs = [re.search(r"tf-shards-(\d+)\.out$", l.name).group(1) for l in logs]
    left = [p for job in jobs for p in Path("/tmp").glob(f"shards-{job}.*")]
    assert not left, f"the jobs should remove their copies from /tmp: {left}"
    assert _squeue_empty(slurm["env"])
    report(f"lesson 16 on the local Slurm with one /tmp for both nodes: 2 jobs staged their files once each with "
           f"one cp in {', '.join(staged)} ms; workers on node1 and node2 read their FILE shards; proof passed; "
           "nothing left in /tmp")


def test_software_stack_notebook_loads_its_module_on_slurm(slurm, tmp_path, report):
    """Notebook 17 on the local Slurm (Lmod installed by slurm/local/up): its job script runs
    `module purge`, `module use`, `module load tf-hpc-course`, makes a venv on top and reports
    where each import came from; its second job runs Keras 3 without and with the fix and Keras 2
    (tf_keras) under MWMS, a step each on node1 and node2. Submitted as at a centre whose sbatch default is
    --export=NONE (SBATCH_EXPORT=NONE: lesson 17's fifth review, finding 4): both jobs need the variables the lesson
    sets, and get them only because the lesson asks for --export=ALL on sbatch's command line."""
    env = {**slurm["env"], "COURSE_MODE": "quick", "COURSE_OUTPUT_DIR": str(tmp_path), "SBATCH_EXPORT": "NONE"}
    _make_course("17_software_stack", env)
    stack_logs = list((tmp_path / "software_stack").glob("tf-stack-*.out"))
    keras_logs = list((tmp_path / "software_stack").glob("tf-keras-versions-*.out"))
    assert len(stack_logs) == 1 and len(keras_logs) == 1, "the notebook ran its jobs without Slurm"
    stack_text = stack_logs[0].read_text()
    assert "1) tf-hpc-course/2026.11" in stack_text and "STACK " in stack_text, stack_text[-2000:]
    other = [json.loads(l[6:]) for l in stack_text.splitlines() if l.startswith("OTHER ")]
    assert other == [{"tensorflow": None, "keras": None, "einops": None}], stack_text[-2000:]  # the node's system Python: none
    runs = [json.loads(l[6:]) for l in keras_logs[0].read_text().splitlines() if l.startswith("KERAS ")]
    assert len(runs) == 6 and {r["host"] for r in runs} == {"node1", "node2"}, runs
    assert sorted((r["module"], r["imported"], r["fit"].split(":")[0]) for r in runs) == sorted(
        [("keras", "keras", "ValueError")] * 2 + [("keras", "keras", "ok")] * 2 + [("tf_keras", "tf_keras", "ok")] * 2), runs
    assert _squeue_empty(slurm["env"])
    report("lesson 17 on the local Slurm: module tf-hpc-course/2026.11 loaded by Lmod in the job, a venv on top "
           "(EBPYTHONPREFIXES through its .pth; the node's /usr/bin/python3 found none of the module's packages); "
           "Keras 3 fit under MWMS failed without the fix and ran with it, tf_keras ran, on node1 and node2")


def test_bench_slurm_engines_row_leaves_the_starting_directory_alone(slurm, tmp_path, report):
    """The bench's Slurm row times our engines against ipyparallel's own Slurm launcher, which
    writes its batch file into the working directory: started from a learner's directory, the
    bench leaves nothing there (the file goes under the output directory, which the nodes share)."""
    started_here = tmp_path / "started-here"
    started_here.mkdir()
    out = tmp_path / "output"
    code = ("import dataclasses, json\nfrom helpers.commands.bench import _bench_slurm_engines\n"
            "print('ROWS ' + json.dumps([dataclasses.asdict(r) for r in _bench_slurm_engines(1)]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=started_here, capture_output=True, text=True,
                          timeout=600, env={**slurm["env"], "COURSE_OUTPUT_DIR": str(out)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = json.loads(done.stdout.split("ROWS ", 1)[1])
    assert len(rows) == 1 and rows[0]["ours"] > 0 and rows[0]["baseline"] > 0, rows
    assert list(started_here.iterdir()) == [], list(started_here.iterdir())
    assert list((out / "bench" / "ipyparallel-slurm").glob("*sbatch*")), list(out.rglob("*"))
    report(f"2 Slurm engines ready: ours {rows[0]['ours']:.2f} s, ipyparallel's Slurm launcher "
           f"{rows[0]['baseline']:.2f} s; its batch file under the output directory")


ALLOCATION_CLI = """
set -u
start() { "$PY" -m helpers cluster start -n 2 --slurm | sed -n 's/.*cluster \\(course-[0-9a-f]*\\).*/\\1/p' | head -1; }
steps() { squeue -h -s -j "$SLURM_JOB_ID" -o '%j' | grep -c '^tf-course-engines-' || true; }
first=$(start); echo "FIRST $first steps=$(steps)"
"$PY" -m helpers cluster stop --cluster-id "$first"; echo "STOP_ID $? steps=$(steps)"
second=$(start); echo "SECOND $second steps=$(steps)"
"$PY" -m helpers cluster stop --all; echo "STOP_ALL $? steps=$(steps)"
"""


def test_the_command_line_stops_its_cluster_inside_an_allocation(slurm):
    """A JupyterHub server or salloc: `cluster start --slurm` puts the engines in an srun step;
    `cluster stop --cluster-id` and `--all` must find that cluster again (ipyparallel recorded
    the launcher under a name it could not import back), end the step, and free the CPUs for the
    next start."""
    done = subprocess.run(["salloc", "-N", "2", "-n", "2", "--time=5", "bash", "-c", ALLOCATION_CLI],
                          env={**slurm["env"], "PY": sys.executable}, capture_output=True, text=True,
                          timeout=400, cwd=ROOT)
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.split()[:1]}
    assert lines.get("FIRST", "").startswith("FIRST course-") and lines["FIRST"].endswith("steps=1"), done.stdout + done.stderr
    assert lines.get("STOP_ID") == "STOP_ID 0 steps=0", done.stdout + done.stderr[-2000:]
    assert lines.get("SECOND", "").startswith("SECOND course-") and lines["SECOND"].endswith("steps=1"), \
        done.stdout + done.stderr[-2000:]
    assert lines.get("STOP_ALL") == "STOP_ALL 0 steps=0", done.stdout + done.stderr[-2000:]
    assert _squeue_empty(slurm["env"])
    left = _job_processes() + [p for p in _leftovers() if "ipcontroller" in p or "ipengine" in p]
    assert not left, left


BUSY_ALLOCATION = """
import os, subprocess, sys, time
holder = subprocess.Popen(["srun", "-n", "2", "--job-name=forgotten-step", "sleep", "300"])
deadline = time.monotonic() + 60
while "forgotten-step" not in subprocess.run(["squeue", "--steps", "--noheader", "--format=%j", "--jobs",
                                              os.environ["SLURM_JOB_ID"]], capture_output=True, text=True).stdout:
    if time.monotonic() > deadline or holder.poll() is not None:  # the step never started: nothing to test
        sys.exit(f"the holding step did not start within 60 s (srun: {holder.poll()})")
    time.sleep(0.1)  # poll until Slurm lists the step, which then holds the allocation's CPUs
from helpers.engines import start_engines
from helpers.errors import CourseError
began = time.monotonic()
try:
    start_engines(2, slurm=True, timeout=300)
    print("STARTED")
except CourseError as exc:
    print(f"REFUSED after {time.monotonic() - began:.1f} s: {exc}")
holder.kill()
"""


def test_engines_say_within_seconds_that_another_step_holds_the_cpus(slurm):
    """ipcmagic's engines (or a forgotten step) hold the allocation: the lesson's srun step would
    wait for ever; the course says so within seconds, naming the step and the fix."""
    done = subprocess.run(["salloc", "-N", "1", "-n", "2", "--time=5", sys.executable, "-c", BUSY_ALLOCATION],
                          env=slurm["env"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    line = next((l for l in done.stdout.splitlines() if l.startswith(("REFUSED", "STARTED"))), done.stdout + done.stderr)
    assert line.startswith("REFUSED"), line
    # the refusal names the step (below), so it came from the busy-step check, not the 300 s timeout;
    # the seconds only guard against waiting for that timeout (half of it: generous under load)
    assert float(line.split()[2]) < 150, line
    assert "forgotten-step" in line and "scancel" in line and "--overlap" in line, line
    assert "COURSE_CLUSTER=default" in line, line  # ipcmagic's engines: how to use them instead
    assert _squeue_empty(slurm["env"], within=30)


def test_bench_times_engines_in_an_allocation_next_to_ipyparallel_and_ipcmagic(slurm, tmp_path, report):
    """The bench's allocation rows run: the course, ipyparallel's MPI launcher and ipcmagic in
    one allocation (the figures themselves are the bench's to judge)."""
    code = ("import dataclasses, json\nfrom helpers.commands.bench import _bench_allocation_engines\n"
            "print('ROWS ' + json.dumps([dataclasses.asdict(r) for r in _bench_allocation_engines(1)]))")
    done = subprocess.run([sys.executable, "-c", code], env={**slurm["env"], "COURSE_OUTPUT_DIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    line = next((l for l in done.stdout.splitlines() if l.startswith("ROWS ")), None)
    assert line, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads(line[5:])
    report("bench, 2 engines in one allocation: " + "; ".join(f"{r['figure']} {r['ours']:.2f} s vs {r['baseline']:.2f} s"
                                                             for r in rows))
    assert [r["figure"] for r in rows] == ["2 engines in an allocation ready (srun step), vs mpi",
                                           "2 engines in an allocation ready (srun step), vs ipcmagic",
                                           "2 engines in an allocation stopped, vs mpi",
                                           "2 engines in an allocation stopped, vs ipcmagic"]
    assert all(r["ours"] > 0 and r["baseline"] > 0 for r in rows), rows
    assert _squeue_empty(slurm["env"])
