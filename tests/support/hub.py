"""A JupyterHub on the local Slurm, as the hub tests and the class load test run it.

The hub loads the shipped slurm/jupyterhub/jupyterhub_config.py and overrides only what one
machine needs: its own addresses and ports, a test authenticator, `runuser` instead of sudo,
node addresses looked up in Slurm (the emulated nodes' names resolve only inside their
namespaces), and a test service whose token drives the REST API.
"""

from __future__ import annotations

import json
import os
import re
import signal
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from helpers.commands.apt import apt_install
from tests.conftest import ROOT, cmdline

BRIDGE_ADDR = "10.77.0.1"  # slurm/local/common.sh: where the host is reachable from the nodes
CHP_DIR = Path.home() / ".cache" / "tf-hpc-course" / "configurable-http-proxy"
SERVICE_SCOPES = ["admin:users", "admin:servers", "admin:server_state", "access:servers", "list:users", "proxy",
                  "read:users", "read:servers", "read:groups", "tokens"]


def hub_log_in(page, name: str, password: str, hub_url: str | None = None) -> None:
    """The learner fills the hub's login form: at `hub_url`'s login page, or on the page a link led to."""
    if hub_url is not None:
        page.goto(f"{hub_url}/hub/login")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", password)
    page.click("input[type=submit], button[type=submit]")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def distinct_free_ports(n: int, pick=free_port) -> list[int]:
    """`n` ports free right now, all different (each is released before the next is asked for); `pick`
    names one free port (by default any on loopback)."""
    ports: list[int] = []
    while len(ports) < n:
        port = pick()
        if port not in ports:
            ports.append(port)
    return ports


