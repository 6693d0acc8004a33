"""The course as a centre offers it: JupyterHub, each server a Slurm job, driven in Chromium.

Root only (a test user is created, the local Slurm brought up); CI sets COURSE_REQUIRE_SLURM=1
and COURSE_REQUIRE_BROWSER=1, so a skip is a failure there. The hub loads the shipped
slurm/jupyterhub/jupyterhub_config.py and overrides only what one machine needs: its own
addresses and ports, a test authenticator, `runuser` instead of sudo, and node addresses
looked up in Slurm (the emulated nodes' names resolve only inside their namespaces).
Everything created (user, hub database, cookie secret, jobs, processes) is removed.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, leftovers, squeue, squeue_empty
from tests.test_browser import CHROMIUM_ARGS, SCREENSHOTS, ensure_chromium, wait_kernel_idle

pytestmark = pytest.mark.slurm
BRIDGE_ADDR = "10.77.0.1"  # slurm/local/common.sh: where the host is reachable from the nodes
CHP_DIR = Path.home() / ".cache" / "tf-hpc-course" / "configurable-http-proxy"
PROOF = "trained on disjoint data, and hold identical weights"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _configurable_http_proxy() -> str:
    """JupyterHub's proxy, from npm, installed once into the course's cache."""
    binary = CHP_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
    if not binary.exists():
        if shutil.which("npm") is None:
            if shutil.which("apt-get") is None:
                pytest.fail("npm is missing and cannot be installed (no apt-get)")
            subprocess.run("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm",
                           shell=True, check=True, capture_output=True, timeout=900)
        CHP_DIR.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["npm", "install", "--silent", "--prefix", str(CHP_DIR), "configurable-http-proxy@5"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and binary.exists(), done.stderr[-2000:]
    return str(binary)


@pytest.fixture
def test_user(other_user):
    """A non-root learner with the course notebooks in their home (removed after, by other_user)."""
    name, home = other_user["name"], other_user["home"]
    shutil.copytree(ROOT / "notebooks", home / "notebooks")
    subprocess.run(["chown", "-R", f"{name}:{name}", str(home / "notebooks")], check=True)
    probe = subprocess.run(["runuser", "-u", name, "--", sys.executable, "-c", "import helpers, jupyterhub"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.fail(f"user {name} cannot import jupyterhub from {sys.executable}: {probe.stderr[-500:]}")
    return {**other_user, "password": secrets.token_urlsafe(16)}


def _write_config(directory: Path, user: dict, ports: dict, token: str, slurm_env: dict) -> Path:
    config = directory / "jupyterhub_config.py"
    config.write_text(f'''
load_subconfig({str(ROOT / "slurm" / "jupyterhub" / "jupyterhub_config.py")!r})

from batchspawner import SlurmSpawner
from helpers.slurm_engines import node_address


class LocalSlurmSpawner(SlurmSpawner):
    """The emulated nodes' names resolve only inside their namespaces: ask Slurm for the address."""

    def state_gethost(self):
        return node_address(super().state_gethost())


c.JupyterHub.spawner_class = LocalSlurmSpawner
c.JupyterHub.bind_url = "http://127.0.0.1:{ports["public"]}"
c.JupyterHub.hub_ip = {BRIDGE_ADDR!r}
c.JupyterHub.hub_port = {ports["hub"]}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{ports["proxy_api"]}"
c.ConfigurableHTTPProxy.command = [{_configurable_http_proxy()!r}]
c.JupyterHub.db_url = "sqlite:///{directory}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{directory}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = "{directory}/jupyterhub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {user["password"]!r}
c.Authenticator.allowed_users = {{{user["name"]!r}}}
c.JupyterHub.services = [{{"name": "course-test", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "course-test", "scopes": ["admin:servers", "read:users"],
                             "services": ["course-test"]}}]
