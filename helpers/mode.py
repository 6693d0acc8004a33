"""Quick, workshop and full mode: the one place that sizes every lesson.

- `quick`: a laptop CPU or CI; small SYNTHETIC data, the whole course in minutes.
- `workshop`: a live class on GPU nodes with real CIFAR-10; each lesson's training is sized to
  take a few minutes on one GPU node (docs/modes-and-data.md tabulates the predicted minutes).
- `full`: the research-size runs (30 epochs of CIFAR-10, ResNet50 on every image): hours.

`COURSE_MODE` picks one; the default, `auto`, picks workshop where a GPU is visible and quick
otherwise (full only when asked), so the same notebook runs unchanged on a laptop, in CI and on a
GPU node. Notebooks read every size from `mode_sizes()`; none branches on the mode.

Two overrides a trainer sets once for a whole class (they reach the lessons and batch jobs):
`COURSE_EPOCHS=N`, the epochs of most lessons' trainings, and `COURSE_MAX_STEPS=N`, at most N steps
an epoch in most lessons (the data stays full size: only how much of it an epoch reads shrinks), a
budget for slow hardware; the tests run workshop and full mode at 50,000 images on a CPU with it.
Lessons that need more keep their least, and lessons with fixed steps of their own keep them:
docs/modes-and-data.md ("Class overrides") lists what each lesson does with both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import CourseError
from .settings import text as setting_text, value

MODE_ENV = "COURSE_MODE"
EPOCHS_ENV = "COURSE_EPOCHS"
MAX_STEPS_ENV = "COURSE_MAX_STEPS"
MODES = ("quick", "workshop", "full")


@dataclass(frozen=True)
class Sizes:
    """Sizes of one run; every notebook and batch script reads these instead of numbers of its own."""

    mode: str
    train_examples: int | None  # None: the whole split
    test_examples: int | None
    epochs: int  # every small-CNN training (lessons 01-04, 08, 09, 11)
    per_replica_batch: int
    max_steps: int | None  # at most this many steps per epoch (None: one pass over the split)
    resnet_epochs: int  # lesson 05 and `--model resnet50`
    resnet_train_examples: int | None
    resnet_test_examples: int | None
    resnet_per_replica_batch: int  # small on purpose: where synchronized batch norm matters
    fault_epochs: int  # lesson 06: a worker is lost at the end of epoch fault_epochs // 2, before saving it
    schedule_epochs: int  # lesson 10: every learning-rate schedule runs this many epochs
    warmup_fraction: float  # lesson 10: the warm-up's share of the run
    tour_steps: int  # lesson 12: training steps of every strategy
    job_model: str  # lesson 08's batch job: "cnn" or "resnet50"

    @property
    def quick(self) -> bool:
        """Quick mode may make its own synthetic data; the others need a prepared data_dir."""
        return self.mode == "quick"

    def steps_per_epoch(self, examples: int, global_batch: int) -> int:
        """Full batches in `examples`, capped by `max_steps`; at least one batch, or a clear error."""
        if examples < global_batch:
            raise CourseError(f"{examples} examples do not fill one global batch of {global_batch}: use more "
                              f"examples (COURSE_DATA_DIR, the mode's sizes) or a smaller batch")
        full = examples // global_batch
        return min(full, self.max_steps) if self.max_steps else full


_SETTINGS = {
    "quick": Sizes("quick", train_examples=2048, test_examples=512, epochs=2, per_replica_batch=32,
                      max_steps=None, resnet_epochs=2, resnet_train_examples=64, resnet_test_examples=32,
                      resnet_per_replica_batch=8, fault_epochs=4, schedule_epochs=4, warmup_fraction=0.25,
                      tour_steps=40, job_model="cnn"),
    "workshop": Sizes("workshop", train_examples=None, test_examples=None, epochs=3, per_replica_batch=128,
                         max_steps=None, resnet_epochs=2, resnet_train_examples=10_000, resnet_test_examples=2_000,
                         resnet_per_replica_batch=16, fault_epochs=4, schedule_epochs=6, warmup_fraction=0.2,
                         tour_steps=200, job_model="resnet50"),
    "full": Sizes("full", train_examples=None, test_examples=None, epochs=30, per_replica_batch=128,
                     max_steps=None, resnet_epochs=30, resnet_train_examples=None, resnet_test_examples=None,
                     resnet_per_replica_batch=16, fault_epochs=30, schedule_epochs=30, warmup_fraction=0.1,
                     tour_steps=400, job_model="resnet50"),
}


def resolve_mode(mode: str | None = None) -> str:
    """The mode asked for (argument, then `COURSE_MODE`), with `auto` resolved."""
    chosen = (mode or value(MODE_ENV) or "auto").strip().lower()
    if chosen == "auto":
        from .gpus import gpu_count_without_tf

        return "workshop" if gpu_count_without_tf() > 0 else "quick"
    if chosen not in MODES:
        raise CourseError(f"{MODE_ENV}={chosen!r} is not a mode: use one of quick, workshop, full, auto")
    return chosen


def _positive(name: str) -> int | None:
    text = setting_text(name)
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise CourseError(f"{name}={text!r} must be a whole number of at least 1 (or unset)")
    return int(text)


def mode_sizes(mode: str | None = None) -> Sizes:
    """The sizes for `mode` (see `resolve_mode`), with the class's overrides applied."""
    chosen = _SETTINGS[resolve_mode(mode)]
    epochs, max_steps = _positive(EPOCHS_ENV), _positive(MAX_STEPS_ENV)
    if epochs:
        chosen = replace(chosen, epochs=epochs, resnet_epochs=epochs, schedule_epochs=epochs,
                         fault_epochs=max(3, epochs))  # lesson 06: kept, saved by all but one, failed in
    if max_steps:
        # lesson 12 keeps quick mode's 40 steps at least: fewer do not show every strategy's loss falling
        chosen = replace(chosen, max_steps=max_steps, tour_steps=max(40, min(chosen.tour_steps, max_steps)))
    return chosen

