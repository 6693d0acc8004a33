"""Failures end fast, with one clear line, and leave nothing behind (docs/troubleshooting.md)."""

from __future__ import annotations

import json
import os
import stat

import psutil
import pytest

from helpers.errors import CourseError
from tests.conftest import run_cli, run_python


def _unused_ports(n: int = 1) -> list[int]:
    """Distinct ports free now, inside COURSE_PORT_RANGE (workers check theirs before binding)."""
    from helpers.resolver import free_port

    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _unused_port() -> int:
    return _unused_ports(1)[0]


def test_missing_worker_ends_the_rendezvous_with_a_clear_error(prepared_dir):
    """MWMS's constructor waits for ever for a peer that never starts; the deadline ends it."""
    me, peer = _unused_ports(2)
    config = {"cluster": {"worker": [f"localhost:{me}", f"localhost:{peer}"]}, "task": {"type": "worker", "index": 0}}
    done = run_cli("train", "--strategy", "multiworker", "--mode", "quick", "--epochs", "1", "--steps-per-epoch", "1",
                   "--data-dir", str(prepared_dir), timeout=120,
                   env={"TF_CONFIG": json.dumps(config), "COURSE_RENDEZVOUS_TIMEOUT": "4"})
    assert done.returncode == 42, done.stderr[-2000:]  # DEADLINE_EXIT, from the C handler the watcher signals
    lines = [l for l in done.stderr.splitlines() if l.startswith("error:")]
    assert len(lines) == 1, done.stderr[-2000:]
    assert f"not reachable: rank 1 at localhost:{peer}" in lines[0] and "COURSE_RENDEZVOUS_TIMEOUT" in lines[0]
    assert "Traceback" not in done.stderr


def test_bad_rendezvous_timeout_is_a_clear_error(monkeypatch):
    from helpers.rendezvous import rendezvous_seconds

    monkeypatch.setenv("COURSE_RENDEZVOUS_TIMEOUT", "soon")
    with pytest.raises(CourseError, match="COURSE_RENDEZVOUS_TIMEOUT='soon' is not a number"):
        rendezvous_seconds()


def test_multiworker_strategy_after_an_op_is_a_clear_error():
    port = _unused_port()
    config = {"cluster": {"worker": [f"localhost:{port}"]}, "task": {"type": "worker", "index": 0}}
    done = run_python(
        "import os, json\n"
        f"os.environ['TF_CONFIG'] = {json.dumps(json.dumps(config))}\n"
        "import tensorflow as tf\n"
        "tf.constant(1.0) + 1\n"
        "from helpers.errors import CourseError\n"
        "from helpers.strategy import make_strategy\n"
        "try:\n    make_strategy('multiworker')\nexcept CourseError as exc:\n    print('CLEAR', exc)\n")
    assert "CLEAR TensorFlow already ran an op in this process" in done.stdout, done.stderr[-2000:]


def test_unreachable_controller_is_a_clear_error(tmp_path):
    """A connection file whose controller does not answer: an error in seconds, not a hang."""
    from helpers.engines.cluster import connect

    port = _unused_port()
    url_file = tmp_path / "ipcontroller-course-test-client.json"
    url_file.write_text(json.dumps({
        "key": "0" * 32, "signature_scheme": "hmac-sha256", "transport": "tcp", "interface": "tcp://127.0.0.1",
        "location": "127.0.0.1", "registration": port, "control": port, "mux": port, "task": port,
        "iopub": port, "hb_ping": port, "hb_pong": port, "notification": port, "broadcast": port,
        "task_scheme": "leastload", "ssh": "", "pack": "json", "unpack": "json"}))
    with pytest.raises(CourseError, match=f"cannot reach the ipyparallel controller at tcp://127.0.0.1:{port} "):
        connect(url_file, timeout=3)


def test_local_controller_listens_on_loopback_only_and_keys_are_private():
    from helpers.engines import start_engines

    engines = start_engines(1, slurm=False, activate=False)
    try:
        controller = psutil.Process(engines.cluster.controller.process.pid)
        family = [controller, *controller.children(recursive=True)]
        listening = [c.laddr for p in family for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        assert listening, "the controller should listen somewhere"
        assert {addr.ip for addr in listening} == {"127.0.0.1"}, listening
        security = engines.cluster.profile_dir + "/security"
        files = [f for f in os.listdir(security) if engines.cluster_id in f]
        assert files, os.listdir(security)
        for name in files:
            mode = os.stat(os.path.join(security, name)).st_mode
            assert stat.S_IMODE(mode) & 0o077 == 0, f"{name} is readable by others: {oct(mode)}"
    finally:
        engines.stop()
