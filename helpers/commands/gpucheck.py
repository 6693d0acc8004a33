"""`make gpucheck`: the smoke run for the first real GPU node, written as JSON a centre sends back.

The course has never run on a GPU (no GPU with TensorFlow is reachable where it is built), so the
first GPU node it meets is where the untested half of it runs first. This is one command, about
ten minutes on a 4-GPU node, that tries each GPU path once and records what happened:

- `build`: the TensorFlow build (CUDA and cuDNN versions), the GPUs TensorFlow sees against the
  GPUs the node gave (a CPU build on a GPU node is the most common mistake);
- `allreduce-node`: NCCL all-reduce over the node's GPUs in one process, with the transport NCCL
  chose (from `NCCL_DEBUG=INFO`);
- `allreduce-tasks`: the same between two processes, one GPU each (MultiWorkerMirroredStrategy);
- `layout-gpu`: the GPU-per-learner layout (`COURSE_CLASS_LAYOUT=gpu`) on one GPU: a kernel and two
  worker processes share it, each with its memory cap (`gpus.plan_for_kernel`, `plan_for_local_worker`),
  the workers' all-reduce with the collectives the course chooses there (RING: `strategy.collective_for_this_process`);
- `allreduce-nodes`: NCCL between two nodes, one task and one GPU on each (`srun --nodes=2`, as the
  lesson jobs run), when the job was given two nodes (`sbatch --nodes=2 slurm/gpucheck.sbatch`);
- `resnet50-mixed`: a few ResNet50 steps with the `mixed_float16` policy on one GPU, and its peak memory;
- `nested-job`: a job submitted from inside this job, as lessons 08, 11, 16 and 17 do from a
  learner's server, with the course's clean environment and GPU request;
- `lessons`: lessons 01, 04, 05, 07 and 13 in workshop mode, each one's minutes against the course's
  prediction, and the peak GPU memory of every process (from `nvidia-smi`).

Every step runs in a fresh process with a deadline, its cap (`STEP_CAPS_S`, the one place for them):
a hang is a failed step, not a stuck check. The job's time limit is the caps added up with a margin
(`time_limit_s`, printed at the start; slurm/gpucheck.sbatch asks for at least that, tested). The
JSON is written (whole, `helpers.atomic`) before and after every step: a run killed anywhere, even
by the job's time limit, leaves every step finished before it, the step it was in marked as not
finished, and the rest marked not reached.
On a machine without GPUs the GPU steps are skipped with the reason, and the JSON still
validates (`validate`): the smoke run itself is tested where it is built. docs/measured.md's
"Verified on" table is generated from the files centres send back (`docs/bench/gpucheck-*.json`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..settings import text as setting_text

SCHEMA = "tf-hpc-course/gpucheck/2"
STATUSES = ("ok", "failed", "skipped")
STEPS = ("build", "allreduce-node", "allreduce-tasks", "layout-gpu", "allreduce-nodes", "resnet50-mixed",
         "nested-job", "lessons")
SCHEMA_STEPS = {"tf-hpc-course/gpucheck/1": ("build", "allreduce-node", "allreduce-tasks", "resnet50-mixed",
                                             "nested-job", "lessons"),  # files sent back before 2026-11-29
                SCHEMA: STEPS}
# Each step's cap in seconds, the one place for them: the step is killed there (`lessons`: each lesson).
# The nested job: 60 s for sbatch, up to 120 s waiting for it, 30 s to cancel it.
STEP_CAPS_S = {"build": 180, "allreduce-node": 300, "allreduce-tasks": 300, "layout-gpu": 300,
               "allreduce-nodes": 300, "resnet50-mixed": 600, "nested-job": 240, "lessons": 600}
TIME_MARGIN = 0.2  # the job's time limit: the caps added up, 20 % more,
TIME_OVERHEAD_S = 300  # and 5 minutes for the job's start, make's install check and the machine's probe
NOT_REACHED = "not reached: the run ended before this step"
LINE = "GPUCHECK "  # what a step's fresh process prints: one JSON object
DEFAULT_LESSONS = ("01", "04", "05", "07", "13")  # 13: its gaps to Horovod's recipe on a GPU, which its proof does not
# yet hold to a bound (measured on CPUs only: it prints them NOT CHECKED); the executed copy sent back has them
NCCL_TRANSPORT = re.compile(r"via (P2P/\w+|SHM|NET/\w+|CollNet/\w+)")


def caps_for(step_timeout: float | None = None) -> dict[str, float]:
    """Every step's cap: `STEP_CAPS_S`, or `step_timeout` for each (a shorter run, e.g. in tests)."""
    return dict(STEP_CAPS_S) if step_timeout is None else {name: float(step_timeout) for name in STEPS}


