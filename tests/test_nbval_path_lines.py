"""The nbval pass (root conftest.py) requires the path line lessons 08 and 11 should print."""

from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pytest

from tests.conftest import ROOT


def _pass(tmp_path, name: str, printed: str | None, visible: bool = False) -> subprocess.CompletedProcess:
    """nbval on a two-cell notebook named like the lesson, printing `printed` (or nothing) first."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"print({printed!r})" if printed else "x = 1"),
                                         nbformat.v4.new_code_cell("y = 2")])
    nbformat.write(nb, tmp_path / name)
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_NBVAL_SLURM", "COURSE_NBVAL_KEEP")}
    if visible:
        env["COURSE_NBVAL_SLURM"] = "visible"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "--nbval-lax", "--nbval-current-env", "-q",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / name)],
                          cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("name,printed,visible,passes", [
    ("08_batch_job.ipynb", "no Slurm here: 2 local processes with TF_CONFIG", False, True),
    ("08_batch_job.ipynb", None, False, False),  # ran to its end, said nothing of where
    ("08_batch_job.ipynb", "submitting to Slurm with --exclusive=user", False, False),  # Slurm found although hidden
    ("11_checkpoints_requeue.ipynb", "Slurm, with --requeue", False, False),
    ("11_checkpoints_requeue.ipynb", "Slurm, with --requeue", True, True),  # a Slurm test's pass
    ("11_checkpoints_requeue.ipynb", "no Slurm here: 2 local processes per run", True, False),  # Slurm test ran locally
], ids=["08 local", "08 silent", "08 on Slurm while hidden", "11 on Slurm while hidden",
        "11 on Slurm, visible", "11 local, visible"])
def test_the_nbval_pass_requires_the_path_line_of_the_path_it_asked_for(tmp_path, name, printed, visible, passes):
    done = _pass(tmp_path, name, printed, visible)
    assert (done.returncode == 0) == passes, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"{name}: {printed or 'its path line was not seen'}" in done.stdout, done.stdout[-2000:]


def test_the_pass_keeps_its_notebooks_and_its_directory_to_itself(tmp_path):
    """With COURSE_NBVAL_KEEP the pass writes each notebook it ran there, and takes the setting out of
    the environment: a lesson a test runs again in a pytest of its own (on Slurm, throttled) would
    otherwise write over the pass's copy, half-run, while another stream's site test reads it (seen
    with three streams: lesson 15 on Slurm beside the site)."""
    keep = tmp_path / "kept"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\nprint('KEEP', os.environ.get('COURSE_NBVAL_KEEP'))")])
    nbformat.write(nb, tmp_path / "probe.ipynb")
    env = {**os.environ, "COURSE_NBVAL_KEEP": str(keep), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "--nbval-lax", "--nbval-current-env", "-q",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "probe.ipynb")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    kept = nbformat.read(keep / "probe.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for o in kept.cells[0].outputs)
    assert printed == "KEEP None\n", f"the kernel (and what it starts) saw the pass's directory: {printed!r}"