def configurable_http_proxy() -> str:
    """JupyterHub's proxy, from npm, installed once into the course's cache."""
    binary = CHP_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
    if not binary.exists():
        if shutil.which("npm") is None:
            if shutil.which("apt-get") is None:
                pytest.fail("npm is missing and cannot be installed (no apt-get)")
            done = apt_install("npm")
            assert done.returncode == 0, f"apt-get install npm failed: {done.stderr[-500:]}"
        CHP_DIR.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["npm", "install", "--silent", "--prefix", str(CHP_DIR), "configurable-http-proxy@5"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and binary.exists(), done.stderr[-2000:]
    return str(binary)


def write_config(directory: Path, passwords: dict[str, str], ports: dict, token: str, slurm_env: dict,
                 extra: str = "") -> Path:
    """The shipped config plus one machine's overrides; `extra` is appended (a test's own settings)."""
    config = directory / "jupyterhub_config.py"
    config.write_text(f'''
load_subconfig({str(ROOT / "slurm" / "jupyterhub" / "jupyterhub_config.py")!r})

from course_hub.spawner import CourseSlurmSpawner
from helpers.slurm.nodes import node_address


class LocalSlurmSpawner(CourseSlurmSpawner):
    """The emulated nodes' names resolve only inside their namespaces: ask Slurm for the address."""

    def state_gethost(self):
        return node_address(super().state_gethost())


PASSWORDS = {passwords!r}


async def check_password(authenticator, handler, data):
    return data["username"] if PASSWORDS.get(data["username"]) == data["password"] else None


c.JupyterHub.spawner_class = LocalSlurmSpawner
c.JupyterHub.bind_url = "http://127.0.0.1:{ports["public"]}"
c.JupyterHub.hub_ip = {BRIDGE_ADDR!r}
c.JupyterHub.hub_port = {ports["hub"]}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{ports["proxy_api"]}"
c.ConfigurableHTTPProxy.command = [{configurable_http_proxy()!r}]
c.JupyterHub.db_url = "sqlite:///{directory}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{directory}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = "{directory}/jupyterhub.pid"
c.JupyterHub.authenticator_class = "dummy"
from jupyterhub.auth import DummyAuthenticator
DummyAuthenticator.authenticate = check_password  # one password per learner
c.Authenticator.allowed_users = set(PASSWORDS)
c.JupyterHub.services.append({{"name": "course-test", "api_token": {token!r}}})
c.JupyterHub.load_roles.append({{"name": "course-test", "scopes": {SERVICE_SCOPES!r},
                                 "services": ["course-test"]}})
c.SlurmSpawner.exec_prefix = "runuser -p -u {{username}} --"
c.SlurmSpawner.req_options = "--nodes=2 --ntasks-per-node=1"
c.SlurmSpawner.start_timeout = 120
c.Spawner.environment.setdefault("COURSE_MODE", "quick")  # unless the hub was given the class's
c.Spawner.environment.update({{"SLURM_CONF": {slurm_env["SLURM_CONF"]!r}}})
{extra}
''')
    return config


PORT_TAKEN = re.compile(r"address already in use|EADDRINUSE", re.IGNORECASE)


class HubExited(AssertionError):
    """The hub (or its proxy) failed before it answered: the reason's line first, then the log's tail."""

    def __init__(self, code: int | None, tail: str):
        self.tail = tail
        lines = [line for line in tail.splitlines() if line.strip()]
        reason = next((line for line in lines if PORT_TAKEN.search(line)), lines[-1] if lines else "")
        super().__init__(f"JupyterHub failed to start (exit code {code}): {reason[:300]}\n{tail}")

    @property
    def port_taken(self) -> bool:
        """A port picked free was taken before the hub or its proxy bound it (another test's process)."""
        return bool(PORT_TAKEN.search(self.tail))


class Hub:
    """A running JupyterHub (a child process), its log, and its REST API."""

    def __init__(self, config: Path, directory: Path, env: dict, public: int):
        self.config, self.directory, self.env = config, directory, env
        self.url = f"http://127.0.0.1:{public}"
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.log = open(directory / "jupyterhub.log", "a")
        self.proc = None
        self.start()

    def start(self) -> None:
        # a session of its own: what the hub starts (its proxy, the idle culler) goes with it at stop()
        self.log.flush()
        self.log_start = self.log.tell()  # what this start logs begins here (a restart appends to the same log)
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(self.config)], cwd=self.directory,
                                     env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def call(self, method: str, path: str, token: str, body: dict | None = None,
             timeout: float = 30) -> tuple[int, object]:
        """A request to the hub (or, for /user/..., through its proxy to a server): status, JSON."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
        try:
            with self.opener.open(req, timeout=timeout) as answer:
                raw = answer.read()
                return answer.status, _json(raw)
        except urllib.error.HTTPError as exc:
            return exc.code, _json(exc.read())

    def request(self, method: str, path: str, token: str) -> int:
        return self.call(method, path, token)[0]

    def wait_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            started = self.text()[self.log_start:]
            if self.proc.poll() is not None or PORT_TAKEN.search(started):
                # the proxy logs a taken public port and runs on, answering nothing: as good as exited
                raise HubExited(self.proc.poll(), started[-4000:])
            try:
                if self.request("GET", "/hub/api/", "") == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("JupyterHub did not answer:\n" + self.tail())

    def tail(self, chars: int = 4000) -> str:
        self.log.flush()
        return (self.directory / "jupyterhub.log").read_text()[-chars:]

    def text(self) -> str:
        self.log.flush()
        return (self.directory / "jupyterhub.log").read_text()

    def stop(self, close: bool = True) -> None:
        if self.proc.poll() is None:
            # the idle culler first: in the class tests the hub's shutdown waited 30 s for it to stop
            # (then the hub was killed, and its proxy or the culler were left running)
            self._kill(p for p in psutil.Process(self.proc.pid).children(recursive=True)
                       if "jupyterhub_idle_culler" in cmdline(p))
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        try:  # whatever else the hub started in its session
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        # the proxy runs in a session of its own: the hub stops it, unless the hub was killed first, or the
        # proxy failed to bind a port and ran on before the hub wrote its pid file (then its cwd names it)
        pid_file = self.directory / "jupyterhub-proxy.pid"
        if pid_file.exists() and pid_file.read_text().strip().isdigit():
            try:
                proxy = psutil.Process(int(pid_file.read_text()))
                self._kill([proxy] if "configurable-http-proxy" in cmdline(proxy) else [])
            except psutil.NoSuchProcess:
                pass
        self._kill(p for p in psutil.process_iter()
                   if _cwd(p) == str(self.directory) and "configurable-http-proxy" in cmdline(p))
        left = [f"{p.pid} {cmdline(p)[:80]}" for p in psutil.process_iter()
                if _cwd(p) == str(self.directory) and p.pid != os.getpid() and not _dead(p)]
        assert not left, f"the hub left processes behind: {left}"
        if close:
            self.log.close()

    @staticmethod
    def _kill(processes) -> None:
        """SIGKILL, waiting only until each is dead, not reaped: a killed orphan stays a zombie until this
        VM's PID 1 reaps it, late, and waiting for that cost 10 s per hub stop (a zombie holds nothing)."""
        killed = []
        for process in processes:
            try:
                process.kill()
                killed.append(process)
            except psutil.NoSuchProcess:
                pass
        deadline = time.monotonic() + 10
        while any(not _dead(p) for p in killed) and time.monotonic() < deadline:
            time.sleep(0.05)


