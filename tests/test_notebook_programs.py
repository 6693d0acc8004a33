"""The programs the notebooks write with %%writefile, tested as the notebooks write them."""

import json
from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


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


def _backup(root: Path, worker: int, epoch: int, weights: str) -> None:
    directory = root / f"worker-{worker}"
    directory.mkdir(parents=True)
    (directory / "training_metadata.json").write_text(json.dumps({"epoch": epoch, "batch": 0}))
    (directory / "latest.weights.h5").write_text(weights)


def test_fault_tolerance_workers_resume_from_the_oldest_backed_up_epoch(tmp_path):
    """Notebook 06: a crash between two workers' end-of-epoch saves leaves backups one epoch
    apart; before `fit`, the newer worker takes the older worker's backup."""
    program: dict = {}
    exec(compile(written_program("06_fault_tolerance.ipynb"), "06_worker.py", "exec"), program)
    agree = program["agree_on_backup"]

    _backup(tmp_path, 0, 3, "weights after epoch 3")
    _backup(tmp_path, 1, 2, "weights after epoch 2")
    assert agree(str(tmp_path), 1, 2) == {0: 3, 1: 2}  # the older one keeps its own
    assert (tmp_path / "worker-1" / "latest.weights.h5").read_text() == "weights after epoch 2"
    assert agree(str(tmp_path), 0, 2) == {0: 3, 1: 2}
    assert (tmp_path / "worker-0" / "latest.weights.h5").read_text() == "weights after epoch 2"
    assert json.loads((tmp_path / "worker-0" / "training_metadata.json").read_text())["epoch"] == 2

    fresh = tmp_path / "fresh"
    assert agree(str(fresh), 0, 2) == {0: 0, 1: 0}  # no backup yet: nothing to agree on
    assert not fresh.exists()
