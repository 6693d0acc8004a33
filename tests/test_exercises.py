"""Every lesson ends with exercises whose solutions the learner can reveal, and that check themselves.

The solutions are code cells with their source collapsed (JupyterLab shows a bar to click) and the
tag `solution`; nbval runs them with the rest of the notebook (`make test`), and `make course`
runs them too, so a solution that stops working fails the suite. Here: the shape of it all.
"""

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_lesson_ends_with_exercises_and_their_solutions(path):
    cells = nbformat.read(path, as_version=4).cells
    start = max(i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("## Exercises"))
    listed = re.findall(r"^(\d+)\. \*\*(Predict, then run|Change and observe|Fix the bug)\.\*\*", cells[start].source, re.M)
    assert 1 <= len(listed) <= 3, f"{path.name}: {len(listed)} exercises (1 to 3, each of a named kind)"
    solutions = cells[start + 1:]
    assert len(solutions) == len(listed), f"{path.name}: {len(listed)} exercises, {len(solutions)} cells after them"
    for number, cell in enumerate(solutions, 1):
        assert cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []), f"{path.name}: cell {number}"
        assert cell.metadata.get("jupyter", {}).get("source_hidden"), f"{path.name}: solution {number} is not collapsed"
        assert cell.source.startswith(f"# Solution {number}"), f"{path.name}: solution {number} is out of order"
        assert "assert " in cell.source, f"{path.name}: solution {number} does not check its answer"


def test_solutions_come_after_the_proof():
    """A solution never runs before the lesson has proved its claims (it may reuse their figures)."""
    for path in NOTEBOOKS:
        cells = nbformat.read(path, as_version=4).cells
        proofs = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("## Proof")]
        first_solution = min(i for i, c in enumerate(cells) if "solution" in c.metadata.get("tags", []))
        assert proofs and proofs[-1] < first_solution, path.name
