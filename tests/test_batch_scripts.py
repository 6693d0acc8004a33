"""The batch scripts refuse to run a Python someone else could have put in the submit directory."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.required import unavailable

ROOT = Path(__file__).resolve().parents[1]


def _planted_checkout(tmp_path: Path) -> tuple[Path, Path]:
    checkout = tmp_path / "shared-dir"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    marker = tmp_path / "ran"
    python = checkout / ".venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\ntouch {marker}\necho 'http_proxy'\n")
    python.chmod(0o755)
    return checkout, marker


@pytest.mark.parametrize("script", ["train.sbatch", "engines.sbatch"])
@pytest.mark.parametrize("how", ["another user's", "world-writable"])
def test_batch_script_refuses_a_python_it_cannot_trust(tmp_path, script, how):
    checkout, marker = _planted_checkout(tmp_path)
    if how == "another user's":
        if os.geteuid() != 0:
            unavailable("giving files to another user needs root", "COURSE_REQUIRE_SLURM")
        for path in (checkout, checkout / ".venv", checkout / ".venv" / "bin", checkout / ".venv" / "bin" / "python"):
            os.chown(path, 65534, 65534)
    else:
        checkout.chmod(0o777)
    env = {**os.environ, "SLURM_SUBMIT_DIR": str(checkout), "SLURM_JOB_ID": "42", "COURSE_DATA_DIR": str(tmp_path),
           "SLURM_NTASKS": "1"}
    env.pop("COURSE_DIR", None)
    done = subprocess.run(["bash", str(ROOT / "slurm" / script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not running its Python" in done.stderr, done.stderr
    assert not marker.exists(), "the planted Python ran"


def test_batch_script_runs_your_own_checkout_python_check_only(tmp_path):
    """The check passes for the course's own checkout (CI's, owned by the runner)."""
    done = subprocess.run(["bash", "-c", f"COURSE_DIR={ROOT}; PYTHON={ROOT}/.venv/bin/python; set -e; "
                           + _check_block()], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def _check_block() -> str:
    text = (ROOT / "slurm" / "train.sbatch").read_text()
    start = text.index("SAFE_PYTHON=")
    end = '|| exit 2\n'
    return text[start:text.index(end, text.index("course_python_check", start)) + len(end)]


@pytest.mark.parametrize("script", ["train.sbatch", "engines.sbatch"])
def test_a_helpers_package_planted_in_the_submit_directory_does_not_run(tmp_path, script):
    """The scripts run `python -m helpers` from the submit directory; Python would put that
    directory first on sys.path and import a `helpers/` planted there (shared scratch)."""
    submit = tmp_path / "scratch"
    (submit / "helpers").mkdir(parents=True)
    marker = tmp_path / "planted-ran"
    (submit / "helpers" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (submit / "helpers" / "__main__.py").write_text("print('http_proxy')\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("srun", "sleep"):  # the step itself is not what this test is about
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "COURSE_DIR": str(ROOT), "SLURM_SUBMIT_DIR": str(submit),
           "SLURM_JOB_ID": "42", "COURSE_DATA_DIR": str(tmp_path), "SLURM_NTASKS": "1", "COURSE_CONTROLLER_IP": "127.0.0.1"}
    # in a session of its own, output to a file: whatever the script started (engines.sbatch's
    # controller) is killed with it, and cannot hold a pipe open past the script's end
    with open(tmp_path / "output", "w") as output:
        script_run = subprocess.Popen(["bash", str(ROOT / "slurm" / script)], env=env, cwd=submit, stdout=output,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        try:
            script_run.wait(timeout=120)
        finally:
            try:
                os.killpg(script_run.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert not marker.exists(), "the helpers package planted in the submit directory ran"
