"""What the tests read from a lesson notebook without running it: its Python (the code cells without
their magics and shell lines) and the programs its `%%writefile` cells write."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

# the magics of a cell whose body is Python
PYTHON_CELL_MAGICS = ("%%px", "%%time", "%%capture", "%%timeit")


def notebook_python(notebook: Path) -> str:
    """A notebook's Python: code cells without their magics and shell lines; cells that are not
    Python (`%%writefile`, `%%bash`: files and shell) are left out."""
    python = []
    for cell in json.loads(notebook.read_text())["cells"]:
        source = "".join(cell["source"])
        first = source.lstrip().split(None, 1)[0] if source.strip() else ""
        if cell["cell_type"] != "code" or (first.startswith("%%") and first not in PYTHON_CELL_MAGICS):
            continue
        python += [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(python)


def written_programs(notebook: str) -> dict[str, str]:
    """The files a notebook writes with `%%writefile NAME` and appends to with `%%writefile -a
    NAME`, assembled in cell order as the notebook writes them (NAME as the magic line spells it)."""
    files: dict[str, str] = {}
    for cell in nbformat.read(NOTEBOOKS / notebook, as_version=4).cells:
        if cell.cell_type != "code" or not cell.source.startswith("%%writefile"):
            continue
        magic, _, body = cell.source.partition("\n")
        words = magic.split()
        name = words[-1]
        files[name] = (files.get(name, "") if "-a" in words else "") + body + "\n"
    return files


def written_program(notebook: str, name: str | None = None) -> str:
    """The one program a notebook writes (or the one called `name`), without the magic lines."""
    files = written_programs(notebook)
    if name is None:
        assert len(files) == 1, f"{notebook}: expected one written file, found {sorted(files)}"
        return next(iter(files.values()))
    return files[name]
