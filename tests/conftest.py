"""Shared fixtures. Every multi-process helper here kills with SIGKILL at a deadline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """After every test: no process this test started is still running (engines, controllers,
    TF workers, srun). Daemons that detach (slurmctld, munged) are not our children."""
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    deadline = time.monotonic() + 10
    while True:
        left = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, "left running: " + "; ".join(f"{p.pid} {' '.join(p.cmdline())[:100]}" for p in left)


class Lab:
    """JupyterLab as `make lab` starts it (127.0.0.1, token), serving `root`."""

    def __init__(self, root: Path, runtime: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--port=0", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.root_dir={root}", *(["--allow-root"] if os.geteuid() == 0 else [])],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime), "COURSE_MODE": "quick"})
        deadline, seen = time.monotonic() + 90, []
        while time.monotonic() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline()
            seen.append(line)
            match = re.search(r"(http://127\.0\.0\.1:\d+)/lab\?token=(\w+)", line)
            if match:
                self.url, self.token = match.groups()
                self._wait_ready(deadline)
                return
        self.stop()
        raise AssertionError("JupyterLab printed no URL:\n" + "".join(seen[-30:]))

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

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
