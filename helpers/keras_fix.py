"""Make Keras 3 `model.fit` work under MultiWorkerMirroredStrategy.

Upstream bug: keras-team/keras#20585 (also tensorflow/tensorflow#72388). In
keras/src/backend/tensorflow/trainer.py two spots break multi-worker training:

1. `TensorFlowTrainer._maybe_symbolic_build` takes the first distributed batch only to
   learn shapes, but with one replica per worker some of its values are PerReplica and some
   are not, so it hands PerReplica objects to `_symbolic_build`:
   ``ValueError: Attempt to convert a value (PerReplica...)``.
   Fix: build from the dataset's element spec (shapes and dtypes are all that is needed)
   without reading a batch. Reading one is also what made `evaluate` fail now and then:
   Keras then resets its iterator, and abandoning an iterator that has started filling an
   in-memory `cache()` may truncate the dataset on one worker only; that worker then gets
   an empty batch (oneDNN's Conv2D fails on it: "Incompatible shapes: [32] vs.
   [0,32,32,3]") while the other waits in its all-reduce. The test
   `tests/test_multiworker.py::test_repeated_evaluate_on_cached_data` repeats it.
2. `reduce_per_replica` reduces scalar logs with ``strategy.reduce("MEAN", v, axis=0)``:
   ``Invalid reduction dimension 0``. Fix: reduce rank-0 values with ``axis=None``.

Verified on Keras 3.15.1 only (broken without the patch, right with it): the patch touches
private `keras.src` code, so on any other Keras minor version `apply()` stops with a line that
says so, rather than leaving `fit` silently unpatched or patching code it has not seen. The test
`tests/test_multiworker.py::test_keras_fit_fails_without_the_fix` shows the failure without it.
Keras 2 code has a documented way of its own: `pip install tf_keras` and `TF_USE_LEGACY_KERAS=1`
(lesson 17 runs both under MWMS); beside `tensorflow-cpu`, install it with `--no-deps`, or it
pulls in the full `tensorflow` wheel.
"""

from __future__ import annotations

import functools

from .settings import value

VERIFIED = (3, 15)  # major.minor: 3.15.1 verified broken without the patch, right with it (2026-11)
DISABLE_ENV = "COURSE_DISABLE_KERAS_FIX"  # set to 1 to see the upstream failure
_applied = False


def keras_needs_fix(version: str | None = None) -> bool:
    """Whether this is the Keras the patch was verified on; any other version is an error."""
    if version is None:
        import keras

        version = keras.__version__
    if tuple(int(p) for p in version.split(".")[:2]) != VERIFIED:
        from .errors import CourseError

        raise CourseError(f"Keras {version}: the course's fix for model.fit under MultiWorkerMirroredStrategy "
                          f"(keras-team/keras#20585) was verified on Keras 3.15.1 only; install keras=={VERIFIED[0]}."
                          f"{VERIFIED[1]}.* (pyproject.toml), or check that your Keras fixed the bug and update "
                          "helpers/keras_fix.py; Keras 2 code runs with tf_keras and TF_USE_LEGACY_KERAS=1")
    return True


def _local_spec(spec):
    """One replica's part of a distributed dataset's element spec (shapes and dtypes are
    all `_symbolic_build` reads)."""
    value_specs = getattr(spec, "_value_specs", None)  # PerReplicaSpec: several local replicas
    return value_specs[0] if value_specs else spec


def apply() -> bool:
    """Patch Keras's TensorFlow trainer once; returns whether the patch is in place."""
    global _applied
    if _applied:
        return True
    if value(DISABLE_ENV) == "1" or not keras_needs_fix():
        return False
    from keras.src.backend.tensorflow import trainer as tf_trainer
    from keras.src import tree

    original_build = tf_trainer.TensorFlowTrainer._maybe_symbolic_build

    @functools.wraps(original_build)
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if strategy is None or iterator is None or not tf_trainer._collective_all_reduce_multi_worker(strategy):
            return original_build(self, iterator=iterator, data_batch=data_batch)
        spec = getattr(iterator, "_distributed_dataset", None)
        spec = getattr(spec, "element_spec", None)
        if spec is None:  # not the iterator this patch knows: let Keras do as upstream
            return original_build(self, iterator=iterator, data_batch=data_batch)
        with strategy.scope():
            self._symbolic_build(data_batch=tree.map_structure(_local_spec, spec))

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