def _dead(process) -> bool:
    """Gone, or a zombie (dead, not yet reaped)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _cwd(process) -> str:
    try:
        return process.cwd()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def _json(raw: bytes):
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def new_hub(tmp_path: Path, slurm: dict, passwords: dict[str, str], extra: str = "",
            env: dict | None = None) -> tuple[Hub, str]:
    """A hub up and answering, and the test service's token."""
    from helpers.class_settings import CLASS_SETTINGS

    directory = tmp_path / "hub"
    directory.mkdir(mode=0o700)
    token = secrets.token_hex(32)
    # the class's settings are the test's to give (`env`), never the runner's environment's
    base = {k: v for k, v in slurm["env"].items() if k not in CLASS_SETTINGS}
    for attempt in range(3):
        # free now, but any process may take a port before the hub binds it (under CI's parallel streams one did):
        # then, and only then, new ports and again
        ports = dict(zip(("public", "hub", "proxy_api"), distinct_free_ports(3)))
        config = write_config(directory, passwords, ports, token, slurm["env"], extra)
        hub = Hub(config, directory, {**base, "COURSE_DIR": str(ROOT), **(env or {})}, ports["public"])
        try:
            hub.wait_up(60)
            return hub, token
        except HubExited as exc:
            hub.stop()
            if not exc.port_taken or attempt == 2:
                raise
            print(f"the hub found a port taken ({ports}); starting it again on new ports", file=sys.stderr)
        except BaseException:
            hub.stop()
            raise
    raise AssertionError("unreachable")


@contextmanager
def unix_learners(n: int, prefix: str = "cl"):
    """`n` non-root Unix users (a class), removed after; each can run the course's Python."""
    import pwd

    if os.geteuid() != 0 or shutil.which("useradd") is None:
        if os.environ.get("CI"):
            pytest.fail("tests with learners as Unix users must run in CI (root, useradd)")
        pytest.skip("learners as Unix users need root and useradd")
    tag = secrets.token_hex(2)
    names = [f"{prefix}{tag}{i:02d}" for i in range(n)]
    try:
        for name in names:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True, timeout=60)
        probe = subprocess.run(["runuser", "-u", names[0], "--", sys.executable, "-c", "import helpers, jupyterhub"],
                               capture_output=True, text=True, timeout=120, cwd="/")
        if probe.returncode != 0:
            pytest.fail(f"learner {names[0]} cannot use the course's Python {sys.executable}: {probe.stderr[-500:]}")
        yield [{"name": name, "home": Path(pwd.getpwnam(name).pw_dir), "password": secrets.token_urlsafe(12)}
               for name in names]
    finally:
        failed = []
        for name in names:
            subprocess.run(["pkill", "-KILL", "-u", name], timeout=30)
        for name in names:
            for _ in range(20):  # userdel refuses while a process of the user is still exiting
                removed = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True, timeout=60)
                if removed.returncode in (0, 6):  # 6: no such user
                    break
                time.sleep(0.5)
            if removed.returncode not in (0, 6):
                failed.append(f"{name}: {removed.stderr.strip()}")
        assert not failed, f"learners not removed: {failed}"


