"""`python -m helpers doctor` on the local Slurm with simulated GPUs: GO when healthy, and each
planted fault named on its own line with a fix (one fault per check)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli, squeue_empty

ROOT = Path(__file__).resolve().parents[1]
FAKEBIN = ROOT / "tests" / "fakebin"


def test_doctor_without_slurm_checks_this_host(monkeypatch):
    from helpers import doctor

    monkeypatch.setenv("grpc_proxy", "http://127.0.0.1:9")
    checks = {c.name: c for c in doctor.run(slurm=False)}
    assert checks["versions"].level == "go" and "keras-team/keras#20585" in checks["versions"].detail
    assert checks["proxies"].level == "warn" and "grpc_proxy" in checks["proxies"].detail
    assert checks["slurm"].level == "skip"
    text = doctor.render(list(checks.values()))
    assert text.splitlines()[-1].startswith("verdict: GO") and "-> fix: in scripts of your own" in text


def _doctor(slurm, *args: str, nvidia_smi: bool = True, **env) -> tuple[int, str]:
    """Run the doctor; with the stand-in nvidia-smi on PATH (4 GPUs), as on the GPU nodes."""
    path = f"{FAKEBIN}:{slurm['env']['PATH']}" if nvidia_smi else slurm["env"]["PATH"]
    full = {**slurm["env"], "PATH": path, **env}
    done = run_cli("doctor", *args, timeout=400, env=full)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout


def _line(text: str, name: str) -> str:
    found = [l for l in text.splitlines() if l.split("]", 1)[-1].strip().startswith(name)]
    assert found, text
    return found[0]


@pytest.mark.slurm
def test_doctor_says_go_on_the_healthy_cluster(slurm, prepared_dir, report):
    code, text = _doctor(slurm, COURSE_DATA_DIR=str(prepared_dir))
    assert code == 0 and text.splitlines()[-1].startswith("verdict: GO"), text
    for name in ("versions", "proxies", "ports", "slurm", "gpus", "node ports", "controller", "shared files"):
        assert _line(text, name).lstrip().startswith("[go]"), text
    assert "8 tasks, 1 GPU(s) per worker" in _line(text, "gpus")
    # simulated GPUs: Slurm has them, TensorFlow (CPU wheel) cannot use them, and the doctor says so
    assert "[warn]" in _line(text, "all-reduce") and "TensorFlow sees none" in text
    report("doctor on the healthy local Slurm:\n" + text)
    assert squeue_empty(slurm["env"])


@pytest.mark.slurm
def test_doctor_says_go_on_cpu_nodes(slurm, prepared_dir, report):
    """The partition of CPU nodes: ring all-reduce between node3 and node4, nothing to warn about."""
    code, text = _doctor(slurm, "--partition", "cpu", nvidia_smi=False, COURSE_DATA_DIR=str(prepared_dir))
    assert code == 0 and text.splitlines()[-1] == "verdict: GO (10 passed, 0 warning(s))", text
    assert "CPU only (ring all-reduce)" in _line(text, "gpus") and "node3: CPU, node4: CPU" in _line(text, "gpus")
    assert "ring (CPU) all-reduce of 32 MiB between node3 and node4" in _line(text, "all-reduce")
    report("doctor on the CPU partition:\n" + text)


PLANTED = {
    # check: (environment that plants the fault, words its line must carry)
    "versions": ({"COURSE_DISABLE_KERAS_FIX": "1"}, "COURSE_DISABLE_KERAS_FIX=1 turns the course's fix off"),
    "slurm": ({"COURSE_SLURM_PARTITION": "nosuch"}, "no nodes in partition nosuch"),
    "gpus": ({"COURSE_SLURM_TASKS_PER_NODE": "8"}, "8 tasks per node share 4 GPU(s)"),
    "controller": ({"COURSE_CONTROLLER_IP": "127.0.0.1"}, "compute nodes cannot reach this host at 127.0.0.1"),
    "shared files": ({"COURSE_DATA_DIR": "/nonexistent/tfds"}, "has no prepared cifar10 on node1, node2"),
}


@pytest.mark.slurm
@pytest.mark.parametrize("check", list(PLANTED))
def test_doctor_names_a_planted_fault(slurm, check, report):
    env, words = PLANTED[check]
    code, text = _doctor(slurm, "--no-bandwidth", **env)
    line = _line(text, check)
    report(f"doctor, planted {env}: {line.strip()}")
    assert code == 1 and line.lstrip().startswith("[no-go]") and words in line and "-> fix:" in line, text
    assert f"check(s) failed: {check}" in text.splitlines()[-1], text
    assert squeue_empty(slurm["env"])


@pytest.mark.slurm
def test_doctor_names_a_proxy_gRPC_would_use(slurm):
    code, text = _doctor(slurm, "--no-bandwidth", grpc_proxy="http://127.0.0.1:9")
    assert "[warn]" in _line(text, "proxies") and "grpc_proxy" in _line(text, "proxies"), text


@pytest.mark.slurm
def test_doctor_names_ports_taken_here_and_on_a_node(slurm):
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        code, text = _doctor(slurm, "--no-slurm", COURSE_PORT_RANGE=f"{port}-{port}")
    assert code == 1 and "[no-go]" in _line(text, "ports") and f"{port}-{port}" in _line(text, "ports"), text
    # node1 holds the only 4 ports of the range (a job that is already there): the step cannot use them
    low = 14000
    holder = subprocess.Popen(["srun", "-w", "node1", "-n1", "--time=2", sys.executable, "-c",
                               f"import socket, time\nsocks = [socket.socket() for _ in range(4)]\n"
                               f"[s.bind(('0.0.0.0', {low} + i)) or s.listen() for i, s in enumerate(socks)]\n"
                               "print('HOLDING', flush=True)\ntime.sleep(120)"],
                              env=slurm["env"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "HOLDING"
        code, text = _doctor(slurm, "--no-bandwidth", COURSE_PORT_RANGE=f"{low}-{low + 3}")
    finally:
        holder.kill()
        holder.wait(timeout=30)
    line = _line(text, "node ports")
    assert code == 1 and "[no-go]" in line and "already in use" in line and "node1:" in line, text
    assert _line(text, "gpus").lstrip().startswith("[go]"), text  # only the ports are named
    assert squeue_empty(slurm["env"], within=20)


@pytest.mark.slurm
def test_doctor_names_a_home_the_nodes_do_not_share(slurm, tmp_path):
    """A file system mounted on this host only (the nodes' mount namespaces do not see it)."""
    mount = tmp_path / "private"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], check=True)
    try:
        (mount / "home").mkdir()
        code, text = _doctor(slurm, "--no-bandwidth", HOME=str(mount / "home"))
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
    line = _line(text, "shared files")
    assert code == 1 and "[no-go]" in line and "is not the same on node1, node2" in line, text


@pytest.mark.slurm
def test_doctor_names_nodes_that_cannot_reach_each_other(slurm):
    """node2 cannot send to node1 (a route planted in node2's namespace): the all-reduce fails
    within the rendezvous deadline and the line names the peer."""
    route = ["ip", "-n", "cslurm-node2", "route", "add", "prohibit", "10.77.0.11/32"]
    subprocess.run(route, check=True)
    try:
        code, text = _doctor(slurm, COURSE_RENDEZVOUS_TIMEOUT="15")
    finally:
        subprocess.run([*route[:4], "del", *route[5:]], check=True)
    line = _line(text, "all-reduce")
    assert code == 1 and "[no-go]" in line and "did not complete an all-reduce" in line, text
    # the probe's workers ended by themselves (the 15 s rendezvous deadline), not killed at the doctor's
    # own srun timeout (its "no answer within" line); run_cli's 400 s bounds a hang of the doctor itself
    assert "no answer within" not in line, line
    assert squeue_empty(slurm["env"], within=20)
