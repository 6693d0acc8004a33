"""`make gpucheck`: the smoke run for the first real GPU node, written as JSON a centre sends back.

The course has never run on a GPU (no GPU with TensorFlow is reachable where it is built), so the
first GPU node it meets is where the untested half of it runs first. This is one command, about
ten minutes on a 4-GPU node, that tries each GPU path once and records what happened:

- `build`: the TensorFlow build (CUDA and cuDNN versions), the GPUs TensorFlow sees against the
  GPUs the node gave (a CPU build on a GPU node is the most common mistake);
- `allreduce-node`: NCCL all-reduce over the node's GPUs in one process, with the transport NCCL
  chose (from `NCCL_DEBUG=INFO`);
- `allreduce-tasks`: the same between two processes, one GPU each (MultiWorkerMirroredStrategy);
- `resnet50-mixed`: a few ResNet50 steps with the `mixed_float16` policy on one GPU, and its peak memory;
- `nested-job`: a job submitted from inside this job, as lessons 08, 11, 16 and 17 do from a
  learner's server, with the course's clean environment and GPU request;
- `lessons`: lessons 01, 04, 05 and 07 in workshop mode, each one's minutes against the course's
  prediction, and the peak GPU memory of every process (from `nvidia-smi`).

Every step runs in a fresh process with a deadline: a hang is a failed step, not a stuck check.
On a machine without GPUs the GPU steps are skipped with the reason, and the JSON still
validates (`validate`): the smoke run itself is tested where it is built. docs/measured.md's
"Verified on" table is generated from the files centres send back (`docs/bench/gpucheck-*.json`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

SCHEMA = "tf-hpc-course/gpucheck/1"
STATUSES = ("ok", "failed", "skipped")
STEPS = ("build", "allreduce-node", "allreduce-tasks", "resnet50-mixed", "nested-job", "lessons")
LINE = "GPUCHECK "  # what a step's fresh process prints: one JSON object
DEFAULT_LESSONS = ("01", "04", "05", "07")
NCCL_TRANSPORT = re.compile(r"via (P2P/\w+|SHM|NET/\w+|CollNet/\w+)")


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
               else "a CUDA build that cannot open them: CUDA libraries missing or mismatched (see the log)")
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


def step_main(name: str) -> None:
    """The body of one step's fresh process: prints its result as one GPUCHECK line."""
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # the node's other processes need memory too
    result = {"build": _in_step_build, "resnet50-mixed": _in_step_resnet}[name]()
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


def _fresh_step(name: str, timeout: float) -> dict:
    code, out, err = _run([sys.executable, "-m", "helpers.tools.gpucheck", "--step", name], timeout)
    found = [json.loads(line[len(LINE):]) for line in out.splitlines() if line.startswith(LINE)]
    if code is None:
        return {"status": "failed", "reason": f"no result within {timeout:.0f} s: killed"}
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


def step_nested_job(results: dict, timeout: float, wait_s: float = 120.0) -> dict:
    """Submit a child job as a lesson does from a server: refused at submission is a failure; accepted
    but still pending after `wait_s` (this job may hold the node's GPUs) is said, then cancelled."""
    import shutil

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
    from ..mode import mode_settings
    from ..training_time import lesson_work, seconds
    from .course_run import lessons as course_lessons, run_notebook

    os.environ["COURSE_MODE"] = mode
    settings, rows, folder = mode_settings(mode), [], out / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    for number in lessons:
        path = next(p for p in course_lessons() if p.name.startswith(number + "_"))
        print(f"  lesson {path.name} in {mode} mode ...", flush=True)
        with GpuMemorySampler() as memory:
            status, took, detail = run_notebook(path, folder, int(timeout))
        replicas = max(gpus, 2)
        rows.append({"lesson": number, "status": status, "detail": detail, "minutes": took / 60,
                     "predicted_training_minutes": seconds(lesson_work(number, settings, replicas), gpus, replicas) / 60,
                     "peak_gpu_mib_per_process": sorted(memory.peak_mib.values(), reverse=True)})
    failed = [r["lesson"] for r in rows if r["status"] != "ok"]
    return {"status": "failed" if failed else "ok", "reason": f"lesson(s) {', '.join(failed)} failed" if failed else "",
            "figures": {"mode": mode, "gpus": gpus, "lessons": rows}}


