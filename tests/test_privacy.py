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
from pathlib import Path

import pytest

ATTACKER = """
import sys, time, zmq
url = sys.argv[1]
sub = zmq.Context().socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(url)
print("ready", flush=True)
frames, deadline = [], time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    if sub.poll(200):
        frames.extend(sub.recv_multipart())
print("RECEIVED", sum(len(f) for f in frames), "bytes; secret seen:", any(sys.argv[3].encode() in f for f in frames))
"""


def _attack(user: str, monkeypatch, curve: bool) -> tuple[str, str]:
    """Start engines as this (root) user, let `user` listen on their output relay; returns what
    the attacker printed and the relay's address."""
    from helpers import cluster

    if not curve:
        monkeypatch.setattr(cluster, "CURVE", [])
    secret = f"SECRET-{secrets.token_hex(8)}"
    engines = cluster.start_engines(1, activate=False)
    try:
        from IPython.paths import get_ipython_dir

        info = json.loads((Path(get_ipython_dir()) / "profile_default" / "security"
                           / f"ipcontroller-{engines.cluster_id}-client.json").read_text())
        url = f"{info['interface']}:{info['iopub']}"  # the attacker finds it with `ss -lnt` on the node
        attacker = subprocess.Popen(["runuser", "-u", user, "--", sys.executable, "-c", ATTACKER, url, "6", secret],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
        assert attacker.stdout.readline().strip() == "ready"
        time.sleep(1)  # the subscription reaches the relay
        for _ in range(8):
            engines.view.execute(f"print({secret!r})", block=True)
            time.sleep(0.4)
        out, err = attacker.communicate(timeout=60)
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
