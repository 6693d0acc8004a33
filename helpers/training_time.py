"""How long a lesson's training will take here, said before it starts, and what it took, after.

A trainer preparing a class needs the minutes before the class, not after. Each lesson's first
cell prints a prediction from two things: the work its trainings do in the mode's sizes (images
through the small CNN and through ResNet50, in steps of the lesson's per-replica batch), and the
speed of the devices in front of the learner:

- on a CPU, speeds measured on the course's 2-core test machines (the dates are below);
- on GPUs, NVIDIA's published ResNet50 figure (DeepLearningExamples, TensorFlow ResNet50 v1.5,
  one A100, mixed precision + XLA, batch 256: 2375 images/s at 224x224), scaled to CIFAR-10's
  32x32 images. A 32x32 image costs 49x fewer FLOPs than a 224x224 one, but small images leave a
  GPU mostly idle: we count a fifth of that (2375 x 49 / 5 = 23,275 images/s) and a step never
  shorter than a floor of kernel launches (ResNet50 about 25 ms forward and backward, the small
  CNN 3 ms). The small CNN does about 15x fewer multiply-adds per 32x32 image than ResNet50
  (5.6 M against 84 M), so it counts 15x ResNet50's speed. Both assumptions are ours, not measured: the end of each lesson prints what it took,
  so the first run on real hardware corrects them.

The prediction covers the training only; engines starting, TensorFlow tracing the first step
and the plots come on top (quick mode on a CPU is mostly that). `Stopwatch.report()` prints the
lesson's whole time next to the prediction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .data import TRAIN_SIZE as FULL_TRAIN  # where a mode takes the whole split
from .mode import Settings

A100_RESNET50_224 = 2375.0  # images/s, NVIDIA (see above)
SMALL_IMAGE_SPEEDUP = 49 / 5  # 224x224 -> 32x32: 49x fewer FLOPs, a fifth of it realised
# images/s of training on the course's 2-core CPU VM (AMD EPYC, 2026-11-25), measured with
# `python -m helpers.training_time` (float32, 2 logical replicas, per-replica batches 32 and 8):
# 4603 and 63. A VM of the day before ran the same lessons about twice as slowly.
CPU_IMAGES_PER_S = {"cnn": 4600.0, "resnet50": 63.0}
GPU_STEP_FLOOR_S = {"cnn": 0.003, "resnet50": 0.025}


@dataclass(frozen=True)
class Work:
    """Images a lesson trains through one model, in steps of `per_replica_batch` per replica."""

    model: str
    images: int
    per_replica_batch: int


def _epoch(s: Settings, limit: int | None, global_batch: int) -> int:
    """Images of one epoch: whole global batches of the split, capped by COURSE_MAX_STEPS."""
    return s.steps_per_epoch(limit or FULL_TRAIN, global_batch) * global_batch


def lesson_work(lesson: str, s: Settings, replicas: int = 2) -> list[Work]:
    """What lesson `lesson` ("00", "01", ...) trains in the sizes `s`, with `replicas` replicas in all."""
    return _course_work(s, replicas).get(lesson, [])


def _course_work(s: Settings, replicas: int) -> dict[str, list[Work]]:
    """Every lesson's work, by lesson number: the one list of the lessons that train."""
    b, cnn = s.per_replica_batch, (lambda images: Work("cnn", images, s.per_replica_batch))
    epoch = _epoch(s, s.train_examples, b * replicas)
    large = 512 * max(-(-16 // s.schedule_epochs), s.steps_per_epoch(s.train_examples or FULL_TRAIN, 512))
    resnet_epoch = _epoch(s, s.resnet_train_examples, s.resnet_per_replica_batch * replicas)
    return {
        "00": [],  # prepares the data, trains nothing
        "01": [cnn(2 * s.epochs * epoch)],  # N replicas, then one
        "02": [cnn(epoch)],
        "03": [cnn(s.epochs * epoch)],
        "04": [cnn(2 * s.epochs * epoch)],  # one process, then the engines
        "05": [Work("resnet50", 2 * s.resnet_epochs * resnet_epoch, s.resnet_per_replica_batch)],
        "06": [cnn(int((s.fault_epochs + 0.5) * epoch))],  # to the crash in mid-run, then the rest
        "07": [cnn(31 * 8 * 64)],  # STEPS + 1 = 31 steps per configuration, whatever the mode
        "08": [Work(s.job_model, s.epochs * epoch, b)],
        "09": [cnn(2 * 2 * 12 * b * replicas)],  # two pipelines, two epochs of 12 steps
        "10": [Work("cnn", 5 * s.schedule_epochs * large, 32 // replicas)],
        "11": [cnn(5 * s.epochs * epoch)],  # five runs of the whole plan
        "12": [Work("cnn", 6 * s.tour_steps * 64 * replicas, 64)],
        "13": [cnn(64)],
        "14": [cnn(20 * 32 * 4)],
        "15": [cnn(max(3, s.epochs) * epoch)],  # at least 3 epochs: improving ones, then a worse one
        "16": [Work("cnn", min(25, s.steps_per_epoch(s.train_examples or FULL_TRAIN, b)) * b, b)],  # a timed step
        "17": [],  # three runs of 8 steps on random numbers: nothing to speak of
        "18": [],  # check-script's runs: 8 steps of 12 examples through a small dense model, 8 checks
    }


def seconds(work: list[Work], gpus: int, replicas: int) -> float:
    """Predicted training seconds on `gpus` GPUs (0: this CPU, `replicas` logical replicas)."""
    total = 0.0
    for w in work:
        if gpus:
            speed = A100_RESNET50_224 * SMALL_IMAGE_SPEEDUP * (1 if w.model == "resnet50" else 15)
            per_gpu = min(speed, w.per_replica_batch / GPU_STEP_FLOOR_S[w.model])
            total += w.images / (per_gpu * gpus)
        else:
            total += w.images / CPU_IMAGES_PER_S[w.model]  # the replicas share the same cores
    return total


def _minutes(s: float) -> str:
    if s < 0.5:
        return "<1 s"
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


@dataclass
class Stopwatch:
    """The prediction printed at the start of a lesson, and the lesson's time printed at its end."""

    lesson: str
    predicted_s: float
    where: str
    started: float = field(default_factory=time.perf_counter)

    def report(self) -> float:
        took = time.perf_counter() - self.started
        print(f"lesson {self.lesson}: took {_minutes(took)} in all on {self.where}, against "
              f"{_minutes(self.predicted_s)} predicted for its training alone (not start-up, data, queue or evaluation)")
        return took


def time_lesson(lesson: str, s: Settings, replicas: int = 2) -> Stopwatch:
    """Print the mode, the sizes and the predicted training time here; returns the stopwatch."""
    from .gpus import gpu_count_without_tf

    gpus = gpu_count_without_tf()
    work = lesson_work(lesson, s, max(replicas, gpus, 1))
    predicted = seconds(work, gpus, replicas)
    where = f"{gpus} GPU(s), A100-class assumed" if gpus else "this CPU"
    trained = ", ".join(f"{w.images:,} images through {w.model}" for w in work) or "none of the course's models trained"
    print(f"{s.mode} mode: {trained}; predicted training time on {where}: {_minutes(predicted)} "
          f"(training only: not start-up, data preparation, a queue or evaluation; helpers.training_time says how)")
    return Stopwatch(lesson, predicted, where)


def measure(steps: int = 12) -> dict[str, float]:
    """Training images/s of both models on this machine's CPU, 2 logical replicas (the table above)."""
    from . import environment

    environment.local_replicas(2)
    import tensorflow as tf

    from . import lesson
    from .throughput import StepTimer, keras_callback

    strategy = tf.distribute.MirroredStrategy(devices=[d.name for d in tf.config.list_logical_devices("CPU")])
    found = {}
    for model_name, per_replica in (("cnn", 32), ("resnet50", 8)):
        batch = per_replica * strategy.num_replicas_in_sync
        images = tf.random.uniform((batch, 32, 32, 3))
        data = tf.data.Dataset.from_tensors((images, tf.zeros((batch,), tf.int64))).repeat()
        with strategy.scope():
            model = lesson.build_model(model_name)
            lesson.compile_model(model, 0.01)
        timer = StepTimer(batch)
        model.fit(data, epochs=1, steps_per_epoch=steps, callbacks=[keras_callback(timer)], verbose=0)
        found[model_name] = timer.images_per_second
        print(f"{model_name}: {timer.images_per_second:.0f} images/s (batch {batch}, median of {steps - 1} steps)", flush=True)
    return found


def table(gpus: int = 4) -> str:
    """Markdown rows: each lesson's predicted training minutes in workshop and full mode on `gpus` GPUs."""
    from .mode import mode_settings

    rows = ["| lesson | workshop, 1 node of %d A100 (min) | full, same node (min) |" % gpus, "|---|---|---|"]
    for n in sorted(_course_work(mode_settings("full"), gpus)):
        w, f = (seconds(lesson_work(n, mode_settings(m), gpus), gpus, gpus) / 60 for m in ("workshop", "full"))
        rows.append(f"| {n} | {w:.1f} | {f:.1f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import sys

    print(table()) if sys.argv[1:] == ["--table"] else measure()