def time_limit_s(lessons: int, caps: dict[str, float] | None = None) -> int:
    """Seconds a job running every step to its cap needs: the caps added up (the lessons' cap once per
    lesson), `TIME_MARGIN` more and `TIME_OVERHEAD_S`, rounded up to a whole minute."""
    caps = caps or STEP_CAPS_S
    total = sum(cap for name, cap in caps.items() if name != "lessons") + caps["lessons"] * lessons
    return 60 * math.ceil((total * (1 + TIME_MARGIN) + TIME_OVERHEAD_S) / 60)


def time_limit_text(lessons: int, caps: dict[str, float] | None = None) -> str:
    """The arithmetic of `time_limit_s`, as the run prints it first."""
    caps = caps or STEP_CAPS_S
    parts = " + ".join(f"{name} {caps[name]:.0f}" for name in STEPS if name != "lessons")
    limit = time_limit_s(lessons, caps)
    return (f"step caps: {parts} + lessons {lessons} x {caps['lessons']:.0f} s, +{TIME_MARGIN:.0%} and "
            f"{TIME_OVERHEAD_S} s: a time limit of {limit // 60} min ({slurm_time(limit)})")


def slurm_time(seconds: int) -> str:
    """`seconds` as Slurm's HH:MM:SS."""
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def parse_slurm_time(text: str) -> int | None:
    """Seconds of a Slurm time limit (`D-HH:MM:SS`, `HH:MM:SS`, `MM:SS`, `MM`), None for UNLIMITED or junk."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match:
        return None
    days, a, b, c = (int(g) if g else None for g in match.groups())
    if match.group(1) is not None or c is not None:  # D-HH[:MM[:SS]] or HH:MM:SS
        return (days or 0) * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    return a * 60 + (b or 0)  # MM or MM:SS


# TensorFlow names each library it could not open in a debug line (VLOG(1) in 2.21's dso_loader) and sums up in a
# WARNING; the steps run at TF_CPP_MIN_LOG_LEVEL=2, so their log shows neither: this command shows both
SHOW_GPU_LIBRARIES = ("TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_MAX_VLOG_LEVEL=1 python -c "
                      "\"import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))\"")


# ------------------------------------------------------------------ what runs in a step's own process
def _in_step_build() -> dict:
    from ..gpus import visible_gpus
    from ..host import import_tensorflow

    tf = import_tensorflow()
    info = dict(tf.sysconfig.get_build_info())
    seen = len(tf.config.list_physical_devices("GPU"))
    on_node = os.environ.get("SLURM_GPUS_ON_NODE", "")
    allocated = int(on_node) if on_node.isdigit() else len(visible_gpus())
    figures = {"tensorflow": tf.__version__, "cuda_build": bool(info.get("is_cuda_build")),
               "cuda": info.get("cuda_version"), "cudnn": info.get("cudnn_version"),
               "gpus_seen": seen, "gpus_allocated": allocated}
    if allocated and seen < allocated:
        why = ("a CPU build of TensorFlow (tensorflow-cpu): make install EXTRA=gpu" if not figures["cuda_build"]
               else f"a CUDA build that cannot open them: CUDA libraries missing or mismatched (to see which, on the "
                    f"GPU node: {SHOW_GPU_LIBRARIES})")
        return {"status": "failed", "reason": f"TensorFlow sees {seen} of the {allocated} GPU(s) given: {why}",
                "figures": figures}
    return {"status": "ok", "figures": figures}


def _in_step_resnet(steps: int = 12, batch: int = 256) -> dict:
    from ..host import import_tensorflow

    tf = import_tensorflow()
    if not tf.config.list_physical_devices("GPU"):
        return {"status": "skipped", "reason": "TensorFlow sees no GPU: mixed_float16 is a GPU check"}
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    model.compile(keras.optimizers.SGD(0.1, momentum=0.9), "sparse_categorical_crossentropy")
    data = tf.data.Dataset.from_tensors((tf.random.uniform((batch, 32, 32, 3)),
                                         tf.zeros((batch,), tf.int64))).repeat()
    times: list[float] = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.began = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.began)

    history = model.fit(data, steps_per_epoch=steps, epochs=1, callbacks=[Timer()], verbose=0)
    step = sorted(times[2:])[len(times[2:]) // 2]
    peak = tf.config.experimental.get_memory_info("GPU:0")["peak"]
    loss = history.history["loss"][-1]
    figures = {"batch": batch, "seconds_per_step": step, "images_per_s": batch / step,
               "first_step_s": times[0], "peak_gpu_mib": peak / 2**20, "loss": loss,
               "jit_compile": getattr(model, "jit_compile", None)}
    if not loss == loss:  # NaN: the loss scale did not keep float16 in range
        return {"status": "failed", "reason": "the loss is NaN under mixed_float16", "figures": figures}
    return {"status": "ok", "figures": figures}


LAYOUT_KERNEL_HOLDS_MIB = 256  # what the learner's kernel holds on the GPU while its workers run


def _in_step_layout_kernel(cap: float) -> dict:
    """A learner's kernel in the gpu layout (a server job of 2 tasks) on this process's first GPU: it
    takes its share, holds some memory, and starts 2 workers as the lessons do (`run_local_workers`)."""
    from ..gpus import GPU_MEMORY_ENV, apply, gpu_memory_mib, plan_for_kernel
    from ..host import import_tensorflow
    from ..local_workers import run_local_workers

    os.environ["COURSE_CLASS_LAYOUT"] = "gpu"
    kernel = apply(plan_for_kernel({**os.environ, "SLURM_NTASKS": "2"}))  # a learner's server: 2 tasks
    tf = import_tensorflow()
    seen = len(tf.config.list_physical_devices("GPU"))
    if seen:
        with tf.device("/GPU:0"):
            held = tf.zeros([LAYOUT_KERNEL_HOLDS_MIB * 2**18])  # float32: 256 MiB the kernel keeps
        held.numpy()
    outcomes = run_local_workers(["-m", "helpers.commands.gpucheck", "--step", "layout-gpu-worker"], 2,
                                 deadline_s=max(30.0, cap - 30))
    workers = [json.loads(line[len(LINE):]) for o in outcomes for line in o.output.splitlines() if line.startswith(LINE)]
    failed = [o for o in outcomes if o.returncode != 0]
    figures = {"gpu_mib": gpu_memory_mib(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
               "tensorflow_gpus_seen": seen, "kernel_memory_mib": int(setting_text(GPU_MEMORY_ENV) or 0),
               "kernel_plan": kernel.describe(), "workers": sorted(workers, key=lambda w: w.get("rank", 0))}
    if failed:
        tail = (failed[0].output.strip().splitlines() or ["no output"])[-1][:300]
        return {"status": "failed", "reason": f"worker {failed[0].rank}: {failed[0].killed_because or failed[0].returncode}: "
                                              f"{tail}", "figures": figures}
    return layout_verdict(figures)


def layout_verdict(figures: dict) -> dict:
    """What the gpu layout's run must show: every worker RING, every process a memory cap, the caps
    within 90 % of the GPU; said plainly when TensorFlow saw no GPU (the decisions alone were checked)."""
    from ..gpus import SHARED_FRACTION

    workers, problems = figures["workers"], []
    if len(workers) != 2:
        problems.append(f"{len(workers)} of 2 workers reported")
    problems += [f"worker {w['rank']} chose {w['communication']}, not RING" for w in workers if w["communication"] != "RING"]
    caps = [figures["kernel_memory_mib"], *(w["memory_mib"] for w in workers)]
    if not all(caps):
        problems.append(f"a process without a memory cap: {caps} MiB")
    budget = int((figures["gpu_mib"] or 0) * SHARED_FRACTION)
    if figures["gpu_mib"] and sum(caps) > budget:
        problems.append(f"the caps add up to {sum(caps)} MiB, above 90 % of the GPU ({budget} MiB)")
    if problems:
        return {"status": "failed", "reason": "; ".join(problems), "figures": figures}
    seen = figures["tensorflow_gpus_seen"] and all(w["tensorflow_gpus_seen"] for w in workers)
    return {"status": "ok", "figures": figures,
            "reason": "" if seen else "TensorFlow saw no GPU: the shares, caps and RING were checked, nothing ran on a GPU"}


def _in_step_layout_worker() -> dict:
    """One of the gpu layout's workers: its environment's cap and growth, the collectives the course
    chooses for it, an all-reduce timed, and what TensorFlow made of its GPU."""
    from ..allreduce_probe import allreduce_seconds
    from ..gpus import GPU_MEMORY_ENV, GROWTH_ENV
    from ..strategy import collective_for_this_process, make_strategy, worker_gpus

    strategy = make_strategy("multiworker", timeout_seconds=60)
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    limit = (tf.config.get_logical_device_configuration(gpus[0]) or [None])[0] if gpus else None
    seconds = allreduce_seconds(strategy, 1_000_000)
    return {"rank": int(strategy.cluster_resolver.task_id), "memory_mib": int(setting_text(GPU_MEMORY_ENV) or 0),
            "growth": os.environ.get(GROWTH_ENV), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "communication": collective_for_this_process(gpus=worker_gpus(strategy.cluster_resolver)),
            "tensorflow_gpus_seen": len(gpus), "tensorflow_memory_limit_mib": getattr(limit, "memory_limit", None),
            "allreduce_4mb_s": seconds,
            "peak_gpu_mib": tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20 if gpus else None}


def step_main(name: str, cap: float) -> None:
    """The body of one step's fresh process: prints its result as one GPUCHECK line."""
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # the node's other processes need memory too
    result = {"build": _in_step_build, "resnet50-mixed": _in_step_resnet, "layout-gpu-worker": _in_step_layout_worker,
              "layout-gpu": lambda: _in_step_layout_kernel(cap)}[name]()
    print(LINE + json.dumps(result), flush=True)


