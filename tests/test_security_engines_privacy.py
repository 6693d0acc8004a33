"""What another user of the same machine can see of a learner's engines: a second Unix user
connects to the controller's output relay, as anyone on a login node could, while the learner's
engine prints a secret. Without CurveZMQ (the control) the attack works; with the course's
settings it gets nothing."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


# listens until its stdin closes (the test closes it once the secret was printed, however long the
# kernel or engines took to get there) or at most sys.argv[2] seconds
ATTACKER = """
import sys, threading, time, zmq
url = sys.argv[1]
sub = zmq.Context().socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(url)
told = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), told.set()), daemon=True).start()
print("ready", flush=True)
frames, deadline = [], time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline and not told.is_set():
    if sub.poll(200):
        frames.extend(sub.recv_multipart())
while sub.poll(500):  # what was already on its way
    frames.extend(sub.recv_multipart())
print("RECEIVED", sum(len(f) for f in frames), "bytes; secret seen:", any(sys.argv[3].encode() in f for f in frames))
"""


def _attack(user: str, monkeypatch, curve: bool) -> tuple[str, str]:
    """Start engines as this (root) user, let `user` listen on their output relay; returns what
    the attacker printed and the relay's address."""
    from helpers.engines import cluster

    if not curve:
        monkeypatch.setattr(cluster, "CURVE", [])
    secret = f"SECRET-{secrets.token_hex(8)}"
    engines = cluster.start_engines(1, activate=False)
    try:
        from IPython.paths import get_ipython_dir

        info = json.loads((Path(get_ipython_dir()) / "profile_default" / "security"
                           / f"ipcontroller-{engines.cluster_id}-client.json").read_text())
        url = f"{info['interface']}:{info['iopub']}"  # the attacker finds it with `ss -lnt` on the node
        attacker = subprocess.Popen(["runuser", "-u", user, "--", sys.executable, "-c", ATTACKER, url, "120", secret],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
        assert attacker.stdout.readline().strip() == "ready"
        time.sleep(1)  # the subscription reaches the relay
        for _ in range(8):
            engines.view.execute(f"print({secret!r})", block=True)
            time.sleep(0.4)
        out, err = attacker.communicate(input="", timeout=60)  # printed: stop listening
        assert attacker.returncode == 0, err[-1000:]
        return out.strip(), url
    finally:
        engines.stop()


def test_another_user_cannot_read_engine_output(other_user, monkeypatch, report):
    seen_without, url = _attack(other_user["name"], monkeypatch, curve=False)
    assert "secret seen: True" in seen_without, f"the control attack should work without CurveZMQ: {seen_without}"
    monkeypatch.undo()
    seen_with, url = _attack(other_user["name"], monkeypatch, curve=True)
    assert "RECEIVED 0 bytes" in seen_with and "secret seen: False" in seen_with, seen_with
    report(f"second Unix user on the output relay {url}: without CurveZMQ '{seen_without}'; "
           f"with the course's settings '{seen_with}'")


def test_another_user_cannot_read_a_kernels_output(other_user, tmp_path, report):
    """`make lab`'s kernels: a second Unix user subscribes to every socket the kernel listens on
    (what `ss -lx` / `ss -lnt` show anyone) while the learner's cell prints a secret. On TCP
    loopback (Jupyter's default) that works, the HMAC key signs but does not hide; the course's
    kernels use Unix sockets in a directory only their owner can enter. The positive control: the same
    listener run by the kernel's owner on its output socket sees the secret, so the attackers listened
    while it was printed (a listener that stopped before a slow kernel printed would see nothing either)."""
    import psutil
    from jupyter_client import BlockingKernelClient

    from tests.conftest import ROOT, Lab

    lab = Lab(ROOT / "notebooks", tmp_path / "runtime",
              command=["make", "-s", "-C", str(ROOT), "lab", "LAB_OPTS=--no-browser --port=0"])
    secret = f"SECRET-{secrets.token_hex(8)}"
    attackers, control = [], None
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        request = urllib.request.Request(f"{lab.url}/api/kernels?token={lab.token}", data=b"{}", method="POST")
        with opener.open(request, timeout=60) as answer:
            kernel_id = json.loads(answer.read())["id"]
        info = json.loads((tmp_path / "runtime" / f"kernel-{kernel_id}.json").read_text())
        kernel = next(p for p in psutil.process_iter(["cmdline"]) if kernel_id in " ".join(p.info["cmdline"] or []))
        tcp = [f"tcp://127.0.0.1:{c.laddr.port}" for c in kernel.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        iopub = f"{info['transport']}://{info['ip']}" + (f"-{info['iopub_port']}" if info["transport"] == "ipc"
                                                        else f":{info['iopub_port']}")
        urls = sorted(set(tcp) | {iopub})
        attackers = [subprocess.Popen(["runuser", "-u", other_user["name"], "--", sys.executable, "-c", ATTACKER, url,
                                       "120", secret], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, cwd="/")
                     for url in urls]
        control = subprocess.Popen([sys.executable, "-c", ATTACKER, iopub, "120", secret], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")  # the owner
        for attacker in (*attackers, control):
            assert attacker.stdout.readline().strip() == "ready"
        time.sleep(1)
        client = BlockingKernelClient()
        client.load_connection_info(info)
        client.start_channels()
        try:
            client.wait_for_ready(timeout=60)
            for _ in range(6):
                client.execute_interactive(f"print({secret!r})", timeout=30, output_hook=lambda msg: None)
                time.sleep(0.5)
        finally:
            client.stop_channels()
        time.sleep(1)
        seen = [attacker.communicate(input="", timeout=60)[0].strip() for attacker in attackers]
        owner = control.communicate(input="", timeout=60)[0].strip()
    finally:
        lab.stop()
        for listener in (*attackers, *([control] if control else [])):
            if listener.poll() is None:  # a step above failed: not left listening
                listener.kill()
                listener.wait(timeout=30)
    report(f"second Unix user on the kernel's sockets {urls}: {seen}; the owner on {iopub}: {owner}")
    assert "secret seen: True" in owner, f"the positive control (the owner listening) saw nothing: {owner}"
    assert all("RECEIVED 0 bytes" in line and "secret seen: False" in line for line in seen), seen
    assert info["transport"] == "ipc" and not tcp, f"the kernel listens on TCP: {tcp or info}"
