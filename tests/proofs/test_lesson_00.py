"""Lesson 00's proof cell (notebooks/00_environment.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

from types import SimpleNamespace

import numpy as np
import pytest

from tests.support.proof_cases import LESSON_00_SIZES, OK
from tests.support.proof_cells import gather_and_prove, holds_unless, run_proof


class _Split:
    """A tfds split as lesson 00's cells use it: `take(n)` keeps the first n (image, label) pairs; it iterates over them."""

    def __init__(self, labels):
        self.pairs = [(np.zeros((32, 32, 3), "uint8"), label) for label in labels]

    def take(self, count):
        taken = _Split([])
        taken.pairs = self.pairs[:count]
        return taken

    def __iter__(self):  # a tf.data.Dataset iterates over its elements
        return iter(self.pairs)


@pytest.mark.parametrize("labels,match", [
    ([i % 10 for i in range(500)], None),
    ([i % 9 for i in range(400)] + [9] * 100, "all ten classes"),  # class 9 only after the first 400 images
    ([i % 9 for i in range(500)], "all ten classes")],
    ids=["ten classes", "one class after image 400", "nine classes"])
def test_lesson_00_gathering_cell_reads_the_classes_of_the_first_400_images(monkeypatch, tmp_path, labels, match):
    """The classes come from what `tfds.load` reads, never a download, and only from the first 400
    images the cell takes (the cell's own `take`, its own label list)."""
    loads = _planted_tfds(monkeypatch, {"train": labels})
    ok = OK["00_environment.ipynb"]
    raw = {**{k: v for k, v in ok.items() if k not in ("labels", "dataset")},
           "dataset": SimpleNamespace(**vars(ok["dataset"]), data_dir=tmp_path, label_names=[f"c{i}" for i in range(10)]),
           "plots": SimpleNamespace(save=lambda fig, name: None)}
    holds_unless(match, gather_and_prove, "00_environment.ipynb", raw)
    assert loads == [("cifar10", {"data_dir": str(tmp_path), "split": "train", "as_supervised": True, "download": False})]


def _planted_tfds(monkeypatch, splits: dict) -> list:
    """tensorflow_datasets as lesson 00's cells use it, reading `splits` (name -> labels); returns its loads."""
    import sys
    from types import ModuleType

    loads = []
    tfds = ModuleType("tensorflow_datasets")
    tfds.load = lambda name, **kwargs: loads.append((name, kwargs)) or _Split(splits[kwargs["split"]])
    tfds.as_numpy = lambda split: iter(split.pairs)
    host = ModuleType("helpers.host")
    host.import_tensorflow = lambda: None  # the cell's planted data needs no TensorFlow
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", tfds)
    monkeypatch.setitem(sys.modules, "helpers.host", host)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return loads


@pytest.mark.parametrize("synthetic,title,match", [
    (True, None, None), (False, None, None),
    (True, '"CIFAR-10"', "SYNTHETIC exactly when"),  # review r00-1, finding 13: a CIFAR-10 title on synthetic data
    (False, '"SYNTHETIC CIFAR-10-format data"', "SYNTHETIC exactly when")],
    ids=["synthetic", "real", "synthetic titled CIFAR-10", "real titled SYNTHETIC"])
