"""Engines someone else started: CSCS's ipcmagic (`%ipcluster start -n 2` inside an allocation,
engines as an srun step, a controller in the default profile and no ipyparallel cluster file),
and lesson 03's start-up (tests/support/lesson_probe.py: its cells up to the strategy, then an all-reduce) run
by nbval against them with COURSE_CLUSTER=default. Root only; CI requires it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, squeue_empty
from tests.support.lesson_probe import read_probe, write_probe

pytestmark = pytest.mark.slurm

SESSION = """
%load_ext ipcmagic
import os, subprocess, sys, time
began = time.monotonic()
%ipcluster start -n 2
print(f"IPCMAGIC_STARTED {time.monotonic() - began:.2f}", flush=True)
done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval-lax", "--nbval-current-env",
                       os.environ["PROBE_NOTEBOOK"], "-q"], env={**os.environ, "COURSE_CLUSTER": "default"},
                      capture_output=True, text=True)
open(os.environ.get("NBVAL_LOG", "/dev/null"), "w").write(done.stdout + done.stderr)
print(done.stdout[-3000:], done.stderr[-2000:])
print("NBVAL", done.returncode, flush=True)
again = subprocess.run([sys.executable, "-c", "from helpers.engines import start_engines; start_engines(2)"],
                       env={**os.environ, "COURSE_CLUSTER": "default"}, capture_output=True, text=True)
print("AGAIN", again.stderr.strip().splitlines()[-1] if again.stderr.strip() else "no error", flush=True)
%ipcluster stop
print("STOPPED", flush=True)
"""


def test_lesson_03_runs_on_engines_ipcmagic_started(slurm, tmp_path, report):
    import importlib.util

    # not imported here: ipcmagic registers its magics with the running IPython as it is imported
    assert importlib.util.find_spec("ipcmagic"), "ipcmagic-cscs is in the test extra: run make install"
    script = tmp_path / "session.ipy"
    script.write_text(SESSION)
    probe, probed = write_probe(tmp_path)
    venv_bin = str(Path(sys.executable).parent)
    env = {**slurm["env"], "IPYTHONDIR": str(tmp_path / "ipython"), "PATH": f"{venv_bin}:{os.environ['PATH']}",
           "COURSE_MODE": "quick", "NBVAL_LOG": str(tmp_path / "nbval.log"), "PROBE_NOTEBOOK": str(probe)}
    began = time.monotonic()
    done = subprocess.run(["salloc", "-N", "2", "-n", "2", "--time=10", str(Path(venv_bin) / "ipython"), str(script)],
                          env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    took = time.monotonic() - began
    out = done.stdout
    engines = read_probe(probed)
    report(f"{Path(__file__).stem}: ipcmagic's %ipcluster start -n 2 in "
           f"{next((l.split()[1] for l in out.splitlines() if l.startswith('IPCMAGIC_STARTED')), '?')} s; "
           f"lesson 03's start-up against its engines ({[(e['rank'], e['host']) for e in engines]}) and stop: "
           f"{took:.0f} s in all")
    assert "IPCMAGIC_STARTED" in out, out[-3000:] + done.stderr[-3000:]
    assert "NBVAL 0" in out, out[-5000:]
    assert sorted(e["host"] for e in engines) == ["node1", "node2"], f"one engine on each node of the allocation: {engines}"
    again = next((l for l in out.splitlines() if l.startswith("AGAIN")), "")
    assert "already ran TensorFlow" in again and "%ipcluster stop" in again, again  # used engines: one line, the fix
    assert "STOPPED" in out, out[-2000:] + done.stderr[-2000:]
    assert squeue_empty(slurm["env"], within=60)


CURVE_SESSION = """
%load_ext ipcmagic
import json, os, pathlib
import ipyparallel as ipp
%env IPP_ENABLE_CURVE=1
%ipcluster start -n 2
info = json.loads((pathlib.Path(os.environ["IPYTHONDIR"]) / "profile_default" / "security" / "ipcontroller-client.json").read_text())
client = ipp.Client()
client.wait_for_engines(2, timeout=60)
print("CURVE", bool(info.get("curve_serverkey")), "ENGINES", len(client.ids), client[:].apply_sync(lambda: 6 * 7), flush=True)
client.close()
%ipcluster stop
print("STOPPED", flush=True)
"""


def test_ipcmagic_runs_curvezmq_when_asked(slurm, tmp_path, report):
    """docs/slurm.md's advice for ipcmagic, whose controller listens on every interface: with
    `%env IPP_ENABLE_CURVE=1` before `%ipcluster start`, its controller runs CurveZMQ (the client's
    connection file holds the server key) and its engines still connect and compute."""
    script = tmp_path / "curve.ipy"
    script.write_text(CURVE_SESSION)
    venv_bin = str(Path(sys.executable).parent)
    env = {**slurm["env"], "IPYTHONDIR": str(tmp_path / "ipython"), "PATH": f"{venv_bin}:{os.environ['PATH']}"}
    done = subprocess.run(["salloc", "-N", "2", "-n", "2", "--time=5", str(Path(venv_bin) / "ipython"), str(script)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    line = next((l for l in done.stdout.splitlines() if l.startswith("CURVE")), "")
    report(f"{Path(__file__).stem}: ipcmagic with IPP_ENABLE_CURVE=1: {line or 'no engines'}")
    assert line == "CURVE True ENGINES 2 [42, 42]", done.stdout[-3000:] + done.stderr[-3000:]
    assert "STOPPED" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert squeue_empty(slurm["env"], within=60)
