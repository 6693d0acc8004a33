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
    from tests.support.hub import distinct_free_ports

    return distinct_free_ports(n, pick=free_port)


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


class _Clock:
    """A clock the test advances: what a deadline reads instead of waiting it out."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fake_cluster(monkeypatch, *, wait=None, submit=None) -> list:
    """ipyparallel's Cluster replaced: `submit(n)` stands for launching the engines (sbatch for
    Slurm), `wait(n, timeout)` for the client's wait; the course's own Slurm and process plumbing
    stubbed. Returns the list the stand-in cluster's stop appends to."""
    import ipyparallel as ipp
    from traitlets.config import Config

    from helpers.engines import cluster as cluster_module

    stopped = []

    class Client:
        ids: list = []

        def wait_for_engines(self, n, timeout, interactive):
            wait(n, timeout)

    class Cluster:
        def __init__(self, **kwargs):
            self.engines = {"sbatch": "job 5"}

        def start_controller_sync(self):
            pass

        def start_engines_sync(self, n):
            if submit:
                submit(n)

        def connect_client_sync(self):
            return Client()

    monkeypatch.delenv("COURSE_CLUSTER", raising=False)
    monkeypatch.setattr(ipp, "Cluster", Cluster)
    for name, stand_in in {"_session_key": lambda c: None, "_stop_cluster": lambda c, client: stopped.append(dict(c.engines)),
                           "check_local_workers": lambda what: None, "_describe_engine_job": lambda c: "Slurm job 5 is PENDING",
                           "_slurm_options": lambda n, request, config, cid: (Config(), {})}.items():
        monkeypatch.setattr(cluster_module, name, stand_in)
    return stopped


@pytest.mark.parametrize("slurm,default_s", [(False, 60.0), (True, 300.0)], ids=["local", "slurm"])
def test_engines_deadline_defaults_to_60_s_local_and_300_s_on_slurm(monkeypatch, slurm, default_s):
    """No `timeout=`: the engines' wait ends when the default deadline has passed on the clock (the
    wait advances a fake clock by what it was given), with that deadline in its one line."""
    from helpers.engines import cluster as cluster_module

    clock, waited = _Clock(), []

    def wait(n, timeout):
        waited.append(timeout)
        clock.now += timeout
        raise TimeoutError(f"{n} engines not registered")

    _fake_cluster(monkeypatch, wait=wait)
    monkeypatch.setattr(cluster_module.time, "perf_counter", clock)
    with pytest.raises(CourseError, match=rf"only 0 of 2 engines registered \(within {default_s:.0f} s\)"):
        cluster_module.start_engines(2, slurm=slurm, activate=False)
    assert waited == [default_s] and clock.now == 1000.0 + default_s


def test_slurm_refusing_the_engines_job_is_one_line_and_cancels_nothing(monkeypatch):
    """Row "Slurm refuses the engines' job" of docs/troubleshooting.md without a Slurm: sbatch exits 1
    (a bad partition, say): one line naming the settings to check, no job to cancel (nothing was
    submitted), the controller stopped. The real refusal: test_slurm::test_engines_that_cannot_start_are_a_clear_error."""
    import subprocess

    from helpers.engines import cluster as cluster_module

    def submit(n):
        raise subprocess.CalledProcessError(1, ["sbatch", "--parsable", "engines.sbatch"])

    stopped = _fake_cluster(monkeypatch, submit=submit, wait=lambda n, timeout: pytest.fail("waited for refused engines"))
    with pytest.raises(CourseError, match=r"^`sbatch` refused the engines' job \(exit status 1; .*check COURSE_SLURM_PARTITION, "
                                          r"_ACCOUNT, _TIME"):
        cluster_module.start_engines(2, slurm=True, activate=False)
    assert stopped == [{}], "the cluster stopped once, with no engine job left to cancel"


def test_controller_deadline_defaults_to_30_s(tmp_path, monkeypatch):
    """connect() without `timeout=`: the client is given 30 s, and its timeout becomes the one line."""
    import ipyparallel as ipp

    from helpers.engines.cluster import connect

    given = []

    def client(url_file, timeout):
        given.append(timeout)
        raise ipp.error.TimeoutError("Hub connection request timed out")

    monkeypatch.setattr(ipp, "Client", client)
    url_file = tmp_path / "ipcontroller-client.json"
    url_file.write_text(json.dumps({"interface": "tcp://127.0.0.1", "registration": 10001}))
    with pytest.raises(CourseError, match=r"controller at tcp://127.0.0.1:10001 within 30 s"):
        connect(url_file)
    assert given == [30.0]


def test_rendezvous_deadline_defaults_to_120_s(monkeypatch, capsys):
    """No COURSE_RENDEZVOUS_TIMEOUT: the watcher is started with 120 s, and the watcher waits exactly
    that long for the constructor (its select, on a fake clock) before it names the missing peer and
    ends the worker."""
    import select
    import subprocess

    from helpers import rendezvous

    monkeypatch.delenv(rendezvous.RENDEZVOUS_ENV, raising=False)
    started = []

    class Watcher:
        def __init__(self, argv, **kwargs):
            started.append(argv)

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(subprocess, "Popen", Watcher)
    with rendezvous.rendezvous_deadline(["localhost:1", "localhost:2"], 0):
        pass
    seconds = started[0][5]  # python -c CODE done_fd pid SECONDS handled rank workers...
    assert float(seconds) == 120.0, started[0]

    clock, signalled = _Clock(), []

    def fake_select(read, write, error, timeout):
        clock.now += timeout  # nothing arrives on the pipe: the whole deadline passes
        return [], [], []

    monkeypatch.setattr(select, "select", fake_select)
    monkeypatch.setattr(rendezvous.os, "kill", lambda pid, sig: signalled.append((pid, sig)))
    monkeypatch.setattr(rendezvous, "listening", lambda address: False)
    monkeypatch.setattr("sys.argv", ["watcher", "7", "4242", seconds, "0", "0", "localhost:1", "localhost:2"])
    rendezvous._watch()
    assert clock.now == 1000.0 + 120.0
    assert signalled == [(4242, rendezvous.signal.SIGKILL)]
    err = capsys.readouterr().err
    assert "waited 120 s" in err and "not reachable: rank 1 at localhost:2" in err, err
