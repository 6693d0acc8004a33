"""Shared fixtures. Every multi-process helper here kills with SIGKILL at a deadline."""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests import durations
from tests.support.slurm_lock import local_slurm_lock

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The suite runs local multi-worker TensorFlow beside its own local Slurm, on a machine nobody
# else uses: what the course refuses on a login node (helpers.slurm.login_node.check_local_workers,
# tested in test_security_login_node with this setting removed)
os.environ.setdefault("COURSE_LOCAL_WORKERS", "allow")
REPORT: list[str] = []  # lines the browser tests want in the summary (timings, screenshots)


def _report(line: str) -> None:
    REPORT.append(line)
    print(line)


@pytest.fixture(scope="session")
def report():
    """Show a line at the end of the test run, also when the test passes (pytest hides prints).

    A fixture, not an import: tests import this file as `tests.conftest`, a second copy of the
    module pytest loaded, whose REPORT the summary would not see."""
    return _report


def pytest_terminal_summary(terminalreporter):
    if REPORT:
        terminalreporter.section("measured by the tests")
        for line in REPORT:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def synthetic_archive(tmp_path_factory) -> Path:
    from helpers.data import synth_archive

    return synth_archive(tmp_path_factory.mktemp("archive") / "synthetic.tar.gz", train=300, test=100)


@pytest.fixture(scope="session")
def prepared_dir(tmp_path_factory, synthetic_archive) -> Path:
    from helpers.data import prepare

    target = tmp_path_factory.mktemp("tfds")
    prepare(synthetic_archive, target)
    return target


def run_python(code: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (TensorFlow's device set-up is once per process)."""
    full_env = {**os.environ, **(env or {})}
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=full_env, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:  # subprocess.run kills the child (SIGKILL)
        pytest.fail(f"no answer within {timeout} s: {exc.stdout!r} {exc.stderr!r}")


def run_cli(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "helpers", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=ROOT)


_BACKGROUND: set[int] = set()  # pids of runs kept going across several tests (see background_runs)


@pytest.fixture(scope="session")
def background_runs() -> set[int]:
    """Where a test module registers the pid of a run it keeps going across its tests on purpose
    (started by a fixture for several tests, awaited by each): nothing_left_behind does not count
    that run or anything under it while it is registered. A fixture, not an import (see `report`)."""
    return _BACKGROUND


def _in_background(proc) -> bool:
    try:
        return any(p.pid in _BACKGROUND for p in (proc, *proc.parents()))
    except psutil.Error:
        return False


# Every process a test starts inherits its test's tag in this variable (a session nested in a test, a
# pytest the test runs, appends its own after a "/"); nothing_left_behind looks for it in every
# process of the machine, so a process that left pytest's tree (setsid, a double fork, a Slurm job's
# step, a server in a session of its own) is found as surely as a child.
TAG_ENV = "COURSE_TEST_TAG"
_SESSION_TAG: list[str] = []  # this session's tag, under the one it inherited (set at its first test)
_TESTS_TAGGED = itertools.count()


def _session_tag() -> str:
    if not _SESSION_TAG:
        own = f"{os.getpid()}-{secrets.token_hex(3)}"
        _SESSION_TAG.append(f"{os.environ[TAG_ENV]}/{own}" if os.environ.get(TAG_ENV) else own)
    return _SESSION_TAG[0]


def tagged(tag: str) -> list[psutil.Process]:
    """Every running process but this one whose environment carries `tag`, or a tag nested under it.
    /proc/PID/environ is the environment a process was started with: what it inherited from the test.
    (Another user's processes are read as root only: as root, they are searched too.)"""
    needle = f"\0{TAG_ENV}={tag}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as environ:
                block = b"\0" + environ.read()  # empty for a zombie
        except OSError:  # gone, or another user's (not root)
            continue
        at = block.find(needle)
        if at >= 0 and block[at + len(needle):at + len(needle) + 1] in (b"\0", b"/", b""):
            try:
                found.append(psutil.Process(int(entry.name)))
            except psutil.Error:
                continue
    return found


@pytest.fixture(autouse=True)
def environment_restored(request):
    """After every test: this process's environment and working directory as they were before it. Tests run
    in-process code that sets variables for the processes it starts (a GPU plan's CUDA_VISIBLE_DEVICES, a class
    layout, TF_CONFIG); the streams hand each file to whichever stream frees up first, so a variable one test
    left would reach another's subprocesses in one run and not the next. What was restored is kept in the
    run's durations file ("environment_restored"), so that its source can be mended."""
    before, cwd = dict(os.environ), os.getcwd()
    yield
    own = (TAG_ENV, "PYTEST_CURRENT_TEST")  # the harness's: set for each test and between tests on purpose
    changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k) and k not in own)
    if changed:
        for name in changed:
            if name in before:
                os.environ[name] = before[name]
            else:
                del os.environ[name]
        durations.environment_restored(request.node.nodeid, changed)
    if os.getcwd() != cwd:
        os.chdir(cwd)
        durations.environment_restored(request.node.nodeid, ["(working directory)"])


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """After every test: no process this test started is still running, wherever it went (engines,
    controllers, TF workers, srun, a detached server, a Slurm job's processes): its children, and every
    process of the machine that carries its tag (TAG_ENV). Processes the session's and modules' fixtures
    start (the local Slurm's daemons) carry the session's tag between tests, not a test's."""
    tag = f"{_session_tag()}:{next(_TESTS_TAGGED)}"
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    os.environ[TAG_ENV] = tag
    try:
        yield
    finally:
        os.environ[TAG_ENV] = f"{_session_tag()}:between-tests"
    deadline = time.monotonic() + 10
    while True:
        children = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        left = {p.pid: p for p in (*children, *tagged(tag)) if _running(p) and not _in_background(p)}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    described = [f"{p.pid} {cmdline(p)[:100]}" for p in left.values() if _running(p)]
    assert not described, "left running: " + "; ".join(described)