# ------------------------------------------------------------------ running steps from the parent
def _run(command: list[str], timeout: float, env: dict | None = None) -> tuple[int | None, str, str]:
    """Exit status (None: killed at the deadline), stdout and stderr of a command in a session of its own."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # a TensorFlow stuck in a collective ignores SIGTERM
        out, err = proc.communicate()
        return None, out, err


def _fresh_step(name: str, timeout: float, env: dict | None = None) -> dict:
    return step_process([sys.executable, "-m", "helpers.commands.gpucheck", "--step", name, "--step-timeout",
                         str(timeout)], timeout, env)


def step_process(command: list[str], timeout: float, env: dict | None = None) -> dict:
    """A step run as `command` in a session of its own, killed at its cap `timeout`: its result is the
    last GPUCHECK line it printed; killed at the cap, or failing, is a failed step that says so."""
    code, out, err = _run(command, timeout, env)
    found = [json.loads(line[len(LINE):]) for line in out.splitlines() if line.startswith(LINE)]
    if code is None:
        return {"status": "failed", "reason": f"no result within {timeout:.0f} s: killed at its cap"}
    if code != 0 or not found:
        tail = (err.strip().splitlines() or ["no output"])[-1][:300]
        return {"status": "failed", "reason": f"exit status {code}: {tail}"}
    return found[-1]


def _gpus_seen(results: dict) -> int:
    return int(results.get("build", {}).get("figures", {}).get("gpus_seen", 0))


def step_allreduce_node(results: dict, timeout: float) -> dict:
    gpus = _gpus_seen(results)
    if gpus < 2:
        return {"status": "skipped", "reason": f"TensorFlow sees {gpus} GPU(s): an all-reduce within a node needs 2 or more"}
    code, out, err = _run([sys.executable, "-m", "helpers.allreduce_probe", "--devices", str(gpus), "--sizes-mb", "4", "94"],
                          timeout, {"NCCL_DEBUG": "INFO"})
    return _allreduce_result(code, out, err, timeout, gpus)


def step_allreduce_tasks(results: dict, timeout: float) -> dict:
    gpus = _gpus_seen(results)
    if gpus < 2:
        return {"status": "skipped", "reason": f"TensorFlow sees {gpus} GPU(s): two tasks with a GPU each need 2"}
    from ..local_workers import run_local_workers

    outcomes = run_local_workers(["-m", "helpers.allreduce_probe", "--sizes-mb", "4", "94"], 2, deadline_s=timeout,
                                 env={**os.environ, "NCCL_DEBUG": "INFO"})
    failed = [o for o in outcomes if o.returncode != 0]
    if failed:
        return {"status": "failed", "reason": f"rank {failed[0].rank}: {failed[0].killed_because or failed[0].returncode}"}
    return _allreduce_result(0, "".join(o.output for o in outcomes), "".join(o.output for o in outcomes), timeout, 2)


def step_layout_gpu(results: dict, timeout: float) -> dict:
    """The GPU-per-learner layout on the first GPU this job was given (whether or not TensorFlow can use it)."""
    from ..gpus import visible_gpus

    given = visible_gpus()
    if not given:
        return {"status": "skipped", "reason": "no GPU given to this job: the gpu layout shares one"}
    return _fresh_step("layout-gpu", timeout, {"CUDA_VISIBLE_DEVICES": given[0], "COURSE_CLASS_LAYOUT": "gpu"})


def job_nodes(environ: dict | None = None) -> int:
    """Nodes of the Slurm job this runs in (0 outside one)."""
    env = os.environ if environ is None else environ
    raw = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or ""
    return int(raw) if raw.isdigit() and env.get("SLURM_JOB_ID") else 0


def allreduce_nodes_command(timeout: float, gpus_given: bool) -> list[str]:
    """The 2-node step: one task on each of two of this job's nodes, one GPU each (as the lesson jobs
    run), the probe's all-reduce between them; Slurm ends the step at the cap too."""
    return ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--export=ALL", "--kill-on-bad-exit=1",
            f"--time={max(1, math.ceil(timeout / 60))}", *(["--gpus-per-task=1"] if gpus_given else []),
            sys.executable, "-m", "helpers.allreduce_probe", "--sizes-mb", "4", "94"]


