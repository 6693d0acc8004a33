"""Lesson 00's proof cell (notebooks/00_environment.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

from types import SimpleNamespace

import numpy as np
import pytest

from tests.support.proof_cases import OK
from tests.support.proof_cells import gather_and_prove, holds_unless


class _Split:
    """A tfds split as lesson 00's cell uses it: `take(n)` keeps the first n (image, label) pairs."""

    def __init__(self, labels):
        self.pairs = [(np.zeros((32, 32, 3), "uint8"), label) for label in labels]

    def take(self, count):
        taken = _Split([])
        taken.pairs = self.pairs[:count]
        return taken


@pytest.mark.parametrize("labels,match", [
    ([i % 10 for i in range(500)], None),
    ([i % 9 for i in range(400)] + [9] * 100, "all ten classes"),  # class 9 only after the first 400 images
    ([i % 9 for i in range(500)], "all ten classes")],
    ids=["ten classes", "one class after image 400", "nine classes"])
def test_lesson_00_gathering_cell_reads_the_classes_of_the_first_400_images(monkeypatch, tmp_path, labels, match):
    """The classes come from what `tfds.load` reads, never a download, and only from the first 400
    images the cell takes (the cell's own `take`, its own label list)."""
    import sys
    from types import ModuleType

    loads = []
    tfds = ModuleType("tensorflow_datasets")
    tfds.load = lambda name, **kwargs: loads.append((name, kwargs)) or _Split(labels)
    tfds.as_numpy = lambda split: iter(split.pairs)
    host = ModuleType("helpers.host")
    host.import_tensorflow = lambda: None  # the cell's planted data needs no TensorFlow
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", tfds)
    monkeypatch.setitem(sys.modules, "helpers.host", host)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    ok = OK["00_environment.ipynb"]
    raw = {**{k: v for k, v in ok.items() if k not in ("labels", "dataset")},
           "dataset": SimpleNamespace(**vars(ok["dataset"]), data_dir=tmp_path, label_names=[f"c{i}" for i in range(10)]),
           "plots": SimpleNamespace(save=lambda fig, name: None)}
    holds_unless(match, gather_and_prove, "00_environment.ipynb", raw)
    assert loads == [("cifar10", {"data_dir": str(tmp_path), "split": "train", "as_supervised": True, "download": False})]