c.SlurmSpawner.exec_prefix = "runuser -p -u {{username}} --"
c.SlurmSpawner.req_options = "--nodes=2 --ntasks-per-node=1"
c.SlurmSpawner.start_timeout = 120
c.Spawner.environment.update({{"COURSE_MODE": "quick", "SLURM_CONF": {slurm_env["SLURM_CONF"]!r}}})
''')
    return config


class Hub:
    def __init__(self, config: Path, directory: Path, env: dict, public: int):
        self.log = open(directory / "jupyterhub.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=directory,
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{public}"
        self.directory = directory

    def request(self, method: str, path: str, token: str) -> int:
        import urllib.error
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        req = urllib.request.Request(f"{self.url}{path}", method=method, headers={"Authorization": f"token {token}"})
        try:
            with opener.open(req, timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def wait_up(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "JupyterHub exited:\n" + self.tail()
            try:
                if self.request("GET", "/hub/api/", "") == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("JupyterHub did not answer:\n" + self.tail())

    def tail(self) -> str:
        self.log.flush()
        return (self.directory / "jupyterhub.log").read_text()[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.log.close()


def test_hub_server_as_slurm_job_runs_notebook_03(slurm, test_user, tmp_path, report):
    executable = ensure_chromium()
    from playwright.sync_api import sync_playwright

    directory = tmp_path / "hub"
    directory.mkdir(mode=0o700)
    ports = {"public": _free_port(), "hub": _free_port(), "proxy_api": _free_port()}
    token = secrets.token_hex(32)
    config = _write_config(directory, test_user, ports, token, slurm["env"])
    env = {**slurm["env"], "COURSE_DIR": str(ROOT)}
    timings, user = {}, test_user["name"]
    started = time.monotonic()
    hub = Hub(config, directory, env, ports["public"])
    try:
        hub.wait_up(60)
        timings["hub up"] = time.monotonic() - started
        for name in ("jupyterhub_cookie_secret", "jupyterhub.sqlite"):
            mode = stat.S_IMODE((directory / name).stat().st_mode)
            assert mode & 0o077 == 0, f"{name} is readable by others: {oct(mode)}"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            t = time.monotonic()
            page.goto(f"{hub.url}/hub/login")
            page.fill("input[name=username]", user)
            page.fill("input[name=password]", test_user["password"])
            page.click("input[type=submit], button[type=submit]")
            deadline = time.monotonic() + 180
            while f"/user/{user}/lab" not in page.url:  # spawn-pending page until the job runs
                log = hub.tail()
                assert "Error starting server" not in log and "Unhandled error starting" not in log, "spawn failed"
                assert time.monotonic() < deadline, f"no JupyterLab within 180 s (page {page.url})"
                page.wait_for_timeout(500)  # lets Playwright see the navigation (time.sleep would not)
            page.wait_for_selector(".jp-LabShell, #jp-main-dock-panel", timeout=120_000)
            timings["login to JupyterLab ready (Slurm job included)"] = time.monotonic() - t
            jobs = squeue(slurm["env"]) or ""
            assert "jupyterh" in jobs, f"the server should be a Slurm job: {jobs!r}"
            base = f"{hub.url}/user/{user}"
            t = time.monotonic()
            page.goto(f"{base}/lab/tree/notebooks/03_multiworker_ipyparallel.ipynb")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            wait_kernel_idle(page, base, 120)
            page.click("text=Run", timeout=10_000)
            page.click("text=Run All Cells", timeout=10_000)
            try:  # the proof's *output* (its source contains the same words)
                page.wait_for_selector(f".jp-OutputArea-output:has-text('{PROOF}')", timeout=300_000)
            except Exception:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOTS / "03_multiworker-jupyterhub-failed.png"))
                outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
                errors = [line for o in outputs for line in o.splitlines()
                          if "Error" in line and not line.strip().startswith("File ")]
                raise AssertionError("notebook 03 did not reach its proof; error lines:\n" + "\n".join(errors[-12:])
                                     + "\nlast output:\n" + (outputs[-1][-1500:] if outputs else "")) from None
            timings["notebook 03 run (engines as an srun step in the server's job)"] = time.monotonic() - t
            proof = page.locator(".jp-OutputArea-output", has_text=PROOF).first.inner_text()
            hosts = page.locator(".jp-OutputArea-output", has_text="'host': 'node2'").count()
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shot = SCREENSHOTS / "03_multiworker-jupyterhub.png"
            page.screenshot(path=str(shot))
            browser.close()
        t = time.monotonic()
        assert hub.request("DELETE", f"/hub/api/users/{user}/server", token) in (202, 204)
        assert squeue_empty(slurm["env"], within=60), "stopping the server must end its Slurm job"
        timings["server stopped from the hub, squeue empty"] = time.monotonic() - t
    except Exception as exc:
        jobs = "".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for log in
                       sorted(test_user["home"].glob("jupyterhub-course-*.log")))
        raise AssertionError(f"{exc}\n--- hub log\n{hub.tail()}\n{jobs}") from None
    finally:
        hub.stop()
    report(f"{Path(__file__).stem}: screenshot {shot}")
    report(f"{Path(__file__).stem}: " + "; ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    assert "2 workers formed one cluster of 2 replicas, trained on disjoint data, and hold identical weights" in proof, proof
    assert hosts >= 1, "an engine should have run on node2"
    left = [p for p in leftovers() if user in p or "jupyterhub" in p or "ipengine" in p]
    assert not left, left