def step_allreduce_nodes(results: dict, timeout: float) -> dict:
    """NCCL (or what the course chooses) between two nodes, when the job was given two."""
    import shutil

    from ..gpus import visible_gpus

    nodes = job_nodes()
    if nodes < 2 or shutil.which("srun") is None:
        return {"status": "skipped", "reason": f"this job has {nodes} node(s): give it two for NCCL between nodes "
                                               "(sbatch --nodes=2 slurm/gpucheck.sbatch)"}
    command = allreduce_nodes_command(timeout, bool(visible_gpus()))
    code, out, err = _run(command, timeout, {"NCCL_DEBUG": "INFO"})
    result = _allreduce_result(code, out, err + out, timeout, 2)
    hosts = sorted({json.loads(line[len("ALLREDUCE "):])["host"] for line in out.splitlines()
                    if line.startswith("ALLREDUCE ")})
    result.setdefault("figures", {}).update({"command": " ".join(command[:8]), "hosts": hosts})
    if result["status"] == "ok" and len(hosts) != 2:
        return {**result, "status": "failed", "reason": f"the two tasks ran on {hosts}, not two nodes"}
    return result


def _allreduce_result(code: int | None, out: str, err: str, timeout: float, devices: int) -> dict:
    from ..allreduce_probe import parse

    if code is None:
        return {"status": "failed", "reason": f"no result within {timeout:.0f} s: killed"}
    times = parse(out)
    if code != 0 or not times:
        return {"status": "failed", "reason": f"exit status {code}: {(err.strip().splitlines() or ['no output'])[-1][:300]}"}
    bus = {str(size): 2 * (devices - 1) / devices * size / seconds / 1e9 for size, seconds in times.items()}
    transports = sorted(set(NCCL_TRANSPORT.findall(err)))
    return {"status": "ok", "figures": {"devices": devices, "seconds": {str(k): v for k, v in times.items()},
                                        "bus_gb_per_s": bus, "nccl_transports": transports or ["not reported"]}}


