"""Quick mode and full mode: the one switch that sizes every lesson.

`COURSE_MODE=quick` runs every notebook on a laptop CPU in minutes (small synthetic data,
few steps); `COURSE_MODE=full` trains on real CIFAR-10 with full epochs. The default,
`auto`, picks full where a GPU is visible and quick otherwise, so the same notebook runs
unchanged on a laptop, in CI and on a GPU node.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import CourseError

MODE_ENV = "COURSE_MODE"
MODES = ("quick", "full")


@dataclass(frozen=True)
class Settings:
    """Sizes of one run; every notebook reads these instead of hard-coding numbers."""

    mode: str
    train_examples: int | None  # None: the whole split
    test_examples: int | None
    epochs: int
    per_replica_batch: int
    steps_per_epoch: int | None  # None: one pass over the (possibly limited) split
    resnet_epochs: int
    resnet_train_examples: int | None
    resnet_test_examples: int | None
    resnet_per_replica_batch: int  # small on purpose: where synchronized batch norm matters

    @property
    def quick(self) -> bool:
        return self.mode == "quick"


_SETTINGS = {
    "quick": Settings("quick", train_examples=2048, test_examples=512, epochs=2,
                      per_replica_batch=32, steps_per_epoch=None,
                      resnet_epochs=2, resnet_train_examples=64, resnet_test_examples=32,
                      resnet_per_replica_batch=8),
    "full": Settings("full", train_examples=None, test_examples=None, epochs=30,
                     per_replica_batch=128, steps_per_epoch=None,
                     resnet_epochs=30, resnet_train_examples=None, resnet_test_examples=None,
                     resnet_per_replica_batch=16),
}


def resolve_mode(mode: str | None = None) -> str:
    """The mode asked for (argument, then `COURSE_MODE`), with `auto` resolved."""
    chosen = (mode or os.environ.get(MODE_ENV) or "auto").strip().lower()
    if chosen == "auto":
        from .environment import gpu_count_without_tf

        return "full" if gpu_count_without_tf() > 0 else "quick"
    if chosen not in MODES:
        raise CourseError(f"{MODE_ENV}={chosen!r} is not a mode: use one of quick, full, auto")
    return chosen


def settings(mode: str | None = None) -> Settings:
    """The sizes for `mode` (see `resolve_mode`)."""
    return _SETTINGS[resolve_mode(mode)]