# ------------------------------------------------------------------ a kernel through the hub
def run_in_kernel(hub: Hub, user: str, token: str, cells: list[str], timeout: float = 300,
                  keep: bool = False) -> list[str]:
    """Run `cells` in a new kernel of `user`'s server, through the hub's proxy, as JupyterLab does
    (REST to create the kernel, its websocket to execute); returns each cell's text output.
    A cell that raises fails here with the kernel's error. `keep`: the kernel stays running
    (what it started, e.g. engines, with it) until its server stops."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    status, kernel = hub.call("POST", f"/user/{user}/api/kernels", token, {"name": "python3"})
    assert status == 201, f"{user}: creating a kernel answered {status}: {kernel}"
    try:  # a thread of its own: the caller may run an event loop already (Playwright's sync API)
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(lambda: asyncio.run(asyncio.wait_for(
                _execute(hub, user, token, kernel["id"], cells), timeout))).result()
    finally:
        if not keep:
            hub.call("DELETE", f"/user/{user}/api/kernels/{kernel['id']}", token)


async def _execute(hub: Hub, user: str, token: str, kernel_id: str, cells: list[str]) -> list[str]:
    import uuid

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    url = hub.url.replace("http://", "ws://") + f"/user/{user}/api/kernels/{kernel_id}/channels"
    ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"}))
    session, outputs = uuid.uuid4().hex, []
    try:
        for code in cells:
            msg_id = uuid.uuid4().hex
            await ws.write_message(json.dumps({
                "header": {"msg_id": msg_id, "session": session, "username": user, "msg_type": "execute_request",
                           "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True}}))
            text, error = [], None
            while True:
                raw = await ws.read_message()
                assert raw is not None, f"{user}: the kernel's websocket closed"
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id or msg.get("channel") != "iopub":
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    text.append(content["text"])
                elif kind in ("execute_result", "display_data"):
                    text.append(content["data"].get("text/plain", ""))
                elif kind == "error":
                    error = f"{content['ename']}: {content['evalue']}"
                elif kind == "status" and content["execution_state"] == "idle":
                    break
            assert error is None, f"{user}: cell failed: {error}\n{code}\n{''.join(text)[-2000:]}"
            outputs.append("".join(text))
    finally:
        ws.close()
    return outputs


def wait_server(hub: Hub, user: str, token: str, timeout: float) -> dict:
    """The user's default server once ready; fails with the spawn's message if it failed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, model = hub.call("GET", f"/hub/api/users/{user}", token)
        server = (model or {}).get("servers", {}).get("") if status == 200 else None
        if server and server.get("ready"):
            return server
        if status == 200 and not server and not model.get("pending"):
            raise AssertionError(f"{user}: the spawn ended without a server: {spawn_failure(hub, user, token)}")
        time.sleep(0.3)
    raise AssertionError(f"{user}: no server within {timeout:.0f} s\n{hub.tail()}")


def spawn_failure(hub: Hub, user: str, token: str) -> str:
    """What the learner's spawn page says about a spawn that failed (the progress stream's last event)."""
    status, body = hub.call("GET", f"/hub/api/users/{user}/server/progress", token)
    if not isinstance(body, str):
        return f"(progress answered {status})"
    events = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]
    return events[-1].get("message", "") if events else f"(no progress events, {status})"


def wait_for_page(page, hub: Hub, fragment: str, timeout: float) -> None:
    """Wait in Chromium through the hub's spawn-pending page (the Slurm job starting) until the
    page's URL holds `fragment`; a spawn the hub logs as failed fails at once."""
    deadline = time.monotonic() + timeout
    while fragment not in page.url:
        log = hub.tail()
        assert "Error starting server" not in log and "Unhandled error starting" not in log, "spawn failed"
        assert time.monotonic() < deadline, f"no {fragment} within {timeout:.0f} s (page {page.url})"
        page.wait_for_timeout(500)  # lets Playwright see the navigation (time.sleep would not)


# ------------------------------------------------------------------ the course's upstream repository
def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=trainer", "-c", "user.email=trainer@example.org", *args], cwd=cwd,
                   check=True, capture_output=True, timeout=60)


@contextmanager
def served_course(served: Path):
    """The course (notebooks and README) at branch main in a git repository served read-only by
    `git daemon` on the head's cluster address, as a trainer's repository would be over https
    (a learner cannot clone a root-owned repository from its path: git refuses its ownership)."""
    work = served / "course"
    shutil.copytree(ROOT / "notebooks", work / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copy2(ROOT / "README.md", work / "README.md")
    git_repository(work)
    with git_daemon(served) as base:
        yield {"url": f"{base}/course", "work": work, "base": base}


def git_repository(work: Path, files: dict[str, str] | None = None) -> None:
    """`work` (with `files` written into it) as a git repository with one commit on branch main."""
    for name, text in (files or {}).items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    git("init", "-q", "-b", "main", cwd=work)
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "the first commit", cwd=work)


@contextmanager
def git_daemon(served: Path):
    """`git daemon` serving every repository under `served`, read-only, on the head's cluster
    address; yields its base URL (git://ADDRESS:PORT)."""
    port = free_port()
    daemon = subprocess.Popen(["git", "daemon", "--export-all", "--reuseaddr", f"--base-path={served}",
                               f"--listen={BRIDGE_ADDR}", f"--port={port}", str(served)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    base = f"git://{BRIDGE_ADDR}:{port}"
    first = next(p.name for p in sorted(served.iterdir()) if (p / ".git").is_dir())
    try:
        deadline = time.monotonic() + 20
        while subprocess.run(["git", "ls-remote", f"{base}/{first}"], capture_output=True, timeout=20).returncode != 0:
            assert daemon.poll() is None and time.monotonic() < deadline, daemon.stderr.read().decode()[-500:]
            time.sleep(0.2)
        yield base
    finally:  # `git daemon` runs git-daemon as a child: end the whole group
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=10)