def step_nested_job(results: dict, timeout: float, wait_s: float | None = None) -> dict:
    """Submit a child job as a lesson does from a server: refused at submission is a failure; accepted
    but still pending after `wait_s` (this job may hold the node's GPUs; 120 s within the cap's 240:
    60 s for sbatch, 30 to cancel) is said, then cancelled."""
    import shutil

    wait_s = min(120.0, max(5.0, timeout - 90)) if wait_s is None else wait_s

    if not os.environ.get("SLURM_JOB_ID") or shutil.which("sbatch") is None:
        return {"status": "skipped", "reason": "not inside a Slurm job: run it as one (sbatch slurm/gpucheck.sbatch)"}
    from ..slurm.submit import job_environment, job_options

    options = job_options()
    # --output: nothing reads the child's one line (scontrol gives the figures); Slurm's default
    # slurm-<job>.out would land in the submitting directory, the repository's root in the tests
    code, out, err = _run(["sbatch", "--parsable", "--ntasks=1", "--time=5", "--job-name=course-gpucheck-child",
                           "--output=/dev/null", *options, "--wrap", "echo CHILD_GPUS=${CUDA_VISIBLE_DEVICES:-none}"],
                          min(timeout, 60), job_environment({}))
    job = out.strip().split(";")[0]
    if code != 0 or not job:
        return {"status": "failed", "reason": f"sbatch refused the child job ({code}): {err.strip()[-300:]}",
                "figures": {"options": options}}
    deadline = time.monotonic() + wait_s
    while True:
        fields = _scontrol_job(job)
        state, reason = fields.get("JobState", ""), fields.get("Reason", "")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "") \
                or time.monotonic() >= deadline:
            break
        time.sleep(1)
    figures = {"job": job, "options": options, "state": state, "tres": fields.get("TRES"),
               "gres": fields.get("JOB_GRES")}
    if state in ("PENDING", "RUNNING", "CONFIGURING"):
        subprocess.run(["scancel", job], timeout=30)
        return {"status": "ok", "reason": f"accepted; still {state} after {wait_s:.0f} s ({reason}): cancelled",
                "figures": figures}
    if state != "COMPLETED":
        return {"status": "failed", "reason": f"the child job ended {state or 'unseen'}", "figures": figures}
    return {"status": "ok", "figures": figures}


