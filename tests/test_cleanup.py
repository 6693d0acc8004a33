"""`python -m helpers cluster stop --all` touches only what is provably ours: a PID reused since
the cluster file was written is left alone, a cluster whose kernel still runs is left alone
(unless --force), a crashed kernel's cluster is stopped. All from separate processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


def _of_cluster(cluster_id: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("IPP_CLUSTER_ID") == cluster_id:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _wait_gone(procs: list[psutil.Process], within: float = 15.0) -> list[psutil.Process]:
    gone, alive = psutil.wait_procs(procs, timeout=within)
    return [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_stop_all_leaves_a_reused_pid_alone(tmp_path):
    """The cluster's processes died (a reboot, an OOM kill) and their PIDs now belong to something
    else: `stop --all` must remove the stale file and signal nothing."""
    env = {**os.environ, "IPYTHONDIR": str(tmp_path)}
    started = run_cli("cluster", "start", "-n", "1", env=env)
    assert started.returncode == 0, started.stderr
    cluster_id = re.search(r"cluster (course-[0-9a-f]+)", started.stdout).group(1)
    for proc in _of_cluster(cluster_id):
        proc.kill()
    assert not _wait_gone(_of_cluster(cluster_id))
    file = tmp_path / "profile_default" / "security" / f"cluster-{cluster_id}.json"
    state = json.loads(file.read_text())
    stranger = subprocess.Popen(["sleep", "300"])  # the process that now has "our" PID
    try:
        state["controller"]["state"]["pid"] = stranger.pid
        for engine_set in state["engines"]["sets"].values():
            for engine in engine_set["engines"].values():
                engine["pid"] = stranger.pid
        file.write_text(json.dumps(state))
        done = run_cli("cluster", "stop", "--all", env=env)
        assert done.returncode == 0, done.stderr
        time.sleep(0.5)
        assert stranger.poll() is None, "stop --all killed a process that only had the cluster's old PID"
        assert f"left alone PID {stranger.pid}" in done.stdout, done.stdout
        assert not file.exists(), "the stale cluster file should be removed"
    finally:
        stranger.kill()
        stranger.wait()


OWNER = """
import sys, time
from helpers.engines import start_engines
engines = start_engines(1, activate=False)
print("CLUSTER", engines.cluster_id, flush=True)
time.sleep(600)
"""


def _all_watchers() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if "helpers.kernel_watch" in " ".join(p.info["cmdline"] or [])]


def _watchers(cluster_id: str) -> list[psutil.Process]:
    return [p for p in _all_watchers() if cluster_id in (p.info["cmdline"] or [])]


def test_stop_all_spares_a_running_kernel_and_cleans_a_crashed_one(tmp_path, report):
    """The crash the watcher cannot cover (it died too, e.g. the whole session was killed):
    `stop --all` from a shell spares a live kernel's cluster and cleans the dead one's."""
    env = {**os.environ, "IPYTHONDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    kernel = subprocess.Popen([sys.executable, "-c", OWNER], env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    cluster_id = ""
    try:
        line = kernel.stdout.readline()
        assert line.startswith("CLUSTER"), line
        cluster_id = line.split()[1]
        ours = _of_cluster(cluster_id)
        assert len(ours) >= 2, "controller and engine should run"

        spared = run_cli("cluster", "stop", "--all", env=env)
        assert spared.returncode == 0, spared.stderr
        assert f"in use by the running kernel PID {kernel.pid}" in spared.stdout, spared.stdout
        assert all(p.is_running() for p in ours), "stop --all stopped the engines of a kernel that still runs"

        for watcher in _watchers(cluster_id):
            watcher.kill()
        kernel.send_signal(signal.SIGKILL)  # the kernel crashes: no exit hook runs
        kernel.wait(timeout=30)
        cleaned = run_cli("cluster", "stop", "--all", env=env)
        assert cleaned.returncode == 0 and "stopped 1 cluster(s)" in cleaned.stdout, cleaned.stdout + cleaned.stderr
        assert not _wait_gone(ours), "the crashed kernel's engines are still running"
        assert not list((tmp_path / "profile_default" / "security").glob(f"*{cluster_id}*"))
        report(f"stop --all: spared the cluster of running kernel {kernel.pid}; after SIGKILL of the kernel "
               f"(and its watcher) stopped its {len(ours)} processes")
    finally:
        if kernel.poll() is None:
            kernel.kill()
        for proc in _of_cluster(cluster_id) if cluster_id else []:
            proc.kill()


def _jupyter_kernel(ipython_dir: Path):
    """A Jupyter kernel as JupyterLab starts one, its IPython directory `ipython_dir`: (manager, client)."""
    from jupyter_client.manager import start_new_kernel

    os.environ["IPYTHONDIR"] = str(ipython_dir)  # the kernel inherits it
    try:
        return start_new_kernel(kernel_name="python3", cwd=str(ROOT))
    finally:
        del os.environ["IPYTHONDIR"]


def _start_two_engines(kc) -> str:
    """In the kernel, what a lesson's first cells do: 2 local engines; their cluster's id."""
    outputs = []
    kc.execute_interactive("from helpers.engines import cluster\nengines = cluster.start_engines(2, activate=False)\n"
                           "print('CLUSTER', engines.cluster_id)", timeout=120,
                           output_hook=lambda msg: outputs.append(msg["content"].get("text", "")))
    return next(t.split()[1] for t in "".join(outputs).splitlines() if t.startswith("CLUSTER"))


def test_engines_end_with_a_sigkilled_jupyter_kernel(tmp_path, report):
    """A real Jupyter kernel starts engines and is SIGKILLed (as the OOM killer does): its engines
    and controller end by themselves, with no command, and their files are removed."""
    km, kc = _jupyter_kernel(tmp_path)
    cluster_id = ""
    try:
        cluster_id = _start_two_engines(kc)
        ours = _of_cluster(cluster_id)
        assert len(ours) >= 3, f"controller and 2 engines should run: {len(ours)} processes of {cluster_id}"
        assert _watchers(cluster_id), (f"the kernel's watcher of {cluster_id} is not running; watchers running: "
                                       f"{[p.info['cmdline'] for p in _all_watchers()]}")
        killed = time.perf_counter()
        os.kill(km.provisioner.process.pid, signal.SIGKILL)
        assert not _wait_gone(ours, within=20), "the killed kernel's engines are still running"
        ended = time.perf_counter() - killed
        assert not _wait_gone(_watchers(cluster_id), within=10)
        # the watcher removes the cluster's files after its processes end: look once it has left
        assert not list((tmp_path / "profile_default" / "security").glob(f"*{cluster_id}*"))
        report(f"SIGKILL of a Jupyter kernel: its controller and 2 engines ended {ended:.1f} s later, no command run")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        for proc in _of_cluster(cluster_id) if cluster_id else []:
            proc.kill()


def test_in_jupyterlab_a_failed_cell_keeps_the_engines_and_shutting_the_kernel_down_stops_them(tmp_path):
    """docs/troubleshooting.md's row "a notebook cell fails, or the kernel exits", the way JupyterLab runs a
    notebook: a failed cell stops nothing (the kernel lives on, its engines with it, for the next cell);
    shutting the kernel down (JupyterLab's Shut Down Kernel: a shutdown request, not a kill) stops them.
    (nbval and `make course` end the kernel after a failed cell: test_engines's nbclient test.)"""
    km, kc = _jupyter_kernel(tmp_path)
    cluster_id, shut_down = "", False
    try:
        cluster_id = _start_two_engines(kc)
        ours = _of_cluster(cluster_id)
        failed = kc.execute_interactive("raise RuntimeError('a lesson cell fails')", timeout=60)
        assert failed["content"]["status"] == "error", failed["content"]
        time.sleep(2)
        assert len(ours) >= 3 and all(p.is_running() for p in ours), "a failed cell stopped the engines"
        assert km.is_alive(), "a failed cell ended the kernel"
        km.shutdown_kernel(now=False)  # what JupyterLab's Shut Down Kernel asks the server for
        shut_down = True
        assert not _wait_gone(ours, within=20), "the shut-down kernel's engines are still running"
    finally:
        kc.stop_channels()
        if not shut_down:
            km.shutdown_kernel(now=True)
        for proc in _of_cluster(cluster_id) if cluster_id else []:
            proc.kill()


def test_stop_all_force_stops_a_running_kernels_cluster(tmp_path):
    env = {**os.environ, "IPYTHONDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    kernel = subprocess.Popen([sys.executable, "-c", OWNER], env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        cluster_id = kernel.stdout.readline().split()[1]
        ours = _of_cluster(cluster_id)
        forced = run_cli("cluster", "stop", "--all", "--force", env=env)
        assert forced.returncode == 0 and "stopped 1 cluster(s)" in forced.stdout, forced.stdout + forced.stderr
        assert not _wait_gone(ours)
    finally:
        kernel.kill()
        kernel.wait()


KERNEL_WITH_WORKERS = """
import subprocess, sys, threading, time
from helpers.kernel_watch import end_with_kernel
from helpers.local_workers import run_local_workers
board = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
end_with_kernel(board)  # as lesson 09 does with TensorBoard
print("BOARD", board.pid, flush=True)
worker = "import os, time; time.sleep(600)"
threading.Thread(target=run_local_workers, args=(["-c", worker], 2), kwargs={"deadline_s": 600}, daemon=True).start()
time.sleep(600)
"""


def test_a_killed_kernel_takes_its_workers_and_tensorboard_with_it():
    """Local TensorFlow workers and TensorBoard run in sessions of their own (a Ctrl-C in the
    notebook must not reach them half-way); when the kernel is SIGKILLed, they still end."""
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL_WITH_WORKERS], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    started = []
    try:
        board = int(kernel.stdout.readline().split()[1])
        deadline, workers = time.monotonic() + 30, []
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = [p for p in psutil.Process(kernel.pid).children() if p.pid != board and "TF_CONFIG" in p.environ()]
            time.sleep(0.2)
        assert len(workers) == 2, "the kernel's two local workers did not start"
        started = [psutil.Process(board), *workers]
        kernel.kill()
        kernel.wait()
        alive = _wait_gone(started, within=15)
    finally:
        kernel.kill()
        for proc in started:  # a failed run leaves nothing behind either
            try:
                proc.kill()
            except psutil.Error:
                pass
    assert not alive, f"still running after their kernel was killed: {[p.pid for p in alive]}"


def test_leftover_checks_count_only_the_suites_own_slurm_jobs(tmp_path):
    """A job process of another Slurm on the machine (its own SLURM_CONF) is not the suite's to count;
    one started under the suite's slurm.conf is."""
    from tests.conftest import SUITE_SLURM_DIR, leftovers

    job = {"SLURM_JOB_ID": "7", "PATH": os.environ["PATH"]}
    theirs = subprocess.Popen(["sleep", "30"], env={**job, "SLURM_CONF": "/etc/slurm/slurm.conf"})
    ours = subprocess.Popen(["sleep", "30"], env={**job, "SLURM_CONF": str(SUITE_SLURM_DIR / "cluster" / "slurm.conf")})
    try:
        found = " ".join(leftovers())
        assert f"{ours.pid} [sleep]" in found, found
        assert f"{theirs.pid} [sleep]" not in found, found
    finally:
        for proc in (theirs, ours):
            proc.kill()
            proc.wait()


def test_the_kernel_watcher_imports_no_ipyparallel():
    """A watcher runs beside every kernel that started engines or workers (30 in a class): importing
    it must not import the engines' machinery (ipyparallel, TensorFlow)."""
    done = subprocess.run([sys.executable, "-c", "import sys, helpers.kernel_watch\n"
                           "print(sorted(m for m in ('ipyparallel', 'tensorflow', 'helpers.engines.cluster') if m in sys.modules))"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_process_that_ends_while_the_leftovers_are_read_is_not_counted():
    """CI failed once when a slurmstepd of the Slurm stream ended while a local stream read the machine (psutil's
    NoSuchProcess from its parents): a process gone by then is not left behind, and the check goes on."""
    from tests.conftest import started_by_the_suite

    child = subprocess.Popen(["sleep", "30"])
    gone = psutil.Process(child.pid)
    child.kill()
    child.wait(timeout=10)
    assert started_by_the_suite(gone) is False
