"""Lesson 04's kernel cells run in this process, as the nbval pass runs them: shared by its proof tests and the
scripts they start in fresh Pythons (a test module imports no other test module)."""

from tests.support.proof_cells import code_cells


def lesson_04_kernel(strategy, variant: str) -> dict:
    """Lesson 04's kernel cells as the nbval pass runs them, in this process on `strategy`, one epoch of quick mode:
    the step and loop cells, data, model, fingerprint, training (cell 21) and the check of what evaluation fed. With
    `variant` "evaluation fed another dataset", the training cell's evaluation reads 511 training images instead of
    the test split's 511 (review r04e); the namespace the cells leave."""
    import dataclasses

    import keras
    import numpy as np
    import tensorflow as tf

    from helpers import lesson
    from helpers.data import ensure_data, load_split
    from helpers.mode import mode_sizes

    ns = {"tf": tf, "keras": keras, "np": np, "strategy": strategy, "sizes": dataclasses.replace(mode_sizes("quick"), epochs=1),
          "ensure_data": ensure_data, "load_split": load_split, "training_dataset": lesson.training_dataset,
          "evaluation_dataset": lesson.evaluation_dataset, "small_cnn": lesson.small_cnn, "print": lambda *a, **k: None}
    code = code_cells("04_custom_training_loop.ipynb")
    for start in ("def correct_predictions", "def make_train_step", "def make_eval_step", "def train_epoch",
                  "dataset = ensure_data", "with strategy.scope():\n    model = small_cnn()", "import hashlib", "def fingerprints",
                  'curves', "test_images = int(", "from helpers.lesson import normalize"):
        cell = next(c for c in code if c.startswith(start))
        if start == "curves" and variant == "evaluation fed another dataset":
            fed = "evaluate(eval_step, test_dist"
            assert fed in cell
            cell = cell.replace(fed, "evaluate(eval_step, other_dist")
            ns["other_dist"] = strategy.distribute_datasets_from_function(  # as many images, from the training split
                lambda context: lesson.evaluation_dataset(ns["train_examples"].take(511), ns["global_batch"], context))
        exec(compile(cell, "04 cell", "exec"), ns)
    return ns