def _scontrol_job(job: str) -> dict[str, str]:
    """The job's `Key=Value` fields as `scontrol show job -d` prints them (GPUs in JOB_GRES: this
    local Slurm keeps no gres in TRES); empty once Slurm has forgotten the job."""
    shown = subprocess.run(["scontrol", "show", "job", "-d", job], capture_output=True, text=True, timeout=30).stdout
    return dict(re.findall(r"\b(\w+)=(\S+)", shown))


class GpuMemorySampler:
    """Peak GPU memory of every process, from `nvidia-smi --query-compute-apps` twice a second."""

    def __init__(self) -> None:
        self.peak_mib: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        from ..gpus import nvidia_smi

        while not self._stop.wait(0.5):
            for line in nvidia_smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits").splitlines():
                pid, _, used = (part.strip() for part in line.partition(","))
                if used.replace(".", "").isdigit():
                    self.peak_mib[pid] = max(self.peak_mib.get(pid, 0.0), float(used))

    def __enter__(self) -> "GpuMemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def step_lessons(results: dict, lessons: list[str], mode: str, out: Path, on_cpu: bool, timeout: float) -> dict:
    gpus = _gpus_seen(results)
    if not gpus and not on_cpu:
        return {"status": "skipped", "reason": "TensorFlow sees no GPU: the lessons' workshop sizes are for GPUs "
                                               "(make course runs them in quick mode here)"}
    from ..mode import mode_sizes
    from ..training_time import lesson_work, seconds, startup_seconds, training_gpus
    from .course_run import lessons as course_lessons, run_notebook

    os.environ["COURSE_MODE"] = mode
    sizes, rows, folder = mode_sizes(mode), [], out / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    for number in lessons:
        path = next(p for p in course_lessons() if p.name.startswith(number + "_"))
        print(f"  lesson {path.name} in {mode} mode ...", flush=True)
        with GpuMemorySampler() as memory:
            status, took, detail = run_notebook(path, folder, int(timeout))
        on = training_gpus(number, gpus, 2)  # a job lesson: its job's GPUs, one on each of 2 nodes
        replicas = max(on, 2)
        rows.append({"lesson": number, "status": status, "detail": detail, "minutes": took / 60,
                     "predicted_training_minutes": seconds(lesson_work(number, sizes, replicas), on, replicas) / 60,
                     "predicted_startup_minutes": startup_seconds(number, sizes, on) / 60,
                     "peak_gpu_mib_per_process": sorted(memory.peak_mib.values(), reverse=True)})
    failed = [r["lesson"] for r in rows if r["status"] != "ok"]
    return {"status": "failed" if failed else "ok", "reason": f"lesson(s) {', '.join(failed)} failed" if failed else "",
            "figures": {"mode": mode, "gpus": gpus, "lessons": rows}}


