"""What the proof tests share: a lesson's proof cell and the cells before it, read from its notebook
and run on planted figures (the correct run's must pass, a broken claim's must raise), and the planted
raw data more than one lesson's gathering cell reads."""

import math
import os
from pathlib import Path
from types import SimpleNamespace

import nbformat
import numpy as np
import pytest


NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ENVIRON = "ENVIRON"  # a broken variant's key: environment variables set while its proof runs


def proof_source(name: str) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    proofs = [c.source for c in nb.cells if c.cell_type == "code" and "assert" in c.source
              and "solution" not in c.metadata.get("tags", [])]  # exercises' solutions check themselves too
    return proofs[-1]


def run_proof(name: str, namespace: dict) -> None:
    execute_proof(proof_source(name), name, namespace)


def holds_unless(match: str | None, prove, *args) -> None:
    """The proof passes on the correct data (`match` None), else fails with `match` in its message."""
    if match is None:
        prove(*args)
    else:
        with pytest.raises(AssertionError, match=match):
            prove(*args)


def execute_proof(code, name: str, namespace: dict) -> None:
    """Run a proof (its source or a compiled mutant) on `namespace`; the namespace's ENVIRON entry,
    if any, is set in os.environ for the run (13's proof reads the environment, so it is broken so)."""
    import os
    from unittest import mock

    namespace = dict(namespace)
    environ = namespace.pop(ENVIRON, {})
    with mock.patch.dict(os.environ, environ):
        exec(compile(code, name, "exec") if isinstance(code, str) else code, {"math": math, **namespace})


def cell_defining(name: str, marker: str) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and marker in c.source)


class PlantedEngines:
    """What lesson 14's engines return, planted: `view.pull(name)` gives one value per worker."""

    def __init__(self, pulled: dict):
        self.view = SimpleNamespace(pull=lambda name, block=True: pulled[name])

    def finish(self) -> str:
        return "stopped"


def gather_and_prove(name: str, namespace: dict) -> None:
    """The notebook's gathering cell (the code cell before the proof) on `namespace`, then its proof."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    gather = code[code.index(proof_source(name)) - 1]
    namespace = {"math": math, "np": np, "print": lambda *a, **k: None, **namespace}
    exec(compile(gather, f"{name} gather", "exec"), namespace)
    exec(compile(proof_source(name), f"{name} proof", "exec"), namespace)


def solution_source(name: str, number: int) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    return next(c.source for c in nb.cells if c.source.startswith(f"# Solution {number}"))


def assignment_source(name: str, target: str) -> str:
    """The statement of a notebook's code cell that assigns `target` (its gathering cells compute figures so)."""
    import ast

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.source.lstrip().startswith("%"):
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == target for t in node.targets):
                return ast.get_source_segment(cell.source, node)
    raise AssertionError(f"{name}: no cell assigns {target}")


def function_source(name: str, function: str) -> str:
    """The source of a function a notebook's code cell defines."""
    import ast

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and not cell.source.lstrip().startswith("%"):
            for node in ast.parse(cell.source).body:
                if isinstance(node, ast.FunctionDef) and node.name == function:
                    return ast.get_source_segment(cell.source, node)
    raise AssertionError(f"{name}: no cell defines {function}")


def planted_copies(*values) -> SimpleNamespace:
    """A variable as the gathering cells read it: its `path`, its `value` (the replicas' copies, each
    with `.numpy()` as a replica's tensor has)."""
    return SimpleNamespace(path="", value=[SimpleNamespace(numpy=lambda v=v: np.asarray(v, dtype="float32")) for v in values])


ONE_REPLICA_EACH = SimpleNamespace(experimental_local_results=lambda copies: copies, num_replicas_in_sync=2)


def run_edited_to_its_proof(notebook: str, old: str, new: str, proof_mark: str, tmp_path, monkeypatch,
                             timeout: float, where: str = "") -> tuple[str, str]:
    """(status, detail) of `notebook` run for real up to its proof cell (the last code cell holding
    `proof_mark`), with `old` replaced by `new` in the code cell holding both `old` and `where`."""
    from helpers.commands.course_run import run_notebook

    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and old in c.source and where in c.source)
    cell.source = cell.source.replace(old, new, 1)
    proof = max(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and proof_mark in c.source)
    nb.cells = nb.cells[:proof + 1]  # nothing after the proof
    for name in ("COURSE_OUTPUT_DIR", "COURSE_FIGURES_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    variant = tmp_path / "nb" / notebook
    variant.parent.mkdir()
    nbformat.write(nb, variant)
    (tmp_path / "out").mkdir()
    status, _, detail = run_notebook(variant, tmp_path / "out", timeout=timeout)
    return status, detail


def code_cells(name: str) -> list[str]:
    return [c.source for c in nbformat.read(NOTEBOOKS / name, as_version=4).cells if c.cell_type == "code"]
