"""How long a lesson's training will take here, said before it starts, and what it took, after.

A trainer preparing a class needs the minutes before the class, not after. Each lesson's first
cell prints a prediction from two things: the work its trainings do in the mode's sizes (images
through the small CNN and through ResNet50, in steps of the lesson's per-replica batch), and the
speed of the devices in front of the learner:

- on a CPU, speeds measured on the course's 2-core test machines (the dates are below);
- on GPUs, NVIDIA's published ResNet50 figures (DeepLearningExamples, TensorFlow ResNet50 v1.5,
  one A100 40GB, batch 256, 224x224 images: 909 images/s in TF32 with XLA, 2375 with mixed
  precision and XLA). The lessons train in float32 (TF32 on an A100, TensorFlow's default) without
  XLA, so the base is the TF32 figure without XLA: the same page's time to train 90 epochs on one
  A100 is about 40 h in TF32 with XLA and 47 h without, so 909 x 40 / 47 = 773.6 images/s. It is
  scaled to CIFAR-10's 32x32 images: a 32x32 image costs 49x fewer FLOPs than a 224x224 one, but
  small images leave a GPU mostly idle: we count a fifth of that (773.6 x 49 / 5 = 7,581 images/s)
  and a step never shorter than a floor of kernel launches (ResNet50 about 25 ms forward and
  backward, the small CNN 3 ms). The small CNN does about 15x fewer multiply-adds per 32x32 image
  than ResNet50 (5.6 M against 84 M), so it counts 15x ResNet50's speed. Both assumptions are
  ours, not measured: the end of each lesson prints what it took, so the first run on real
  hardware corrects them.

The lessons that submit a batch job (`JOB_LESSONS`) train in the job, on its GPUs: one task on
each of the lesson's nodes with `COURSE_JOB_GPUS_PER_TASK` GPUs each (one in the class layouts),
not on the kernel's GPUs.

Start-up is its own figure (`startup_seconds`): TensorFlow starting in the kernel (where the lesson's clock
runs then), in each engine (`Engines.setup_multiworker` has them import it one after another, so start-up grows
with the engines) and in each other set of processes a lesson starts (local workers, each step of a job), the
engines' cluster coming up, a job starting once the reservation gives it nodes (its time in the queue is not counted:
it depends on the class), and each training's first step (tracing, on a GPU also cuDNN picking
its kernels). Its figures are measured on the course's CPU machines where they say so, ours
elsewhere. Plots, data preparation and evaluation are in neither figure. A lesson that waits or
times passes by design, whatever the hardware, has a third figure (`timed_reading_seconds`: lesson
16's simulated shared file system and its parsing passes; lesson 06's fixed waits for a lost or late peer). `Stopwatch.report()` prints the lesson's
whole time next to them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .data import TRAIN_SIZE as FULL_TRAIN  # where a mode takes the whole split
from .mode import Sizes

# images/s of ResNet50 at 224x224 on one A100, NVIDIA (see above): (precision, XLA) -> images/s
A100_RESNET50_224 = {("mixed", True): 2375.0, ("tf32", True): 909.0, ("tf32", False): 909.0 * 40 / 47}
LESSON_PRECISION = ("tf32", False)  # what the lessons train in: float32 (TF32 on an A100), no XLA
SMALL_IMAGE_SPEEDUP = 49 / 5  # 224x224 -> 32x32: 49x fewer FLOPs, a fifth of it realised
# images/s of training on the course's 2-core CPU VM (AMD EPYC, 2026-11-25), measured with
# `python -m helpers.training_time` (float32, 2 logical replicas, per-replica batches 32 and 8):
# 4603 and 63. A VM of the day before ran the same lessons about twice as slowly.
CPU_IMAGES_PER_S = {"cnn": 4600.0, "resnet50": 63.0}
GPU_STEP_FLOOR_S = {"cnn": 0.003, "resnet50": 0.025}
JOB_LESSONS = ("08", "11", "16", "17")  # they submit a batch job of one task on each of their nodes
# start-up, seconds: TensorFlow's import measured at 3.1-3.3 s of CPU per process on the course's
# 2-core VM (docs/measured.md), 5 counted for a GPU node's CUDA start (ours); ipyparallel engines
# 6.5 s to ready (measured, docs/platform facts); a job from submission to its tasks running on a
# reserved idle node, 10 s (ours: no queue); a first step, traced, 5 s for the small CNN and 20 s
# for ResNet50 (10-25 s measured on the CPU, tracing is host work).
TF_START_S = 5.0
ENGINES_START_S = 6.5
JOB_START_S = 10.0
FIRST_STEP_S = {"cnn": 5.0, "resnet50": 20.0}
HOROVOD_RUN_S = 22.0  # lesson 13's horovodrun at 2 processes, start to finish (below)
# what each lesson starts, counted from its code: (engine clusters, local worker runs, jobs, first steps); each
# cluster's engines import TensorFlow one after another (`Engines.setup_multiworker`): a start each
LESSON_STARTS = {"00": (0, 0, 0, 0), "01": (0, 0, 0, 2), "02": (0, 1, 0, 2), "03": (1, 0, 0, 2),
                 "04": (1, 0, 0, 2), "05": (0, 0, 0, 2), "06": (4, 0, 0, 3),
                 "08": (0, 0, 1, 1), "09": (0, 0, 0, 2), "10": (0, 0, 0, 6), "11": (0, 0, 8, 8),
                 "12": (2, 0, 0, 3), "13": (1, 0, 0, 1), "14": (1, 0, 0, 3), "15": (1, 0, 0, 2),
                 "16": (0, 0, 2, 1), "17": (0, 0, 2, 3), "18": (0, 8, 0, 8)}  # 16: its jobs read, only the kernel trains
# 16: on Slurm one start a job (a worker on each node, two on one in the run of NODES + 1); without Slurm its runs of NODES
# and NODES + 1 local processes share this machine: `run_starts` each (before its 19th review, one start a run: 20 s at any
# NODES, where the reviewer's lesson took 83 s at NODES = 1, 72 s at 2 and 2 min at 4 under load)
# 11: its 5 jobs start 8 times (each of the 3 warned ones again after its requeue), each a set of workers starting
# TensorFlow and tracing its first step; without Slurm, 8 runs of local workers (was (0, 0, 3, 5) and the kernel: 5 starts)
# 07's grow with its MAX_REPLICAS: a first step for each of its points, a run of local workers for each count above 1
# (`_lesson_07_starts`); before its fifth review's fix a fixed (0, 4, 0, 8) said 65 s at any MAX_REPLICAS
# 13: horovodrun's run counts too where the lesson runs it, built and not refused (`time_lesson`), as measured,
# HOROVOD_RUN_S: its Horovod cell took 22 s in a run of the whole lesson (45 s in all, 2 workers, a load of 6 on the 2
# cores; 2026-11-30), its script alone 24 to 29 s there and 31 to 44 s at a load of 12 to 19 (14.6 s of CPU: each
# process about 6.7 s), 39 s at 4 processes (load 8); each process beyond 2 counted as a TensorFlow start. Counted as
# one TensorFlow start and a first step, 10 s, it was left short (the fifth review measured the lesson at 27 s without
# Horovod, 70 s with it, the load not recorded)
# Its solution 1's two local workers run after the stopwatch, not counted
# processes that start TensorFlow beyond the kernel and LESSON_STARTS' sets: lesson 17's Keras job's second and third
# steps (each `srun` starts it again; without Slurm, each variant's local workers do); not its solution 1's five
# programs, which run after the lesson's time is taken (its stopwatch reports before the exercises, as every lesson's);
# lesson 13's recipe by hand, in a process of its own (its ranks' gradients in TensorFlow's default thread pools);
# lesson 12's second cluster's engines beyond ENGINES_PER_CLUSTER: it starts 2 + PS_WORKERS (4 as shipped: a chief, a
# parameter server and two workers, each a TensorFlow server)
OTHER_TF_STARTS = {"12": 2, "13": 1, "17": 2}
# lessons whose kernel starts no TensorFlow while their clock runs: 03's kernel only drives the engines (its solutions
# import it after the clock's report, as 11's do); 07 (`environment.local_replicas` makes its logical devices) and 13 import it in
# their set-up, before the clock starts
KERNEL_TF_OFF_THE_CLOCK = ("03", "07", "11", "13")
ENGINES_PER_CLUSTER = 2  # every engine lesson's N_ENGINES (WORKERS) as shipped; 03 and 13 pass their own
LESSON_13_BATCH = 16  # notebooks/13_from_horovod.ipynb's BATCH as shipped (the table's); the lesson passes its own
LESSON_07_MAX_REPLICAS = 2  # notebooks/07_scaling_performance.ipynb's MAX_REPLICAS as shipped; the lesson passes its own
# lesson 16's reading, the same on any hardware: its SIMULATED shared file system as shipped (SHARED_MB_S,
# SHARED_LATENCY_MS), a record's bytes as its reader counts them (a tf.train.Example of 3,072 image bytes and
# three numbers: 3,143 bytes on average in its quick-mode files, 2026-11-29), and its parsing's timing, 3 rounds
# of the two ways, each pass at least 1 s
LESSON_16_SHARED = (25.0, 10.0)
LESSON_16_RECORD_BYTES = 3143
LESSON_16_PARSE_TIMING_S = 3 * 2 * 1.0


@dataclass(frozen=True)
class Work:
    """Images a lesson trains through one model, in steps of `per_replica_batch` per replica."""

    model: str
    images: int
    per_replica_batch: int


def _epoch(s: Sizes, limit: int | None, global_batch: int) -> int:
    """Images of one epoch: whole global batches of the split, capped by COURSE_MAX_STEPS."""
    return s.steps_per_epoch(limit or FULL_TRAIN, global_batch) * global_batch


def lesson_work(lesson: str, s: Sizes, replicas: int = 2, batch: int | None = None, model: str = "cnn",
                steps: int = 30, max_replicas: int = LESSON_07_MAX_REPLICAS, horovod: bool = False,
                small: int = 32, factor: int = 16) -> list[Work]:
    """What lesson `lesson` ("00", "01", ...) trains in the sizes `s`, with `replicas` replicas in all; `batch`: the
    per-replica batch a lesson sets itself (lesson 13's BATCH), else its default; `model`, `steps`, `max_replicas`:
    lesson 07's MODEL, STEPS and MAX_REPLICAS; `horovod`: lesson 13 runs Horovod's step too; `small`, `factor`:
    lesson 10's SMALL and FACTOR (its small global batch, and the large one over it). Only that lesson's work
    is computed: another lesson's sizes need not fit these replicas (lesson 05's 64 ResNet images fill no global batch
    of 9 x 8)."""
    work = _course_work(s, replicas, batch, model, steps, max_replicas, horovod, small, factor).get(lesson)
    return work() if work else []


def lesson_07_counts(replicas: int, max_replicas: int = LESSON_07_MAX_REPLICAS) -> tuple[list[int], list[int]]:
    """Lesson 07's points, as its cells 7 and 11 choose them: MirroredStrategy's replica counts and the multi-worker
    runs' worker counts, from 1, 2, 4 and 8 up to its MAX_REPLICAS; MirroredStrategy's stop at the kernel's `replicas`
    devices (2 GPUs at MAX_REPLICAS 4: 1 and 2; the workers 2 and 4), the workers' start at 2."""
    counts = [n for n in (1, 2, 4, 8) if n <= max(1, max_replicas)]
    return [n for n in counts if n <= replicas], counts[1:]