# ------------------------------------------------------------------ the document
def validate(doc: dict) -> list[str]:
    """What is wrong with a gpucheck JSON document (empty when it is sound)."""
    problems = []
    if doc.get("schema") not in SCHEMA_STEPS:
        problems.append(f"schema is {doc.get('schema')!r}, not {SCHEMA!r}")
    for key in ("date", "host", "machine", "steps"):
        if key not in doc:
            problems.append(f"no {key!r}")
    steps, expected = doc.get("steps", {}), SCHEMA_STEPS.get(doc.get("schema"), STEPS)
    if sorted(steps) != sorted(expected):
        problems.append(f"steps {sorted(steps)}, expected {sorted(expected)}")
    for name, step in steps.items():
        if step.get("status") not in STATUSES:
            problems.append(f"{name}: status {step.get('status')!r}")
        if step.get("status") in ("failed", "skipped") and not step.get("reason"):
            problems.append(f"{name}: {step.get('status')} without a reason")
        if not isinstance(step.get("seconds"), (int, float)):
            problems.append(f"{name}: no seconds")
    return problems


def machine() -> dict:
    from ..gpus import nvidia_smi, visible_gpus
    from ..host import cpu_count

    names = [line.split(":", 1)[1].split("(UUID")[0].strip()
             for line in nvidia_smi("-L").splitlines() if line.startswith("GPU ")]
    driver = nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader").split()
    return {"cpus": cpu_count(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "gpus_visible": len(visible_gpus()), "gpu_names": names,
            "driver": driver[0] if driver else None, "slurm_job": os.environ.get("SLURM_JOB_ID"),
            "gpus_on_node": os.environ.get("SLURM_GPUS_ON_NODE")}


def plan_steps(lessons: list[str], mode: str, out: Path, lessons_on_cpu: bool) -> dict:
    """Each step as a function of (the results so far, its cap in seconds), in the order they run."""
    return {"build": lambda r, cap: _fresh_step("build", cap),
            "allreduce-node": step_allreduce_node,
            "allreduce-tasks": step_allreduce_tasks,
            "layout-gpu": step_layout_gpu,
            "allreduce-nodes": step_allreduce_nodes,
            "resnet50-mixed": lambda r, cap: _fresh_step("resnet50-mixed", cap) if _gpus_seen(r) else
            {"status": "skipped", "reason": "TensorFlow sees no GPU: mixed_float16 is a GPU check"},
            "nested-job": step_nested_job,
            "lessons": lambda r, cap: step_lessons(r, lessons, mode, out, lessons_on_cpu, cap)}


def document_path(out: Path, host: str, date: str) -> Path:
    return out / f"gpucheck-{re.sub(r'[^A-Za-z0-9.-]', '_', host)}-{date}.json"


def run(path: Path, plan: dict, caps: dict[str, float]) -> dict:
    """Run the steps of `plan` in order, each within its cap, writing the document to `path` whole
    before and after every step (a kill at any moment leaves what was measured, and says where it ended)."""
    from ..atomic import write_text

    began = time.monotonic()
    doc = {"schema": SCHEMA, "date": datetime.date.today().isoformat(), "host": platform.node(),
           "machine": machine(), "complete": False,
           "steps": {name: {"status": "skipped", "reason": NOT_REACHED, "seconds": 0.0} for name in plan}}

    def save() -> None:
        write_text(path, json.dumps(doc, indent=1) + "\n")

    for number, name in enumerate(plan, 1):
        print(f"[{number}/{len(plan)}] {name} (cap {caps[name]:.0f} s) ...", end=" ", flush=True)
        started = time.monotonic()
        doc["steps"][name] = {"status": "failed", "seconds": 0.0, "reason": "did not finish: the run ended during "
                              f"this step, {round(started - began)} s after the start (the job's time limit, or killed)"}
        save()
        done_steps = {k: v for k, v in doc["steps"].items() if v.get("reason") != NOT_REACHED and k != name}
        try:
            result = plan[name](done_steps, caps[name])
        except Exception as exc:  # noqa: BLE001 - one step's surprise is its failure, not the run's end
            result = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:300]}
        result.setdefault("reason", "")
        result["seconds"] = round(time.monotonic() - started, 2)
        doc["steps"][name] = result
        save()
        print(f"{result['status']} in {result['seconds']:.0f} s" + (f": {result['reason']}" if result["reason"] else ""),
              flush=True)
    doc["seconds"], doc["complete"] = round(time.monotonic() - began, 1), True
    save()
    return doc


