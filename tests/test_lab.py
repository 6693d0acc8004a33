"""JupyterLab as `make lab` starts it: token authentication on, loopback only."""

from __future__ import annotations

import os
import urllib.error

import psutil

from tests.conftest import ROOT, Lab


def test_lab_requires_its_token_and_listens_on_loopback(tmp_path):
    """`make lab` itself (not a command of the test's own), with only a free port and no browser added."""
    lab = Lab(ROOT / "notebooks", tmp_path,
              command=["make", "-s", "-C", str(ROOT), "lab", "LAB_OPTS=--no-browser --port=0"])
    try:
        try:
            lab.get("/api/contents", token=False)
            raise AssertionError("the API answered without a token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 403
        assert lab.api("/api/contents")["type"] == "directory"  # with the token
        ips = {c.laddr.ip for p in lab.processes() for c in _listening(p)}
        assert ips and ips <= {"127.0.0.1", "::1"}, ips
        # what the server (and so its kernels, and a controller the cluster panel starts) was given
        servers = [p for p in lab.processes() if any(arg.rsplit("/", 1)[-1].startswith("jupyter") for arg in p.cmdline()[:2])]
        curve = {p.environ().get("IPP_ENABLE_CURVE") for p in servers}
        assert servers and curve == {"1"}, f"IPP_ENABLE_CURVE of make lab's JupyterLab: {curve}"
        # nbgitpuller's pull link is off (it answered 200 before: a link could clone into the kernel specs)
        try:
            lab.get("/git-pull?repo=https%3A%2F%2Fexample.org%2Fx.git&targetpath=.local%2Fshare%2Fjupyter%2Fkernels"
                    f"&token={lab.token}", token=False)
            raise AssertionError("make lab's JupyterLab answered nbgitpuller's /git-pull")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404, exc.code
        sockets = {arg.split("=", 1)[1].rsplit("/", 1)[0] for p in servers for arg in p.cmdline()
                   if arg.startswith("--KernelManager.ip=")}
        assert len(sockets) == 1 and os.path.isdir(next(iter(sockets))), sockets
    finally:
        lab.stop()
    assert not os.path.exists(next(iter(sockets))), f"make lab left its kernels' sockets in {sockets}"


def _lesson_09_cell(marker: str) -> str:
    """The source of lesson 09's code cell holding `marker`."""
    import nbformat

    cells = nbformat.read(ROOT / "notebooks" / "09_monitoring.ipynb", as_version=4).cells
    return next(c.source for c in cells if c.cell_type == "code" and marker in c.source)


def test_tensorboard_opens_through_jupyterlab_with_its_token(tmp_path, capsys):
    """Notebook 09's way to open TensorBoard, run from its own cells: its start (127.0.0.1, a free port,
    tied to the kernel), the link it prints (<Jupyter URL>/proxy/<port>/, through jupyter-server-proxy,
    which asks for Jupyter's token, JupyterHub's login on a hub, like every other page of the server),
    and its stop, after which no TensorBoard is left (nothing_left_behind)."""
    import json
    import re
    import time
    from types import SimpleNamespace

    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path / "logs" / "run" / "train"))
    writer.add_event(event_pb2.Event(step=0, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="epoch_loss", simple_value=1.5)])))
    writer.close()
    lesson = {"logs": tmp_path / "logs", "stopwatch": SimpleNamespace(report=lambda: None)}
    lab = Lab(ROOT / "notebooks", tmp_path / "runtime")
    started = False
    try:
        exec(_lesson_09_cell("board = subprocess.Popen("), lesson)
        started = True
        exec(_lesson_09_cell("TENSORBOARD_PROXY_URL"), lesson)
        link = re.search(r"open (/\S*proxy/\d+/) on your Jupyter server", capsys.readouterr().out).group(1)
        assert link == f"/proxy/{lesson['port']}/", link
        deadline, runs = time.monotonic() + 60, None
        while runs is None:
            try:
                runs = lab.api(f"{link}data/runs")
            except (urllib.error.HTTPError, OSError, json.JSONDecodeError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert runs == ["run/train"], runs
        board = psutil.Process(lesson["board"].pid)  # serving now: its sockets are open
        ips = {c.laddr.ip for p in (board, *board.children(recursive=True)) for c in _listening(p)}
        assert ips and ips <= {"127.0.0.1", "::1"}, f"lesson 09's TensorBoard listens beyond this machine: {ips}"
        try:  # without the token: sent to Jupyter's login page (or refused), never TensorBoard's data
            with lab.get(f"{link}data/runs", token=False) as answer:
                landed, body = answer.geturl(), answer.read()
            assert "/login" in landed and b"run/train" not in body, (landed, body[:200])
        except urllib.error.HTTPError as exc:
            assert exc.code == 403, exc.code
    finally:
        lab.stop()
        if started:
            exec(_lesson_09_cell("board.terminate()"), lesson)  # the lesson's own stop
    assert lesson["board"].poll() is not None


def test_make_kernel_puts_the_environments_commands_first_on_path(tmp_path):
    """A kernel registered with `make kernel` finds the venv's `ipcontroller` (ipcmagic's
    `%ipcluster start` runs it) even when Jupyter itself was started without the venv on PATH."""
    import os
    import subprocess

    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    env = {**os.environ, "JUPYTER_DATA_DIR": str(tmp_path)}
    done = subprocess.run(["make", "-s", "-C", str(ROOT), "kernel", "KERNEL_NAME=course-path-test"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    manager = KernelManager(kernel_name="course-path-test", kernel_spec_manager=specs)
    manager.start_kernel(env={**os.environ, "PATH": "/usr/bin:/bin"})
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        seen = []
        client.execute_interactive("import shutil; print(shutil.which('ipcontroller'))", timeout=60,
                                   output_hook=lambda msg: seen.append(msg["content"].get("text", "")))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert "".join(seen).strip() == str(ROOT / ".venv" / "bin" / "ipcontroller"), seen


def _listening(process) -> list:
    """The process's listening TCP sockets; none for a child that ended meanwhile (`make lab`'s own
    short-lived children: one ended between the listing and the look, in CI)."""
    try:
        return [c for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    except psutil.NoSuchProcess:
        return []
