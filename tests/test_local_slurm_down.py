"""slurm/local/down, run as root, signals the PIDs its PID files name only while each is still the
daemon that wrote the file: its command, and started before the file was written. A PID reused by
another process since (anyone's) is left alone.

down's own functions run here, taken from the script (the whole script would also tear down the
machine's one local Slurm: its bridge and namespaces); the suite's `slurm` fixture runs the whole
script at its end and checks that no daemon is left."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _functions() -> str:
    text = (ROOT / "slurm" / "local" / "down").read_text()
    start = text.find("still_ours() {") if "still_ours() {" in text else text.index("kill_pidfile() {")
    return text[start:text.index("\n}\n", text.index("kill_pidfile() {")) + 3]


def _named(tmp_path: Path, name: str) -> Path:
    """`sleep` under another command name (what /proc/PID/comm shows)."""
    program = tmp_path / "bin" / name
    program.parent.mkdir(exist_ok=True)
    shutil.copy(shutil.which("sleep"), program)
    return program


def _kill_pidfile(pid_file: Path, comm: str) -> None:
    done = subprocess.run(["bash", "-c", _functions() + f'\nkill_pidfile "{pid_file}" {comm}'], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("case", ["an unrelated sleep", "a later process with the daemon's name", "the daemon"])
def test_down_signals_only_the_daemon_that_wrote_the_pid_file(tmp_path, case, report):
    state = tmp_path / "state"
    state.mkdir()
    pid_file = state / "slurmctld.pid"
    if case == "an unrelated sleep":  # a PID file pointing at someone's process: command differs
        process = subprocess.Popen(["sleep", "300"])
        pid_file.write_text(f"{process.pid}\n")
    elif case == "a later process with the daemon's name":  # the PID reused by a process started after the file
        pid_file.write_text("0\n")
        process = subprocess.Popen([str(_named(tmp_path, "slurmctld")), "300"])
        pid_file.write_text(f"{process.pid}\n")
        written = time.time() - 3600
        os.utime(pid_file, (written, written))
    else:  # the daemon: started, then wrote its file
        process = subprocess.Popen([str(_named(tmp_path, "slurmctld")), "300"])
        time.sleep(1.2)
        pid_file.write_text(f"{process.pid}\n")
    try:
        _kill_pidfile(pid_file, "slurmctld")
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        killed = process.poll() is not None
    finally:
        process.kill()
        process.wait()
    assert killed == (case == "the daemon"), f"{case}: {'killed' if killed else 'left running'}"
    assert not pid_file.exists(), "the PID file is removed either way"
    report(f"test_local_slurm_down: {case}: {'killed' if killed else 'left running'}")