def job_time_limit_s() -> int | None:
    """This Slurm job's time limit in seconds (None outside a job, or unlimited)."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        return parse_slurm_time(_scontrol_job(job).get("TimeLimit", ""))
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.commands.gpucheck", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/gpucheck", help="where the JSON and executed lessons go")
    parser.add_argument("--lessons", default=",".join(DEFAULT_LESSONS), help="lessons to run (comma-separated numbers)")
    parser.add_argument("--mode", default="workshop", choices=["quick", "workshop", "full"])
    parser.add_argument("--lessons-on-cpu", action="store_true", help="run the lessons even where no GPU is seen")
    parser.add_argument("--step-timeout", type=float, help="seconds before any step is killed (default: each "
                        "step's own cap, STEP_CAPS_S)")
    parser.add_argument("--time-limit", action="store_true", help="print the time limit the steps' caps need, and stop")
    parser.add_argument("--step", choices=["build", "resnet50-mixed", "layout-gpu", "layout-gpu-worker"],
                        help=argparse.SUPPRESS)  # a step's own process
    args = parser.parse_args(argv)
    lessons = [n.strip() for n in args.lessons.split(",") if n.strip()]
    caps = caps_for(args.step_timeout)
    if args.step:
        step_main(args.step, caps["layout-gpu"])
        return 0
    print(time_limit_text(len(lessons), caps), flush=True)
    if args.time_limit:
        return 0
    limit = job_time_limit_s()
    if limit is not None and limit < time_limit_s(len(lessons), caps):
        print(f"warning: this job's time limit ({slurm_time(limit)}) is shorter: the steps after it ends are "
              "marked not reached in the JSON", flush=True)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    path = document_path(out, platform.node(), datetime.date.today().isoformat())
    doc = run(path, plan_steps(lessons, args.mode, out, args.lessons_on_cpu), caps)
    problems = validate(doc)
    counts = {s: sum(1 for step in doc["steps"].values() if step["status"] == s) for s in STATUSES}
    print(f"\n{counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped in {doc['seconds']:.0f} s; "
          f"written to {path}" + ("" if not counts["skipped"] else "\n(skipped steps say why: send the file back either way)"))
    if problems:
        print("the document does not validate: " + "; ".join(problems), file=sys.stderr)
        return 2
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