def test_lesson_00_the_figure_the_gathering_cell_draws_says_synthetic_exactly_when_the_data_is(
        monkeypatch, tmp_path, synthetic, title, match):
    """The gathering cell's own figure (matplotlib, Agg) is what the proof reads: its title edited to
    name the wrong data fails the proof."""
    import nbformat

    from tests.support.proof_cells import NOTEBOOKS, proof_source

    _planted_tfds(monkeypatch, {"train": [i % 10 for i in range(500)]})
    nb = nbformat.read(NOTEBOOKS / "00_environment.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    gather = code[code.index(proof_source("00_environment.ipynb")) - 1]
    old = 'fig.suptitle(dataset.label + ('
    assert gather.count(old) == 1
    if title is not None:
        gather = gather.replace(old, f"fig.suptitle({title} + (")
    ok = OK["00_environment.ipynb"]
    label = "SYNTHETIC CIFAR-10-format data" if synthetic else "CIFAR-10"
    namespace = {**{k: v for k, v in ok.items() if k not in ("labels", "dataset", "fig")},
                 "sizes": ok["sizes"] if synthetic else LESSON_00_SIZES["workshop"],
                 "dataset": SimpleNamespace(train_size=50_000, synthetic=synthetic, label=label, data_dir=tmp_path,
                                            label_names=[f"c{i}" for i in range(10)]),
                 "plots": SimpleNamespace(save=lambda fig, name: None), "np": np, "print": lambda *a, **k: None}
    exec(compile(gather, "00 gather", "exec"), namespace)
    holds_unless(match, exec, compile(proof_source("00_environment.ipynb"), "00 proof", "exec"), namespace)


_REAL = SimpleNamespace(train_size=50_000, synthetic=False, label="CIFAR-10")
_TITLED_REAL = SimpleNamespace(get_suptitle=lambda: "CIFAR-10")
_SYNTHETIC_50K = SimpleNamespace(train_size=50_000, synthetic=True, label="SYNTHETIC CIFAR-10-format data")
# every environment the course accepts, beside OK's quick mode on its own synthetic data
ACCEPTED = {
    # quick mode with COURSE_DATA_DIR: real CIFAR-10 (the condition narrowed to `if sizes.quick:` fails it)
    "quick, COURSE_DATA_DIR real": {"data": SimpleNamespace(DATA_DIR_ENV="COURSE_DATA_DIR"),
                                    "ENVIRON": {"COURSE_DATA_DIR": "/prepared/tfds"}, "dataset": _REAL, "fig": _TITLED_REAL},
    "workshop, real": {"sizes": LESSON_00_SIZES["workshop"], "dataset": _REAL, "fig": _TITLED_REAL},
    "full, real": {"sizes": LESSON_00_SIZES["full"], "dataset": _REAL, "fig": _TITLED_REAL},
    # make fullcheck: the GPU modes on 50,000 SYNTHETIC images (review r00-1, finding 1: refused before)
    "workshop, synthetic": {"sizes": LESSON_00_SIZES["workshop"], "dataset": _SYNTHETIC_50K},
    "full, synthetic": {"sizes": LESSON_00_SIZES["full"], "dataset": _SYNTHETIC_50K}}


@pytest.mark.parametrize("name", ACCEPTED)
def test_lesson_00_proof_passes_in_every_environment_the_course_accepts(name):
    run_proof("00_environment.ipynb", {**OK["00_environment.ipynb"], **ACCEPTED[name]})


def test_lesson_00_proof_with_its_quick_mode_condition_narrowed_fails_on_real_data_in_quick_mode():
    """Quick mode may read a prepared CIFAR-10 (COURSE_DATA_DIR): a proof asking for synthetic data in
    every quick run fails that accepted environment."""
    from tests.support.proof_cells import execute_proof, proof_source

    source = proof_source("00_environment.ipynb")
    condition = "if sizes.quick and not course_setting(data.DATA_DIR_ENV):"
    assert source.count(condition) == 1
    with pytest.raises(AssertionError, match="must use the synthetic data"):
        execute_proof(source.replace(condition, "if sizes.quick:"), "00 narrowed",
                      {**OK["00_environment.ipynb"], **ACCEPTED["quick, COURSE_DATA_DIR real"]})


@pytest.mark.parametrize("mode,synthetic,warned", [
    ("quick", True, False), ("workshop", True, True), ("full", True, True), ("workshop", False, False)])
def test_lesson_00_data_cell_warns_of_synthetic_data_outside_quick_mode(capsys, mode, synthetic, warned):
    from tests.support.proof_cells import cell_defining

    cell = cell_defining("00_environment.ipynb", "data.ensure_data(sizes.quick)")
    dataset = SimpleNamespace(label="SYNTHETIC CIFAR-10-format data" if synthetic else "CIFAR-10", synthetic=synthetic,
                              data_dir=SimpleNamespace(name="tfds"), train_size=50_000, test_size=10_000)
    asked = []
    exec(cell, {"data": SimpleNamespace(ensure_data=lambda quick: asked.append(quick) or dataset),
                "sizes": SimpleNamespace(mode=mode, quick=mode == "quick")})
    out = capsys.readouterr().out
    assert asked == [mode == "quick"]
    assert (f"WARNING: {mode} mode on SYNTHETIC data" in out) == warned, out


@pytest.mark.parametrize("max_steps,cap_ignored,match", [
    (None, False, None), (4, False, None), (64, False, None),
    (4, True, "^$")],  # review r00-1, finding 4: the lessons' count without COURSE_MAX_STEPS's cap (32 steps)
    ids=["no cap", "cap 4", "cap above the epoch", "cap ignored"])
def test_lesson_00_solution_1_checks_the_step_cap(max_steps, cap_ignored, match):
    from dataclasses import replace

    from helpers.mode import mode_sizes
    from tests.support.proof_cells import solution_source

    source = solution_source("00_environment.ipynb", 1)
    counted = "sizes.steps_per_epoch(examples, global_batch)"
    assert source.count(counted) == 1
    if cap_ignored:
        source = source.replace(counted, "examples // global_batch")
    namespace = {"sizes": replace(mode_sizes("quick"), max_steps=max_steps), "dataset": SimpleNamespace(train_size=2048),
                 "print": lambda *a, **k: None}
    holds_unless(match, exec, compile(source, "00 solution 1", "exec"), namespace)


@pytest.mark.parametrize("split,test_size,match", [
    ("test", 512, None),
    ("train", 512, "^$"),  # the training split counted instead (its bare assert)
    ("test", 511, "^$")],  # a prepared count that is off by one
    ids=["as written", "train split read", "count off"])
def test_lesson_00_solution_2_counts_the_test_split(monkeypatch, tmp_path, split, test_size, match):
    from tests.support.proof_cells import solution_source

    loads = _planted_tfds(monkeypatch, {"train": [i % 10 for i in range(2048)], "test": [i % 10 for i in range(512)]})
    import tensorflow_datasets as tfds

    source = solution_source("00_environment.ipynb", 2)
    assert source.count('split="test"') == 1
    source = source.replace('split="test"', f'split="{split}"')
    namespace = {"tfds": tfds, "dataset": SimpleNamespace(data_dir=tmp_path, test_size=test_size), "print": lambda *a, **k: None}
    holds_unless(match, exec, compile(source, "00 solution 2", "exec"), namespace)
    assert [kwargs["download"] for _, kwargs in loads] == [False]


def test_lesson_00_the_predicted_minutes_it_quotes_are_helpers_training_times():
    """Cell 1: 'under three minutes a lesson in workshop mode (lesson 11 ... the longest), and up to about 20
    minutes in full mode (lesson 05's ResNet50)' on one node of 4 A100s, as helpers.training_time predicts them."""
    from helpers.training_time import predicted_minutes
    from tests.support.proof_cells import NOTEBOOKS

    lessons = sorted(p.name[:2] for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    workshop = {n: sum(predicted_minutes(n, "workshop", gpus=4)) for n in lessons}
    full = {n: sum(predicted_minutes(n, "full", gpus=4)) for n in lessons}
    assert max(workshop.values()) < 3 and max(workshop, key=workshop.get) == "11", workshop
    assert max(full, key=full.get) == "05" and 15 <= full["05"] <= 25, full
