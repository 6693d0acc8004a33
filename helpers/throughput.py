"""Step time and images/s, in a Keras callback or around a custom loop.

The first step of a `tf.function` includes tracing (10-25 s for ResNet50 on CPU) and is
reported apart; throughput is the median over the remaining steps, which ignores the odd
slow step of a busy shared node.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field


@dataclass
class StepTimer:
    """Collects wall-clock step durations; `images_per_step` is the global batch."""

    images_per_step: int
    durations: list[float] = field(default_factory=list)
    _started: float | None = None

    def start(self) -> None:
        self._started = time.perf_counter()

    def stop(self) -> float:
        if self._started is None:
            raise RuntimeError("StepTimer.stop() without start()")
        elapsed = time.perf_counter() - self._started
        self.durations.append(elapsed)
        self._started = None
        return elapsed

    @property
    def first_step(self) -> float | None:
        return self.durations[0] if self.durations else None

    @property
    def median_step(self) -> float | None:
        steady = self.durations[1:] or self.durations
        return statistics.median(steady) if steady else None

    @property
    def images_per_second(self) -> float | None:
        median = self.median_step
        return self.images_per_step / median if median else None

    def rate_text(self) -> str:
        """The rate over the steps after the first, or n/a: a run of one step (COURSE_EPOCHS=1
        COURSE_MAX_STEPS=1) timed only its tracing step, which `median_step` falls back to (for the
        lessons that need a figure either way), and that step's rate says nothing of a step's speed."""
        if len(self.durations) < 2:
            return "images/s and median step n/a (one step)"
        return f"{self.images_per_second:7.0f} images/s, median step {self.median_step * 1000:5.0f} ms"

    def summary(self) -> dict:
        return {"steps": len(self.durations), "first_step_s": self.first_step,
                "median_step_s": self.median_step, "images_per_s": self.images_per_second,
                "global_batch": self.images_per_step}


def keras_callback(timer: StepTimer):
    """A Keras callback that times every training batch into `timer`.

    With `steps_per_execution=k` Keras calls it once per k steps; divide accordingly.
    """
    import keras

    class ThroughputCallback(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            timer.start()

        def on_train_batch_end(self, batch, logs=None):
            timer.stop()

    return ThroughputCallback()
