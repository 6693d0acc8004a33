"""A lesson's sizes are computed once, in the learner's kernel, and reach engines and jobs as values.

An engine or a job started with other `COURSE_*` settings than the kernel (another login shell, a
Slurm job's inherited environment) would size its worker differently if it called `mode_sizes` again:
workers of one cluster with different global batches wait for each other's all-reduce until the
collective timeout. So no `%%px` cell and no program a lesson writes reads the mode or its overrides;
the kernel pushes its `sizes` (a frozen dataclass, which ipyparallel pickles) or passes numbers.
"""

from __future__ import annotations

import json
import pickle
import re

import pytest

from helpers.mode import mode_sizes
from tests.conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RECOMPUTES = re.compile(r"\bmode_sizes\(|\bresolve_mode\(|(environ|getenv)\b.*COURSE_(MODE|EPOCHS|MAX_STEPS)\b")
REMOTE = ("%%px", "%%writefile")


def remote_cells(notebook) -> list[tuple[int, str]]:
    """(index, source) of each cell that runs somewhere other than the kernel: engines, written programs."""
    cells = json.loads(notebook.read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells)
            if c["cell_type"] == "code" and "".join(c["source"]).startswith(REMOTE)]


def recomputing(notebook) -> list[str]:
    return [f"{notebook.name} cell {i}: {line.strip()}" for i, source in remote_cells(notebook)
            for line in source.splitlines()[1:] if RECOMPUTES.search(line.split("#")[0])]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_engine_or_job_program_recomputes_the_sizes(notebook):
    assert not recomputing(notebook), "sizes recomputed away from the kernel:\n" + "\n".join(recomputing(notebook))


def test_the_check_sees_an_engine_cell_that_recomputes(tmp_path):
    planted = tmp_path / "99_planted.ipynb"
    planted.write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": ["%%px\n", "from helpers.mode import mode_sizes\n", "sizes = mode_sizes(MODE)\n"]},
        {"cell_type": "code", "source": ["%%writefile x.py\n", "import os\n", "os.environ['COURSE_EPOCHS']\n"]},
        {"cell_type": "code", "source": ["sizes = mode_sizes(MODE)  # the kernel: allowed\n"]}]}))
    assert [line.split(":")[0] for line in recomputing(planted)] == ["99_planted.ipynb cell 0", "99_planted.ipynb cell 1"]


def test_lessons_with_engines_push_their_sizes():
    """Every lesson whose engines read a size gets `sizes` pushed, and the object survives the trip."""
    for notebook in NOTEBOOKS:
        remote = "\n".join(source for _, source in remote_cells(notebook) if source.startswith("%%px"))
        kernel = json.loads(notebook.read_text())["cells"]
        pushes = "".join("".join(c["source"]) for c in kernel if c["cell_type"] == "code" and ".push(" in "".join(c["source"]))
        if re.search(r"\bsizes\.", remote):
            assert '"sizes": sizes' in pushes, f"{notebook.name}: engines read sizes the kernel never pushed"
    sizes = mode_sizes("quick")
    assert pickle.loads(pickle.dumps(sizes)) == sizes
