"""Make Keras 3 `model.fit` work under MultiWorkerMirroredStrategy.

Upstream bug: keras-team/keras#20585 (also tensorflow/tensorflow#72388). In
keras/src/backend/tensorflow/trainer.py two spots break multi-worker training:

1. `TensorFlowTrainer._maybe_symbolic_build` takes the first distributed batch only to
   learn shapes, but with one replica per worker some of its values are PerReplica and some
   are not, so it hands PerReplica objects to `_symbolic_build`:
   ``ValueError: Attempt to convert a value (PerReplica...)``.
   Fix: build from this worker's first local batch (shapes are all that is needed; the
   upstream code even runs a cross-worker all-reduce for it).
2. `reduce_per_replica` reduces scalar logs with ``strategy.reduce("MEAN", v, axis=0)``:
   ``Invalid reduction dimension 0``. Fix: reduce rank-0 values with ``axis=None``.

Applied only to the Keras versions known to need it (`AFFECTED`); the test
`tests/test_multiworker.py::test_keras_fit_fails_without_the_fix` shows the failure without it, so a Keras upgrade that
repairs the bug is noticed there.
"""

from __future__ import annotations

import functools
import os

AFFECTED = ((3, 0), (3, 16))  # [low, high): 3.15.1 verified broken on 2026-11
DISABLE_ENV = "COURSE_DISABLE_KERAS_FIX"  # set to 1 to see the upstream failure
_applied = False


def keras_needs_fix(version: str | None = None) -> bool:
    """Whether this Keras version carries the multi-worker `fit` bug."""
    if version is None:
        import keras

        version = keras.__version__
    major_minor = tuple(int(p) for p in version.split(".")[:2])
    return AFFECTED[0] <= major_minor < AFFECTED[1]


def apply() -> bool:
    """Patch Keras's TensorFlow trainer once; returns whether the patch is in place."""
    global _applied
    if _applied:
        return True
    if not keras_needs_fix() or os.environ.get(DISABLE_ENV) == "1":
        return False
    import tensorflow as tf
    from keras.src.backend.tensorflow import trainer as tf_trainer
    from keras.src import tree

    original_build = tf_trainer.TensorFlowTrainer._maybe_symbolic_build

    @functools.wraps(original_build)
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if strategy is None or iterator is None or not tf_trainer._collective_all_reduce_multi_worker(strategy):
            return original_build(self, iterator=iterator, data_batch=data_batch)
        for _, _, it in iterator:
            batch = next(it)
            break
        else:  # an empty dataset: let Keras report it as usual
            return original_build(self, iterator=None, data_batch=None)

        def local(value):
            if isinstance(value, tf.distribute.DistributedValues):
                return strategy.experimental_local_results(value)[0]
            return value

        with strategy.scope():
            self._symbolic_build(data_batch=tree.map_structure(local, batch))

    original_reduce = tf_trainer.reduce_per_replica

    @functools.wraps(original_reduce)
    def reduce_per_replica(values, strategy, reduction):
        if not (tf_trainer._collective_all_reduce_multi_worker(strategy)
                and reduction in ("auto", "mean")):
            return original_reduce(values, strategy, reduction)

        def reduce_one(value):
            if tf_trainer._is_scalar(value) or (
                    tf_trainer._is_per_replica_instance(value)
                    and strategy.experimental_local_results(value)[0].shape.rank == 0):
                return strategy.reduce("MEAN", value, axis=None)
            return original_reduce(value, strategy, reduction)

        return tree.map_structure(reduce_one, values)

    tf_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    tf_trainer.reduce_per_replica = reduce_per_replica
    _applied = True
    return True