def run_starts(processes: int) -> int:
    """TensorFlow starts counted for `processes` processes started together on one machine: one, and one more for each
    beyond 2 (a 2-core machine starts two at once; each start is 3.1-3.3 s of CPU). As measured on lesson 13's horovodrun
    (HOROVOD_RUN_S at 2 processes, 39 s at 4) and counted so for it and for lesson 16's local runs."""
    return 1 + max(processes - 2, 0)


def _lesson_07_starts(replicas: int, max_replicas: int) -> tuple[int, int, int, int]:
    """Lesson 07's LESSON_STARTS row: a run of local workers for each worker count (its processes start together)
    and a first step for each point, each MirroredStrategy count and each run (its workers trace together)."""
    mirrored, workers = lesson_07_counts(replicas, max_replicas)
    return 0, len(workers), 0, len(mirrored) + len(workers)


def _lesson_15_epoch(s: Sizes, replicas: int) -> int:
    """Images of one of lesson 15's epochs: whole global batches of the training split less the validation set it
    holds out (its cells 11 and 13: whole units of `per_replica` x lcm(replicas, the kernel's CPU_REPLICAS), a fifth
    of the split at most, fewer under COURSE_MAX_STEPS); the kernel's replicas as its first cell sets them on a CPU
    (with GPUs the kernel's are its GPUs: the cut may then differ by a unit)."""
    import math

    train, b = s.train_examples or FULL_TRAIN, s.per_replica_batch
    kernel = replicas - 1 if replicas > 2 else replicas + 1
    unit = b * math.lcm(replicas, kernel)
    at_most = max(1, s.max_steps * b * replicas // unit) if s.max_steps else train
    held_out = max(0, min(train // 5 // unit, at_most)) * unit  # 0 where the lesson raises (no unit fits)
    return s.steps_per_epoch(train - held_out, b * replicas) * b * replicas


def _course_work(s: Sizes, replicas: int, batch: int | None = None, model: str = "cnn",
                 steps: int = 30, max_replicas: int = LESSON_07_MAX_REPLICAS,
                 horovod: bool = False, small: int = 32, factor: int = 16) -> dict[str, Callable[[], list[Work]]]:
    """Every lesson's work, by lesson number: the one list of the lessons that train, each computed when asked for."""
    b, cnn = s.per_replica_batch, (lambda images: Work("cnn", images, s.per_replica_batch))

    def epoch() -> int:
        return _epoch(s, s.train_examples, b * replicas)

    small_10 = -(-small // replicas) * replicas  # lesson 10's SMALL, rounded up to a multiple of the replicas (its cell 9)
    large_10 = small_10 * factor

    def large() -> int:  # lesson 10's epoch: whole large batches, 32 updates at least (its cell 9)
        return large_10 * max(-(-32 // s.schedule_epochs), s.steps_per_epoch(s.train_examples or FULL_TRAIN, large_10))

    def resnet_epoch() -> int:
        return _epoch(s, s.resnet_train_examples, s.resnet_per_replica_batch * replicas)

    batch_13 = batch or LESSON_13_BATCH
    return {
        "00": lambda: [],  # prepares the data, trains nothing
        "01": lambda: [cnn(2 * s.epochs * epoch())],  # N replicas, then one
        "02": lambda: [cnn(epoch())],
        "03": lambda: [cnn(s.epochs * epoch())],
        "04": lambda: [cnn(2 * s.epochs * epoch())],  # one process, then the engines
        "05": lambda: [Work("resnet50", 2 * s.resnet_epochs * resnet_epoch(), s.resnet_per_replica_batch)],
        "06": lambda: [cnn((s.fault_epochs + 1) * epoch())],  # to the crash at the end of epoch E // 2, then from it again
        # STEPS + 1 steps of MODEL for each of its MirroredStrategy replica counts and each of its worker counts
        # (`lesson_07_counts`); solution 1 runs after the stopwatch's report, so it is not counted
        "07": lambda: [Work(model, (steps + 1) * b * sum(sum(c) for c in lesson_07_counts(replicas, max_replicas)), b)],
        "08": lambda: [Work(s.job_model, s.epochs * epoch(), b)],
        "09": lambda: [cnn(2 * 2 * 12 * b * replicas)],  # two pipelines, two epochs of 12 steps
        # the small batch, then 4 runs of the large; not the learning-rate-0 run's W + 1 steps nor the per-step callback
        "10": lambda: [Work("cnn", s.schedule_epochs * large(), small_10 // replicas),
                       Work("cnn", 4 * s.schedule_epochs * large(), large_10 // replicas)],
        "11": lambda: [cnn(5 * s.epochs * epoch())],  # five runs of the whole plan
        "12": lambda: [Work("cnn", 6 * s.tour_steps * 64 * replicas, 64)],
        # the global batch once on the engines, twice in the recipe by hand (each rank's share at Horovod's scaling and at
        # the engines'), once in Horovod's run where it runs (`horovod`); solution 2 runs after the stopwatch's report
        "13": lambda: [Work("cnn", (3 + horovod) * batch_13 * replicas, batch_13)],
        # steps of 32 images: STEPS = 20 rounds of each worker's local and two distributed steps and the first
        # worker's step alone, after 3 first (traced) calls each; the wide CNN's 5.1 M multiply-adds per image
        # counted as the small CNN's 5.6 M; the all-reduces (probes and steps) are not counted
        "14": lambda: [Work("cnn", 32 * (20 * (3 * replicas + 1) + 3 * replicas), 32)],
        "15": lambda: [cnn(max(3, s.epochs) * _lesson_15_epoch(s, replicas))],  # at least 3 epochs: improving, then worse
        # its step timing fits min(TIMED, 24) + 1 steps, TIMED at least 32: 25 in every mode, COURSE_MAX_STEPS or not
        "16": lambda: [Work("cnn", 25 * b, b)],
        "17": lambda: [],  # three runs of 8 steps on random numbers: nothing to speak of
        "18": lambda: [],  # check-script's runs: 8 steps of 12 examples through a small dense model, 8 checks
    }


def gpu_images_per_s(model: str, precision: tuple[str, bool] = LESSON_PRECISION) -> float:
    """Training images/s of `model` on one A100 at 32x32, before the step floor: NVIDIA's ResNet50
    figure for `precision` (the lessons' own by default), scaled as the module docstring says."""
    return A100_RESNET50_224[precision] * SMALL_IMAGE_SPEEDUP * (1 if model == "resnet50" else 15)


def seconds(work: list[Work], gpus: int, replicas: int) -> float:
    """Predicted training seconds on `gpus` GPUs (0: this CPU, `replicas` logical replicas)."""
    total = 0.0
    for w in work:
        if gpus:
            speed = gpu_images_per_s(w.model)
            per_gpu = min(speed, w.per_replica_batch / GPU_STEP_FLOOR_S[w.model])
            total += w.images / (per_gpu * gpus)
        else:
            total += w.images / CPU_IMAGES_PER_S[w.model]  # the replicas share the same cores
    return total


def training_gpus(lesson: str, kernel_gpus: int, nodes: int, per_task: int | None = None) -> int:
    """GPUs a lesson trains on: a job lesson's job has one task on each of `nodes` nodes with
    `per_task` GPUs each (`COURSE_JOB_GPUS_PER_TASK`; 1 where the kernel has GPUs, the class layouts'
    value); every other lesson trains on the kernel's `kernel_gpus`."""
    if lesson not in JOB_LESSONS:
        return kernel_gpus
    if per_task is None:
        from .slurm.submit import GPUS_ENV
        from .settings import text

        raw = text(GPUS_ENV).lower()
        per_task = int(raw) if raw.isdigit() else (1 if kernel_gpus else 0)
    return per_task * nodes


# lesson 06 waits by design: the heartbeats' report of worker 1's death (up to their 10 s timeout), the hung run (worker
# 1 asleep twice its TIMEOUT_S, 3 s) and the late run (worker 1 LATE_S, 30 s, late); its cell 45's figures
LESSON_06_HEARTBEAT_S, LESSON_06_TIMEOUT_S, LESSON_06_LATE_S = 10.0, 3.0, 30.0
WAIT_NAMES = {"06": "fixed waits", "16": "timed reading"}  # what a lesson's third figure is called where it prints it


def timed_reading_seconds(lesson: str, s: Sizes) -> float:
    """Seconds a lesson waits or times by design, on any hardware: lesson 16's simulated waits (three plain
    epochs and the cache's first of TIMED batches, the pass after its cache's files are removed, and the staging's
    one pass over the split, each batch 10 ms plus its bytes at 25 MB/s) and its parsing's timing passes; 0 for
    every other lesson. Reading the files (the workers' passes, the epochs' own parsing) is not counted: that
    depends on the machine. Lesson 06's fixed waits (LESSON_06_*): the heartbeats', the hung and the late runs'.
    """
    if lesson == "06":
        return LESSON_06_HEARTBEAT_S + 2 * LESSON_06_TIMEOUT_S + LESSON_06_LATE_S
    if lesson != "16":
        return 0.0
    split = s.train_examples or FULL_TRAIN
    batch = s.per_replica_batch
    timed = max(s.steps_per_epoch(split, batch), 32)  # the notebook's TIMED
    batches, records = 5 * timed + -(-split // batch), 5 * timed * batch + split
    mb_s, latency_ms = LESSON_16_SHARED
    return batches * latency_ms / 1000 + records * LESSON_16_RECORD_BYTES / (mb_s * 1e6) + LESSON_16_PARSE_TIMING_S


def startup_seconds(lesson: str, s: Sizes, gpus: int, slurm: bool = True, horovod: bool = False, replicas: int = 2,
                    max_replicas: int = LESSON_07_MAX_REPLICAS, engines_each: int = ENGINES_PER_CLUSTER,
                    nodes: int = 2) -> float:
    """Predicted start-up seconds of a lesson, beside its training: TensorFlow in the kernel, each engine
    (and its cluster coming up), run of local workers, job and other process it starts, and each training's first step.
    `slurm` False: the lesson runs its jobs' tasks as local processes (no job to start; lesson 16 does). `horovod`:
    lesson 13 also runs Horovod's step (where it is built and not refused): horovodrun's run, as measured.
    `replicas`, `max_replicas`: lesson 07's kernel replicas and MAX_REPLICAS, which decide its points. `engines_each`:
    the engines in each of the lesson's clusters, each a TensorFlow start of its own. `nodes`: lesson 16's NODES, its
    runs of NODES and NODES + 1 workers (`run_starts` each where they are local processes)."""
    starts = _lesson_07_starts(replicas, max_replicas) if lesson == "07" else LESSON_STARTS.get(lesson, (0, 0, 0, 0))
    engines, workers, jobs, first_steps = starts
    horovodrun = 0.0
    if horovod and lesson == "13":  # horovodrun's run as measured, each of its processes beyond 2 a TensorFlow start
        horovodrun = HOROVOD_RUN_S + TF_START_S * (run_starts(engines_each) - 1)
    if not slurm:  # each job's tasks a run of local processes; lesson 16's of NODES and NODES + 1 counted as such
        workers, jobs = workers + (run_starts(nodes) + run_starts(nodes + 1) if lesson == "16" else jobs), 0
    kernel = 0 if lesson in KERNEL_TF_OFF_THE_CLOCK else 1
    tf_starts = kernel + engines * engines_each + workers + jobs + OTHER_TF_STARTS.get(lesson, 0)
    models = {w.model for w in lesson_work(lesson, s, max(gpus, replicas))} or {"cnn"}
    first = FIRST_STEP_S["resnet50" if "resnet50" in models else "cnn"]
    return (TF_START_S * tf_starts + ENGINES_START_S * engines + JOB_START_S * jobs + first * first_steps
            + horovodrun)


def _horovod_runs(n: int) -> bool:
    """Whether lesson 13 runs Horovod's step here in `n` processes: built (`make horovod` has run) and not refused
    (`horovod_env.refusal`: a login node, or classmates sharing the node), as its Horovod cell decides."""
    from .horovod_env import refusal, site_dir

    return site_dir() is not None and refusal(n) is None


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
    startup_s: float = 0.0
    reading_s: float = 0.0  # timed_reading_seconds: what the lesson waits or times by design
    started: float = field(default_factory=time.perf_counter)
    took: float | None = None  # seconds, set by report()

    def report(self) -> None:
        """Prints the lesson's time and keeps it in `took`. Returns nothing: a lesson's last cell shows the line
        alone, also where a trailing `;` does not hide a value (nbval keeps no input history, which IPython reads
        to honour it)."""
        took = self.took = time.perf_counter() - self.started
        reading = f", {_minutes(self.reading_s)} for its {WAIT_NAMES[self.lesson]}" if self.reading_s else ""
        print(f"lesson {self.lesson}: took {_minutes(took)} in all on {self.where}, against "
              f"{_minutes(self.predicted_s)} predicted for its training{reading} and {_minutes(self.startup_s)} for its "
              "start-up (not data, a queue or evaluation)")


def time_lesson(lesson: str, s: Sizes, replicas: int = 2, batch: int | None = None, slurm: bool = True,
                model: str = "cnn", steps: int = 30, max_replicas: int = LESSON_07_MAX_REPLICAS,
                engines: int = ENGINES_PER_CLUSTER, small: int = 32, factor: int = 16) -> Stopwatch:
    """Print the mode, the sizes and the predicted training time here; returns the stopwatch. `batch`: the
    per-replica batch the lesson sets itself, where it does (lesson 13's BATCH); `slurm`: False where a job
    lesson runs its jobs' tasks as local processes (lesson 16 says); `model`, `steps`, `max_replicas`: lesson 07's
    MODEL, STEPS and MAX_REPLICAS; `engines`: the engines in each cluster the lesson starts (its N_ENGINES); `small`,
    `factor`: lesson 10's SMALL and FACTOR."""
    from .gpus import gpu_count_without_tf

    kernel_gpus = gpu_count_without_tf()
    gpus = training_gpus(lesson, kernel_gpus, replicas)
    devices = max(replicas, gpus, 1)
    horovod = lesson == "13" and _horovod_runs(replicas)
    work = lesson_work(lesson, s, devices, batch, model, steps, max_replicas, horovod, small, factor)
    predicted = seconds(work, gpus, replicas)
    startup = startup_seconds(lesson, s, gpus, slurm, horovod, devices, max_replicas, engines, nodes=replicas)
    reading = timed_reading_seconds(lesson, s)
    where = f"{gpus} GPU(s), A100-class assumed" if gpus else "this CPU"
    if lesson in JOB_LESSONS and gpus:
        where += f" (the job's: {gpus // replicas} on each of {replicas} nodes)"
    elif lesson in JOB_LESSONS:  # the job's processes share this CPU: each trains slower than one alone
        where += ", at one process's rate"
    trained = ", ".join(f"{w.images:,} images through {w.model}" for w in work) or "none of the course's models trained"
    timed = f", {WAIT_NAMES[lesson]} {_minutes(reading)}" if reading else ""
    print(f"{s.mode} mode: {trained}; predicted on {where}: training {_minutes(predicted)}{timed}, start-up "
          f"{_minutes(startup)} (not data preparation, a queue or evaluation; helpers.training_time says how)")
    return Stopwatch(lesson, predicted, where, startup, reading_s=reading)


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


def predicted_minutes(lesson: str, mode: str, gpus: int = 4, nodes: int = 2) -> tuple[float, float]:
    """(training, start-up) minutes of `lesson` in `mode` for a kernel on `gpus` GPUs; a job lesson
    trains on its job's GPUs, one on each of `nodes` nodes."""
    from .mode import mode_sizes

    s = mode_sizes(mode)
    on = training_gpus(lesson, gpus, nodes, 1 if gpus else 0)
    replicas = (on if lesson in JOB_LESSONS else gpus) or 2  # on a CPU: the lessons' 2 logical replicas
    return seconds(lesson_work(lesson, s, replicas), on, replicas) / 60, startup_seconds(lesson, s, on, replicas=replicas) / 60


def table(gpus: int = 4) -> str:
    """Markdown rows: each lesson's predicted training minutes in workshop and full mode on `gpus` GPUs
    (a job lesson on its job's, one GPU on each of 2 nodes), and its workshop start-up."""
    from .mode import mode_sizes

    rows = [f"| lesson | workshop, 1 node of {gpus} A100 (min) | start-up (min) | full, same node (min) |",
            "|---|---|---|---|"]
    for n in sorted(_course_work(mode_sizes("full"), gpus)):
        (w, up), (f, _) = predicted_minutes(n, "workshop", gpus), predicted_minutes(n, "full", gpus)
        rows.append(f"| {n} | {w:.1f} | {up:.1f} | {f:.1f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import sys

    print(table()) if sys.argv[1:] == ["--table"] else measure()