def _running(proc) -> bool:
    """Alive and not a zombie; a process that exits while we look is not running (no race)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def cmdline(proc) -> str:
    """A process's command line, or \"(exited)\" (the hub helpers use it too)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return "(exited)"


class Lab:
    """JupyterLab as `make lab` starts it (127.0.0.1, token), serving `root`."""

    def __init__(self, root: Path, runtime: Path, command: list[str] | None = None):
        command = command or [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--port=0",
                              "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={root}",
                              *(["--allow-root"] if os.geteuid() == 0 else [])]
        # The server's log goes to a file, not a pipe: an unread pipe fills up and blocks the server.
        runtime.mkdir(parents=True, exist_ok=True)
        self.log_path = runtime / "jupyter-lab.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True,
                                         start_new_session=True,
                                         env={**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime),
                                              "COURSE_MODE": "quick"})
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and self.proc.poll() is None:
            match = re.search(r"(http://127\.0\.0\.1:\d+)/lab\?token=(\w+)", self.log_path.read_text())
            if match:
                self.url, self.token = match.groups()
                self._wait_ready(deadline)
                return
            time.sleep(0.2)
        self.stop()
        raise AssertionError("JupyterLab printed no URL:\n" + self.log_tail())

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _wait_ready(self, deadline: float) -> None:
        """The URL is printed a moment before the server accepts connections."""
        while True:
            try:
                with self.get("/api/status"):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def get(self, path: str, token: bool = True):
        """GET from the server directly (never through a web proxy the environment names)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        return opener.open(f"{self.url}{path}" + (f"?token={self.token}" if token else ""), timeout=10)

    def api(self, path: str):
        with self.get(path) as answer:
            return json.loads(answer.read())

    def processes(self) -> list:
        """The command and what it started (`make lab` runs JupyterLab as a child)."""
        top = psutil.Process(self.proc.pid)
        return [top, *top.children(recursive=True)]

    def stop(self) -> None:
        """SIGTERM first, as `scancel` or a closing terminal would: `make lab`'s shell then removes its
        kernels' socket directory (a SIGKILL left one in /tmp per test run); SIGKILL after 20 s. Returns
        when every process of the command has ended, not only the first: `make` can exit before its shell."""
        try:
            started = self.processes()
        except psutil.Error:
            started = []
        try:
            self._signal_until_ended()
        finally:
            psutil.wait_procs(started, timeout=30)

    def _signal_until_ended(self) -> None:
        for signal_number, wait in ((15, 20), (9, 30)):
            try:
                os.killpg(self.proc.pid, signal_number)  # the command and its children (make, the shell, jupyter)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue
        self.proc.wait(timeout=30)


# ------------------------------------------------------------------ a real local Slurm
def _slurm_unavailable(reason: str):
    from tests.support.required import unavailable

    unavailable(f"real Slurm not available: {reason}", "COURSE_REQUIRE_SLURM")


# the suite's own Slurm: not under pytest's private tmp, since other users (the JupyterHub test's)
# must read slurm.conf; named by this process, so another Slurm on the machine is never counted
SUITE_SLURM_DIR = Path(f"/var/tmp/course-slurm-test-{os.getpid()}")


def started_by_the_suite(proc) -> bool:
    """The suite's Slurm daemons name its slurm.conf on their command line; its jobs' processes
    (and the slurmstepd above them) descend from those daemons or carry that SLURM_CONF. A process that ended
    while the machine was read (the Slurm stream's jobs end beside the local streams) is not left behind."""
    try:
        lineage = [proc, *proc.parents()]
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    for candidate in lineage:
        try:
            if str(SUITE_SLURM_DIR) in " ".join(candidate.cmdline()):
                return True
            if candidate.environ().get("SLURM_CONF", "").startswith(str(SUITE_SLURM_DIR)):
                return True
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return False


def leftovers() -> list[str]:
    """Slurm daemons, and any process that runs inside a Slurm job (engines, TF workers), that the
    suite started: another local Slurm on the machine, and its jobs, are not the suite's to count."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            in_job = "SLURM_JOB_ID" in proc.environ()
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            in_job = False
        if proc.pid != os.getpid() and (in_job or proc.info["name"] in ("slurmd", "slurmctld", "slurmstepd")) \
                and started_by_the_suite(proc):
            found.append(f"{proc.pid} [{proc.info['name']}] {' '.join(proc.info['cmdline'] or [])[:80]}")
    return found


@pytest.fixture(scope="session")
def slurm():
    if os.geteuid() != 0:
        _slurm_unavailable("not root (slurm/local/up installs packages and creates network namespaces)")
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        _slurm_unavailable("no apt-get to install slurm-wlm")
    with local_slurm_lock(say=_report):  # one local Slurm per machine: another session's would be torn down
        yield from _local_slurm()


def _local_slurm():
    state = SUITE_SLURM_DIR
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(mode=0o755)
    env = {**os.environ, "COURSE_SLURM_DIR": str(state / "cluster")}
    # default partition: node1, node2 with 4 simulated GPUs each (gres on fake devices; CPU jobs do
    # not see them); partition cpu: node3, node4 without GPUs
    up = subprocess.run([str(ROOT / "slurm/local/up"), "--nodes", "2", "--gpus", "4", "--cpu-nodes", "2"], env=env, capture_output=True,
                        text=True, timeout=600)
    if up.returncode != 0:
        subprocess.run([str(ROOT / "slurm/local/down")], env=env, timeout=120)
        pytest.fail(f"slurm/local/up failed:\n{up.stdout}\n{up.stderr}")
    conf = str(state / "cluster" / "slurm.conf")
    os.environ["SLURM_CONF"] = conf
    # each node's own local disk (slurm/local/up), as $TMPDIR or /local is on a real node
    yield {"env": {**env, "SLURM_CONF": conf, "COURSE_NODE_LOCAL": str(state / "cluster" / "node-local")}, "dir": state}
    os.environ.pop("SLURM_CONF", None)
    down = subprocess.run([str(ROOT / "slurm/local/down")], env=env, capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert not leftovers(), f"left behind after slurm/local/down: {leftovers()}"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "cslurm" not in netns, netns
    shutil.rmtree(state, ignore_errors=True)


def squeue(env) -> str | None:
    """`squeue -h`: the jobs in the queue, or None when squeue fails."""
    out = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True, timeout=30)
    return out.stdout.strip() if out.returncode == 0 else None


def squeue_empty(env, within: float = 15.0) -> bool:
    """squeue shows no job (a cancelled job may stay 'completing' for a few seconds)."""
    deadline = time.monotonic() + within
    while True:
        if squeue(env) == "":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def workers_visible_devices(job_log: str) -> list[str]:
    """The distinct CUDA_VISIBLE_DEVICES lesson 08's workers report in their job's log ("null": unset)."""
    return sorted(set(re.findall(r'"cvd": "?([^",]*)"?,', job_log)))



# ------------------------------------------------------------------ a second Unix user
@pytest.fixture
def other_user():
    """A non-root Unix user for this test (an attacker, or a learner), removed after; the removal
    is checked: a user left behind would be a silent leak between runs."""
    import pwd
    import secrets

    if os.geteuid() != 0 or shutil.which("useradd") is None:
        if os.environ.get("CI"):
            pytest.fail("tests with a second Unix user must run in CI (root, useradd)")
        pytest.skip("a second Unix user needs root and useradd")
    name = f"ctest{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True, timeout=60)
    try:
        probe = subprocess.run(["runuser", "-u", name, "--", sys.executable, "-c", "import helpers, zmq"],
                               capture_output=True, text=True, timeout=120, cwd="/")
        if probe.returncode != 0:
            pytest.fail(f"user {name} cannot use the course's Python {sys.executable} (is the checkout "
                        f"readable by other users?): {probe.stderr[-500:]}")
        yield {"name": name, "home": Path(pwd.getpwnam(name).pw_dir)}
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], timeout=30)
        for _ in range(20):  # userdel refuses while a process of the user is still exiting
            removed = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True, timeout=60)
            if removed.returncode in (0, 6):  # 6: no such user
                break
            time.sleep(0.5)
        assert removed.returncode == 0, f"test user {name} was not removed: {removed.stderr}"
