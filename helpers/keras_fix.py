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

The patch itself is `fix_keras_fit_for_multiworker` in `helpers/take_home/mwms_slurm.py`, the text
lesson 08 teaches and every job program carries beside it: one copy, imported here. This module adds
the course's checks around it: the version (a `CourseError`), `COURSE_DISABLE_KERAS_FIX`, once only.

Verified on Keras 3.15.1 only (broken without the patch, right with it): the patch touches
private `keras.src` code, so on any other Keras minor version `apply()` stops with a line that
says so, rather than leaving `fit` silently unpatched or patching code it has not seen. The test
`tests/test_multiworker.py::test_keras_fit_fails_without_the_fix` shows the failure without it.
Keras 2 code has a documented way of its own: `pip install tf_keras` and `TF_USE_LEGACY_KERAS=1`
(lesson 17 runs both under MWMS); beside `tensorflow-cpu`, install it with `--no-deps`, or it
pulls in the full `tensorflow` wheel.
"""

from __future__ import annotations

from .settings import value
from .take_home.mwms_slurm import VERIFIED_KERAS, fix_keras_fit_for_multiworker

VERIFIED = VERIFIED_KERAS  # major.minor: 3.15.1 verified broken without the patch, right with it (2026-11)
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
                          "helpers/take_home/mwms_slurm.py; Keras 2 code runs with tf_keras and TF_USE_LEGACY_KERAS=1")
    return True


def apply() -> bool:
    """Patch Keras's TensorFlow trainer once; returns whether the patch is in place."""
    global _applied
    if _applied:
        return True
    if value(DISABLE_ENV) == "1" or not keras_needs_fix():
        return False
    fix_keras_fit_for_multiworker()  # the take-home text, after the checks above
    _applied = True
    return True
