"""The proof cells of the notebooks raise when their claim is false.

Each notebook ends with a cell that asserts what the lesson claims. Here that cell's own
source runs twice: on figures like those a correct run produces (it must pass), and on
figures where the claim is broken (it must raise), so a proof cell cannot silently stop
proving anything.
"""

import math
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def proof_source(name: str) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    proofs = [c.source for c in nb.cells if c.cell_type == "code" and "assert" in c.source]
    return proofs[-1]


class _Timer:
    def __init__(self, rate):
        self.images_per_second = rate


def _run(name: str, namespace: dict) -> None:
    exec(compile(proof_source(name), name, "exec"), dict(namespace))


SHARDING_OK = {"per_replica": [[0, 1, 2, 3], [4, 5, 6, 7]], "global_batch": 8,
               "seen": {0: {"DATA": [0, 1], "OFF": [0, 1, 2, 3]}, 1: {"DATA": [2, 3], "OFF": [0, 1, 2, 3]}},
               "pipeline_rate": 5000.0, "timer": _Timer(300.0)}


def test_sharding_proof_passes_and_fails():
    _run("02_input_pipelines.ipynb", SHARDING_OK)
    overlapping = {**SHARDING_OK, "per_replica": [[0, 1, 2, 3], [0, 1, 2, 3]]}
    with pytest.raises(AssertionError, match="cover the global batch|same example"):
        _run("02_input_pipelines.ipynb", overlapping)
    same_data = {**SHARDING_OK, "seen": {0: {"DATA": [0, 1], "OFF": [0]}, 1: {"DATA": [0, 1], "OFF": [0]}}}
    with pytest.raises(AssertionError, match="disjoint"):
        _run("02_input_pipelines.ipynb", same_data)


RESUME_OK = {"first_failed": True, "survivor_stopped": True, "backups": ["worker-0", "worker-1"], "N_ENGINES": 2, "CRASH_EPOCH": 2,
             "epochs": 4, "backup_weights": "b", "small_cnn": lambda: None, "weights_digest": lambda model: "init",
             "results": [{"rank": 0, "epochs run": [2, 3], "weights at start": "b", "weights": "a"},
                         {"rank": 1, "epochs run": [2, 3], "weights at start": "b", "weights": "a"}]}


def test_fault_tolerance_proof_passes_and_fails():
    _run("06_fault_tolerance.ipynb", RESUME_OK)
    from_scratch = {**RESUME_OK, "results": [{"rank": r, "epochs run": [0, 1, 2, 3], "weights": "a"} for r in (0, 1)]}
    with pytest.raises(AssertionError, match="ran epochs"):
        _run("06_fault_tolerance.ipynb", from_scratch)
    with pytest.raises(AssertionError, match="should have failed"):
        _run("06_fault_tolerance.ipynb", {**RESUME_OK, "first_failed": False})
    with pytest.raises(AssertionError, match="not wait for its dead peer"):
        _run("06_fault_tolerance.ipynb", {**RESUME_OK, "survivor_stopped": False})
    shared_dir = {**RESUME_OK, "backups": ["shared"]}
    with pytest.raises(AssertionError, match="one backup directory per worker"):
        _run("06_fault_tolerance.ipynb", shared_dir)
    only_the_epoch = {**RESUME_OK, "results": [{**r, "weights at start": "init"} for r in RESUME_OK["results"]]}
    with pytest.raises(AssertionError, match="did not start from the backup's weights"):
        _run("06_fault_tolerance.ipynb", only_the_epoch)


class _Engines:
    """What the 03 proof pulls from its engines."""

    def __init__(self, **pulled):
        self.pulled = pulled
        self.view = self

    def pull(self, name, block=True):
        return self.pulled[name]

    def __len__(self):
        return len(self.pulled["digest"])


def test_multiworker_proof_asks_the_strategy_and_can_fail():
    ok = dict(digest=["d", "d"], in_sync=[2, 2], task_id=[0, 1], moved=[0.5, 0.5])
    _run("03_multiworker_ipyparallel.ipynb", {"engines": _Engines(**ok)})
    for broken, match in ((dict(in_sync=[1, 1]), "did not form one cluster"),  # each worker alone
                          (dict(moved=[0.0, 0.0]), "did not change the weights"),
                          (dict(digest=["d", "e"]), "different weights"),
                          (dict(task_id=[0, 0]), "task ids")):
        with pytest.raises(AssertionError, match=match):
            _run("03_multiworker_ipyparallel.ipynb", {"engines": _Engines(**{**ok, **broken})})


def _point(kind, replicas, step_s, agree=True):
    return {"kind": kind, "label": kind, "replicas": replicas, "global_batch": 32 * replicas,
            "median_step_s": step_s, "images_per_s": 32 * replicas / step_s, "steps": 11, "weights_agree": agree}


def test_scaling_proof_passes_and_fails():
    ok = {"points": [_point("single", 1, 0.1), _point("multiworker", 2, 0.2)], "per_replica": 32, "STEPS": 10,
          "math": math}
    _run("07_scaling_performance.ipynb", ok)
    disagree = {**ok, "points": [_point("single", 1, 0.1), _point("multiworker", 2, 0.2, agree=False)]}
    with pytest.raises(AssertionError, match="weights differ"):
        _run("07_scaling_performance.ipynb", disagree)
    inflated = dict(_point("single", 1, 0.1), images_per_s=1e6)
    with pytest.raises(AssertionError):
        _run("07_scaling_performance.ipynb", {**ok, "points": [inflated]})


def test_every_notebook_has_a_proof_cell():
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        assert "assert" in proof_source(path.name), path.name
