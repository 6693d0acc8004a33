"""Engines started from a shell (`ipcluster` with the course profile, or `python -m helpers cluster`)
and lessons that attach to them. Everything runs in separate processes, as a user's shell would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import run_cli
from tests.conftest import squeue_empty as _squeue_empty
from tests.support.lesson_probe import read_probe, write_probe

ROOT = Path(__file__).resolve().parents[1]
IPCLUSTER = str(Path(sys.executable).parent / "ipcluster")


def _squeue(env) -> str:
    """Job id and full name of every job in the queue (squeue's default cuts names to 8 characters)."""
    return subprocess.run(["squeue", "-h", "-o", "%i %j %T"], env=env, capture_output=True, text=True,
                          timeout=30).stdout.strip()


def _ipcluster(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([IPCLUSTER, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _processes_under(directory: Path) -> list[int]:
    """Processes of ours whose command line or IPython dir names `directory` (controller, engines)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if (str(directory) in " ".join(proc.info["cmdline"] or [])
                    or str(directory) in proc.environ().get("IPYTHONDIR", "")):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return [pid for pid in found if pid != os.getpid()]


def _gone(directory: Path, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while _processes_under(directory) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _processes_under(directory)


class _Started:
    """`ipcluster start` inside a `with`: whatever happens, `ipcluster stop` runs at the end, and
    what it left (a failed start can leave a controller) is reported, then killed."""

    def __init__(self, env: dict, directory: Path, *args: str):
        self.env, self.directory, self.args = env, directory, args
        self.stopped = None
        self.left: list[int] = []

    def __enter__(self) -> "_Started":
        done = _ipcluster("start", "--profile=tf-course", *self.args, "--daemonize", env=self.env)
        assert done.returncode == 0, done.stderr[-2000:]
        return self

    def __exit__(self, *exc) -> None:
        self.stopped = _ipcluster("stop", "--profile=tf-course", env=self.env)
        if not _gone(self.directory):
            self.left = _processes_under(self.directory)
            for pid in self.left:
                try:
                    psutil.Process(pid).kill()
                except psutil.Error:
                    pass


def test_profile_without_slurm_is_loopback_and_loadable(tmp_path):
    from traitlets.config.loader import PyFileConfigLoader

    env = {**os.environ, "IPYTHONDIR": str(tmp_path)}
    done = run_cli("cluster", "profile", "--no-slurm", env=env)
    assert done.returncode == 0, done.stderr
    assert "controller on 127.0.0.1" in done.stdout and "ipcluster start --profile=tf-course" in done.stdout
    path = tmp_path / "profile_tf-course" / "ipcluster_config.py"
    assert path.stat().st_mode & 0o077 == 0, "the profile's settings are the owner's only"
    config = PyFileConfigLoader(path.name, str(path.parent)).load_config()
    assert config.Cluster.controller_ip == "127.0.0.1"
    controller = PyFileConfigLoader("ipcontroller_config.py", str(path.parent)).load_config()
    assert controller.HeartMonitor.period == 100
    assert config.LocalEngineSetLauncher.environment["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"


def test_wildcard_controller_address_is_refused(monkeypatch):
    from helpers.errors import CourseError
    from helpers.slurm.nodes import controller_ip

    for wildcard in ("0.0.0.0", "*", "::"):
        monkeypatch.setenv("COURSE_CONTROLLER_IP", wildcard)
        with pytest.raises(CourseError, match="listen on every interface"):
            controller_ip()
    monkeypatch.setenv("COURSE_CONTROLLER_IP", "10.1.2.3")
    assert controller_ip() == "10.1.2.3"


def test_unknown_cluster_is_one_clear_error(tmp_path, monkeypatch):
    from helpers.engines import start_engines
    from helpers.errors import CourseError

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    monkeypatch.setenv("COURSE_CLUSTER", "course-nosuch")
    with pytest.raises(CourseError, match="COURSE_CLUSTER='course-nosuch': no such running cluster"):
        start_engines(2, activate=False)


def test_lessons_attach_to_ipcluster_engines_and_leave_them_running(tmp_path, monkeypatch, report):
    """ipcluster with the course profile; a lesson attaches (no engines of its own), leaves the
    cluster running; the next lesson gets fresh engines (TensorFlow configures collectives once
    per process); `ipcluster stop` leaves nothing."""
    from helpers.engines import start_engines

    env = {**os.environ, "IPYTHONDIR": str(tmp_path)}
    assert run_cli("cluster", "profile", "--no-slurm", env=env).returncode == 0
    started = time.perf_counter()
    with _Started(env, tmp_path, "-n", "2") as cluster:
        monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
        monkeypatch.setenv("COURSE_CLUSTER", "tf-course")
        first = start_engines(2, activate=False)
        ready = time.perf_counter() - started
        logs = " ".join(p.read_text() for p in (tmp_path / "profile_tf-course" / "log").glob("ipcontroller*.log"))
        assert "beating every 100ms" in logs, "the profile's 100 ms heartbeat did not reach the controller"
        client_file = tmp_path / "profile_tf-course" / "security" / "ipcontroller-client.json"
        assert json.loads(client_file.read_text())["curve_serverkey"], "the profile's controller runs without CurveZMQ"
        assert not first.owned and len(first) == 2
        first_ids, first_pids = set(first.client.ids), {i["pid"] for i in first.identities()}
        workers = first.setup_multiworker()  # what a lesson does: the engines are now used
        assert [w["rank"] for w in workers] == [0, 1]
        first.stop()
        assert all(psutil.pid_exists(pid) for pid in first_pids), "stop() of an attached cluster stopped its engines"

        restart = time.perf_counter()
        second = start_engines(2, activate=False)
        restarted = time.perf_counter() - restart
        second_pids = {i["pid"] for i in second.identities()}
        assert len(second) == 2 and not set(second.client.ids) & first_ids
        assert not second_pids & first_pids, "the used engines were handed to the next lesson"
        victim = second.identities()[0]["pid"]
        second.client[second.client.ids[0]].execute("import os; os._exit(1)", block=False)  # as lesson 06 does
        deadline = time.monotonic() + 10
        while psutil.pid_exists(victim) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not psutil.pid_exists(victim)
        second.stop()
        third = start_engines(2, activate=False)
        third_pids = {i["pid"] for i in third.identities()}
        assert len(third) == 2 and not third_pids & second_pids, "a lesson got a dead engine's place empty"
        third.stop()
        report(f"ipcluster (course profile, 2 local engines): attached {ready:.1f} s after `ipcluster start`; "
               f"used engines restarted for the next lesson in {restarted:.1f} s")
    assert cluster.stopped.returncode == 0, cluster.stopped.stderr[-2000:]
    assert not cluster.left, f"processes left after ipcluster stop: {cluster.left}"


# ------------------------------------------------------------------------ on the local Slurm
@pytest.mark.slurm
def test_cluster_command_on_slurm_keeps_its_job_until_stopped(slurm, tmp_path, report):
    env = {**slurm["env"], "IPYTHONDIR": str(tmp_path)}
    started = run_cli("cluster", "start", "-n", "2", "--slurm", env=env, timeout=300)
    assert started.returncode == 0, started.stderr[-2000:]
    cluster_id = re.search(r"cluster (course-[0-9a-f]+): 2 engines ready: (.*)", started.stdout)
    assert cluster_id, started.stdout
    time.sleep(2)  # the command has returned: its job must still run
    queue = _squeue(slurm["env"])
    assert queue and f"tf-course-engines-{cluster_id.group(1)}" in queue, queue
    stopped = run_cli("cluster", "stop", "--cluster-id", cluster_id.group(1), env=env)
    assert stopped.returncode == 0 and "stopped 1 cluster(s)" in stopped.stdout, stopped.stderr
    assert _squeue_empty(slurm["env"]), _squeue(slurm["env"])
    assert _gone(tmp_path)
    report(f"python -m helpers cluster start -n 2 --slurm: {cluster_id.group(2)}")


@pytest.mark.slurm
def test_ipcluster_on_slurm_with_the_profile_runs_notebook_03_attached(slurm, tmp_path, report):
    """The trainer's way: profile, `ipcluster start --engines=slurm`, then lesson 03's start-up (its cells
    up to the strategy and an all-reduce, tests/support/lesson_probe.py) run by nbval against those engines: the
    engines' job is the same before and after, and still runs; then the next lesson's start-up (the same probe,
    as a lesson run after it would start), which finds engines that ran TensorFlow and restarts them through
    the profile's launcher. A lesson's cells after its start-up do not depend on how its engines were found:
    lesson 04 runs whole on local engines in the nbval pass, its custom loop across two Slurm nodes in
    test_slurm::test_mwms_across_two_nodes_with_slurm_resolver[custom], lesson 03 whole on Slurm engines in
    test_lessons_in_class_layouts."""
    import ipyparallel as ipp

    # the engines' job inherits COURSE_OUTPUT_DIR from ipcluster's environment: the chief saves there
    env = {**slurm["env"], "IPYTHONDIR": str(tmp_path), "COURSE_SLURM_PARTITION": "cpu",
           "COURSE_OUTPUT_DIR": str(tmp_path / "out")}
    profile = run_cli("cluster", "profile", env=env)
    assert profile.returncode == 0 and "--spread-job" in profile.stdout, profile.stdout + profile.stderr
    with _Started(env, tmp_path, "-n", "2", "--engines=slurm") as cluster:
        found = ipp.Cluster.from_file(profile_dir=str(tmp_path / "profile_tf-course"))
        client = found.connect_client_sync(timeout=60)
        client.wait_for_engines(2, timeout=120, interactive=False)
        hosts = sorted(client[:].apply_sync(__import__("socket").gethostname))
        client.close()
        assert hosts == ["node3", "node4"], f"the profile should spread 2 engines over the 2 CPU nodes: {hosts}"
        job_before = _squeue(slurm["env"])
        probe, probed = write_probe(tmp_path)
        lesson = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
             "--nbval-cell-timeout=600", str(probe)],
            env={**env, "COURSE_CLUSTER": "tf-course", "COURSE_MODE": "quick", "COURSE_ENGINES": "slurm"},
            capture_output=True, text=True, timeout=900, cwd=ROOT)
        assert lesson.returncode == 0, lesson.stdout[-4000:]
        engines = read_probe(probed)
        assert sorted(e["host"] for e in engines) == hosts, f"the lesson should get the job's engines: {engines}"
        # where the chief saves (lesson 03's model, output_dir()): the engines' job got ipcluster's environment
        assert {e["output_dir"] for e in engines} == {str(tmp_path / "out")}, engines
        assert _squeue(slurm["env"]) == job_before, "the lesson should use the running job, not start its own"
        # the next lesson finds engines that ran TensorFlow: they are restarted through the
        # profile's launcher (a new engines job, spread the same way), and its start-up passes too
        (tmp_path / "next").mkdir()
        probe, next_probed = write_probe(tmp_path / "next")
        next_lesson = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
             "--nbval-cell-timeout=600", str(probe)],
            env={**env, "COURSE_CLUSTER": "tf-course", "COURSE_MODE": "quick", "COURSE_NBVAL_SLURM": "visible"},
            capture_output=True, text=True, timeout=900, cwd=ROOT)
        assert next_lesson.returncode == 0, next_lesson.stdout[-4000:]
        restarted = read_probe(next_probed)
        assert sorted(e["host"] for e in restarted) == hosts, f"the next lesson should get new engines: {restarted}"
        job_after = _squeue(slurm["env"])
        assert job_after and job_after != job_before and len(job_after.splitlines()) == 1, (job_before, job_after)
        client = ipp.Cluster.from_file(profile_dir=str(tmp_path / "profile_tf-course")).connect_client_sync(timeout=60)
        hosts_after = sorted(client[:].apply_sync(__import__("socket").gethostname))
        client.close()
        assert hosts_after == ["node3", "node4"], hosts_after
        report(f"ipcluster --engines=slurm with the course profile (cpu partition): engines on {hosts}; "
               f"notebook 03's start-up by nbval attached to them, job unchanged: {job_before.strip()}; "
               f"the next lesson's start-up: engines restarted as {job_after.strip()} on {hosts_after}")
    assert cluster.stopped.returncode == 0, cluster.stopped.stderr[-2000:]
    assert _squeue_empty(slurm["env"]), _squeue(slurm["env"])
    assert not cluster.left, f"processes left after ipcluster stop: {cluster.left}"
    assert not (ROOT / "slurm_engine.sbatch").exists(), "ipcluster wrote its batch script into the checkout"


@pytest.mark.slurm
def test_ipcluster_with_the_profile_on_gpu_nodes_binds_one_gpu_per_engine(slurm, tmp_path, report):
    import ipyparallel as ipp

    env = {k: v for k, v in {**slurm["env"], "IPYTHONDIR": str(tmp_path)}.items() if not k.startswith("COURSE_SLURM_")}
    done = run_cli("cluster", "profile", env=env)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "profile_tf-course" / "ipcluster_config.py").read_text()
    assert "--gpus-per-task=1" in text and "--ntasks-per-node" not in text, text
    assert "c.Cluster.controller_ip = '10.77.0.1'" in text, text
    with _Started(env, tmp_path, "-n", "3", "--engines=slurm") as cluster:
        found = ipp.Cluster.from_file(profile_dir=str(tmp_path / "profile_tf-course"))
        client = found.connect_client_sync(timeout=60)
        client.wait_for_engines(3, timeout=120, interactive=False)
        client[:].execute("import os, socket; where = (socket.gethostname(), os.environ.get('CUDA_VISIBLE_DEVICES'))",
                          block=True)
        where = sorted(client[:].pull("where", block=True))
        client.close()
    assert cluster.stopped.returncode == 0, cluster.stopped.stderr[-2000:]
    assert not cluster.left, f"processes left after ipcluster stop: {cluster.left}"
    assert [tuple(w) for w in where] == [("node1", "0"), ("node1", "1"), ("node1", "2")], where
    assert _squeue_empty(slurm["env"]), _squeue(slurm["env"])
    report(f"ipcluster --engines=slurm -n 3 with the course profile (GPU nodes): {where}")