# ------------------------------------------------------------------ the document
def validate(doc: dict) -> list[str]:
    """What is wrong with a gpucheck JSON document (empty when it is sound)."""
    problems = []
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, not {SCHEMA!r}")
    for key in ("date", "host", "machine", "steps"):
        if key not in doc:
            problems.append(f"no {key!r}")
    steps = doc.get("steps", {})
    if sorted(steps) != sorted(STEPS):
        problems.append(f"steps {sorted(steps)}, expected {sorted(STEPS)}")
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


def run(out: Path, lessons: list[str], mode: str, lessons_on_cpu: bool, step_timeout: float) -> dict:
    began = time.monotonic()
    doc = {"schema": SCHEMA, "date": datetime.date.today().isoformat(), "host": platform.node(),
           "machine": machine(), "steps": {}}
    plan = {"build": lambda r: _fresh_step("build", step_timeout),
            "allreduce-node": lambda r: step_allreduce_node(r, step_timeout),
            "allreduce-tasks": lambda r: step_allreduce_tasks(r, step_timeout),
            "resnet50-mixed": lambda r: _fresh_step("resnet50-mixed", step_timeout) if _gpus_seen(r) else
            {"status": "skipped", "reason": "TensorFlow sees no GPU: mixed_float16 is a GPU check"},
            "nested-job": lambda r: step_nested_job(r, step_timeout),
            "lessons": lambda r: step_lessons(r, lessons, mode, out, lessons_on_cpu, step_timeout)}
    for name in STEPS:
        print(f"[{STEPS.index(name) + 1}/{len(STEPS)}] {name} ...", end=" ", flush=True)
        started = time.monotonic()
        try:
            result = plan[name](doc["steps"])
        except Exception as exc:  # noqa: BLE001 - one step's surprise is its failure, not the run's end
            result = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:300]}
        result.setdefault("reason", "")
        result["seconds"] = round(time.monotonic() - started, 2)
        doc["steps"][name] = result
        print(f"{result['status']} in {result['seconds']:.0f} s" + (f": {result['reason']}" if result["reason"] else ""),
              flush=True)
    doc["seconds"] = round(time.monotonic() - began, 1)
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.tools.gpucheck", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/gpucheck", help="where the JSON and executed lessons go")
    parser.add_argument("--lessons", default=",".join(DEFAULT_LESSONS), help="lessons to run (comma-separated numbers)")
    parser.add_argument("--mode", default="workshop", choices=["quick", "workshop", "full"])
    parser.add_argument("--lessons-on-cpu", action="store_true", help="run the lessons even where no GPU is seen")
    parser.add_argument("--step-timeout", type=float, default=600.0, help="seconds before a step is killed")
    parser.add_argument("--step", choices=["build", "resnet50-mixed"], help=argparse.SUPPRESS)  # a step's own process
    args = parser.parse_args(argv)
    if args.step:
        step_main(args.step)
        return 0
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    doc = run(out, [n.strip() for n in args.lessons.split(",") if n.strip()], args.mode, args.lessons_on_cpu,
              args.step_timeout)
    problems = validate(doc)
    path = out / f"gpucheck-{re.sub(r'[^A-Za-z0-9.-]', '_', doc['host'])}-{doc['date']}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    counts = {s: sum(1 for step in doc["steps"].values() if step["status"] == s) for s in STATUSES}
    print(f"\n{counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped in {doc['seconds']:.0f} s; "
          f"written to {path}" + ("" if not counts["skipped"] else "\n(skipped steps say why: send the file back either way)"))
    if problems:
        print("the document does not validate: " + "; ".join(problems), file=sys.stderr)
        return 2
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
