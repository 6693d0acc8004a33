"""Lessons 01, 02 and 04 take their proofs' checking branch in the nbval pass, not the one that cannot check.

With one replica (CPU_REPLICAS = 1, or one GPU left unsplit) their proofs have no second copy of a
variable, no empty replica batch, no per-replica divisor apart from the global one and no replica
step that lazily built slots break, to look at: that branch prints a line starting `NOT CHECKED`,
for a learner on one device and for `make fullcheck`, which runs them with CPU_REPLICAS = 1 on
purpose. The nbval pass runs the lessons as shipped, with 2 replicas: there each must print its
checking branch's line and no `NOT CHECKED` line, or a change that left them on one replica (the
default, `environment.local_replicas`) would pass with nothing checked. Read from the notebooks the
pass executed (COURSE_NBVAL_KEEP, under make test), so the test runs after them; run alone, it
executes these lessons first with make course's runner (a few minutes).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers.commands.course_run import executed_whole
from tests.conftest import ROOT

pytestmark = pytest.mark.after_notebooks
NOT_CHECKED = "NOT CHECKED"
CHECKED = {  # the line each proof prints when it compared 2 replicas
    "01_mirrored_strategy.ipynb": "weights and slots identical on 2 replicas",
    "02_input_pipelines.ipynb": "empty replica batch checked on 2 replicas",
    "04_custom_training_loop.ipynb": "custom loop OK: on 2 replicas global-batch scaling is exact",
}


@pytest.fixture(scope="module")
def executed(nbval_kept, tmp_path_factory) -> Path:
    if nbval_kept:  # under make test: the nbval pass's own runs of the lessons
        return nbval_kept
    out = tmp_path_factory.mktemp("lessons")
    done = subprocess.run([sys.executable, "-m", "helpers.commands.course_run", "--out", str(out),
                           *(str(ROOT / "notebooks" / name) for name in CHECKED)],
                          capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return out / "notebooks"


def printed_lines(path: Path) -> list[str]:
    """Every line the notebook's code cells printed (stream outputs)."""
    cells = nbformat.read(path, as_version=4).cells
    return [line for cell in cells if cell.cell_type == "code" for output in cell.get("outputs", [])
            if output.get("output_type") == "stream" for line in output.get("text", "").splitlines()]


@pytest.mark.parametrize("name", sorted(CHECKED))
def test_the_proof_compared_two_replicas(executed, name, report):
    path = executed / name
    assert path.exists() and executed_whole(path), f"{name} was not executed whole (failed above, or deselected)"
    lines = printed_lines(path)
    skipped = [line for line in lines if line.startswith(NOT_CHECKED)]
    assert not skipped, f"{name} ran its proof on one replica, checking nothing of it: {skipped}"
    checked = [line for line in lines if line.startswith(CHECKED[name])]
    assert checked, f"{name} printed no '{CHECKED[name]}' line: its proof did not compare 2 replicas"
    report(f"{name}: {checked[0][:140]}")


def test_a_one_replica_line_fails_the_check(tmp_path):
    """The check itself, on a notebook whose proof printed the one-replica line: it must be found."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print()", outputs=[nbformat.v4.new_output(
        "stream", name="stdout", text="NOT CHECKED (one replica): nothing to compare\n")])])
    nbformat.write(nb, tmp_path / "01_x.ipynb")
    assert [line for line in printed_lines(tmp_path / "01_x.ipynb") if line.startswith(NOT_CHECKED)]
