"""`python -m helpers bench`: every figure of the performance table, side by side in one run.

Each compared pair runs interleaved (ours, baseline, ours, baseline, ...) and reports medians
over repeats of median step times, so a busy machine slows both sides alike. "Ours" is the
helpers with their defaults (`helpers.tuning`, `helpers.engines`); the baseline is the same
code with TensorFlow's and ipyparallel's defaults (`COURSE_TUNING=off`), or hand-written
Keras (`helpers.commands.bench_baseline`). Training runs each take fresh processes. Writes bench.json
and bench.csv (docs/measured.md's tables are made from them). Nothing here is asserted by tests on wall-clock time:
it prints figures for people to read, and says for each whether its target is met.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from ..environment import output_dir
from ..gpus import gpu_count_without_tf
from ..host import cpu_count
from ..errors import CourseError
from ..tuning import TUNING_ENV
from ..results import parse_result_lines
from .bench_rows import (MODEL_NAMES, WARM_BATCHES, Row, median, model_repeats, model_steps, run_result, same_jit_compile,
                         say, training_point)

ROWS = ("engines", "distribution", "scaling", "overhead", "pipeline", "course", "gpu")
GLOBAL_BATCH = 64
DEFAULTS_ENV = {TUNING_ENV: "off"}  # the baseline: TensorFlow's own defaults



# ------------------------------------------------------------------------------ engines
ENGINE_COUNTS = (2, 8, 32)  # a learner's lesson, a node's GPUs, a class-sized cluster


def bench_engines(repeats: int = 3, counts: tuple[int, ...] = ENGINE_COUNTS) -> list[Row]:
    """Engines ready for %%px as N grows, ours next to ipyparallel's defaults, and where our time goes."""
    from ..engines import start_engines

    rows = []
    for n in counts:
        ours, base, stops, base_stops, phases = [], [], [], [], []
        for i in range(repeats if n <= 8 else max(1, repeats - 1)):
            started = time.perf_counter()
            engines = start_engines(n, activate=False)
            ours.append(time.perf_counter() - started)
            phases.append(engines.phases)
            if n == 2:
                engines.client[:].execute("import tensorflow", block=True)
            stops.append(engines.stop())
            start_s, stop_s = _ipyparallel_defaults(n, hold_tf=n == 2)
            base.append(start_s)
            base_stops.append(stop_s)
            say(f"  {n} engines, repeat {i + 1}: ready {ours[-1]:.2f} s vs {start_s:.2f} s "
                 f"(controller up {engines.phases['controller up']:.2f} s, then engines registered "
                 f"{engines.phases['engines registered']:.2f} s, ranks assigned {engines.phases['ranks assigned']:.2f} s)")
        split = ", ".join(f"{k} {median([p[k] for p in phases]):.2f} s" for k in ("controller up", "engines registered", "ranks assigned"))
        rows.append(Row(f"{n} local engines ready for %%px", median(ours), median(base), "s", False,
                        "<= 1" if n == 2 else "beat the baseline",
                        f"baseline: ipyparallel defaults with CurveZMQ; ours: {split}"))
        if n == 2:
            rows.append(Row("2 engines holding TensorFlow stopped", median(stops), median(base_stops), "s", False,
                            "<= 1", "baseline: Cluster.stop_cluster"))
    rows.append(Row("one engine's interpreter start and imports", _engine_import_s(), None, "s", False, "report",
                    "paid once per engine, in parallel on as many cores as there are"))
    rows += _bench_slurm_engines(repeats)
    rows += _bench_allocation_engines(repeats)
    return rows


def _engine_import_s() -> float:
    """What every engine pays before it can register: a Python process importing ipyparallel's engine."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "from ipyparallel.engine.app import IPEngine"], check=True)
        times.append(time.perf_counter() - started)
    return median(times)


def _bench_slurm_engines(repeats: int) -> list[Row]:
    """2 engines as a Slurm job on two nodes, where Slurm answers (the local Slurm included)."""
    from ..engines import start_engines
    from ..slurm import slurm_reachable
    from ..slurm.nodes import controller_ip
    from ..slurm.request import SlurmRequest

    if not slurm_reachable() or "SLURM_JOB_ID" in os.environ:
        say("  Slurm engines skipped: no Slurm answers here (or this runs inside a job)")
        return []
    request = SlurmRequest.from_env()
    address = controller_ip(request.partition)
    ours, base = [], []
    for i in range(repeats):
        started = time.perf_counter()
        engines = start_engines(2, slurm=True, activate=False)
        ours.append(time.perf_counter() - started)
        where = engines.placement()
        engines.stop()
        with contextlib.chdir(_launcher_dir()):  # ipyparallel writes its sbatch file into the working directory
            base.append(_ipyparallel_defaults(2, engines="slurm", controller_ip=address,
                                              controller_location=address)[0])
        say(f"  2 Slurm engines, repeat {i + 1}: ready {ours[-1]:.2f} s vs {base[-1]:.2f} s ({where})")
    return [Row("2 Slurm engines (sbatch) ready for %%px", median(ours), median(base), "s", False,
                "beat the baseline", "baseline: ipyparallel defaults with CurveZMQ, engines='slurm'")]


# Run inside one `salloc -N2 -n2`, interleaved: the course's srun step, ipyparallel's own MPI
# launcher (`ipcluster start -n 2 --engines=mpi`: mpiexec, which starts its processes through srun
# inside an allocation; its engines use mpi4py for their rank) and CSCS's ipcmagic (`%ipcluster
# start -n 2`).
IN_ALLOCATION = """
import json, sys, time
import ipyparallel as ipp
from IPython.core.interactiveshell import InteractiveShell
from helpers.engines import start_engines
from helpers.slurm.nodes import controller_ip
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "ipcmagic")
address = controller_ip()
for repeat in range(int(sys.argv[1])):
    started = time.perf_counter()
    engines = start_engines(2, slurm=True, activate=False)
    ours = time.perf_counter() - started
    ours_stop = engines.stop()
    started = time.perf_counter()
    cluster = ipp.Cluster(n=2, engines="mpi", controller_ip=address, controller_location=address, log_level=40,
                          controller_args=["--IPController.enable_curve=True"], send_engines_connection_env=False)
    cluster.start_cluster_sync()
    client = cluster.connect_client_sync()
    client.wait_for_engines(2, timeout=120, interactive=False)
    mpi = time.perf_counter() - started
    client.close()
    started = time.perf_counter()
    cluster.stop_cluster_sync()
    mpi_stop = time.perf_counter() - started
    started = time.perf_counter()
    shell.run_line_magic("ipcluster", "start -n 2")
    ipcmagic = time.perf_counter() - started
    started = time.perf_counter()
    shell.run_line_magic("ipcluster", "stop")
    print("RESULT " + json.dumps({"ours": ours, "ours_stop": ours_stop, "mpi": mpi, "mpi_stop": mpi_stop,
                                  "ipcmagic": ipcmagic, "ipcmagic_stop": time.perf_counter() - started}), flush=True)
"""

# name in a result, what the row's note calls it
ALLOCATION_BASELINES = {"mpi": "ipyparallel's MPI launcher with CurveZMQ, ipcluster start -n 2 --engines=mpi "
                               "(mpiexec, mpi4py)",
                        "ipcmagic": "ipcmagic-cscs %ipcluster start -n 2 / stop"}


def _bench_allocation_engines(repeats: int) -> list[Row]:
    """2 engines inside one allocation of two nodes (a hub server, salloc): the course's,
    ipyparallel's MPI launcher and ipcmagic's, side by side."""
    from ..slurm import slurm_reachable

    missing = [m for m in ("ipcmagic", "mpi4py") if importlib.util.find_spec(m) is None]
    if not slurm_reachable() or "SLURM_JOB_ID" in os.environ or missing:
        say("  engines in an allocation skipped: no Slurm answers here, this runs inside a job, or the test extra "
            f"is not installed (missing: {', '.join(missing) or 'none'})")
        return []
    venv_bin = str(Path(sys.executable).parent)
    done = subprocess.run(["salloc", "-N", "2", "-n", "2", "--time=15", sys.executable, "-c", IN_ALLOCATION, str(repeats)],
                          capture_output=True, text=True, timeout=900, cwd=_launcher_dir(),
                          env={**os.environ, "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
                               "IPYTHONDIR": str(_launcher_dir() / "ipython")})
    results = parse_result_lines(done.stdout)
    if done.returncode != 0 or not results:
        raise RuntimeError(f"engines in an allocation failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    for i, r in enumerate(results):
        say(f"  2 engines in an allocation, repeat {i + 1}: ready {r['ours']:.2f} s (course) | {r['mpi']:.2f} s "
            f"(ipyparallel MPI) | {r['ipcmagic']:.2f} s (ipcmagic); stopped {r['ours_stop']:.2f} | "
            f"{r['mpi_stop']:.2f} | {r['ipcmagic_stop']:.2f} s")
    rows = []
    for phase, label in (("", "ready (srun step)"), ("_stop", "stopped")):
        for name, note in ALLOCATION_BASELINES.items():
            rows.append(Row(f"2 engines in an allocation {label}, vs {name}", median([r["ours" + phase] for r in results]),
                            median([r[name + phase] for r in results]), "s", False,
                            "report" if phase else "beat the baseline", f"baseline: {note}"))
    return rows


def _launcher_dir() -> Path:
    """Where the baseline's Slurm launcher writes its batch file and the job starts: the output
    directory, which the nodes share, not the directory the bench was started from."""
    where = output_dir() / "bench" / "ipyparallel-slurm"
    where.mkdir(parents=True, exist_ok=True)
    return where


# The baselines run ipyparallel's defaults but for two: CurveZMQ on (ipyparallel 9.2's
# `IPController.enable_curve`, off by default: without it anyone who can reach the controller reads
# every engine's output) and the engines' connection info read from the owner-only connection file,
# not sent in their environment (`send_engines_connection_env`, on by default: a Slurm job's
# environment may be kept where other users can read it). Both as the course's own clusters have them.
SAFE_BASELINE = dict(controller_args=["--IPController.enable_curve=True"], send_engines_connection_env=False)


def _ipyparallel_defaults(n: int = 2, hold_tf: bool = True, **options) -> tuple[float, float]:
    import ipyparallel as ipp

    started = time.perf_counter()
    cluster = ipp.Cluster(n=n, log_level=40, **SAFE_BASELINE, **options)
    cluster.start_cluster_sync()
    client = cluster.connect_client_sync()
    client.wait_for_engines(n, timeout=300, interactive=False)
    start_s = time.perf_counter() - started
    if hold_tf:
        client[:].execute("import tensorflow", block=True)
    client.close()
    started = time.perf_counter()
    cluster.stop_cluster_sync()
    return start_s, time.perf_counter() - started


# ----------------------------------------------------------------------------- training
def bench_distribution(model: str, data_dir: str, steps: int, repeats: int = 2) -> list[Row]:
    """Step time of 2 replicas (one process) and of 2 worker processes over one process, same
    global batch, with the helpers' defaults and with TensorFlow's, interleaved."""
    half = GLOBAL_BATCH // 2
    configs = {"single": ("single", 1, GLOBAL_BATCH), "mirrored": ("mirrored", 2, half),
               "multiworker": ("multiworker", 2, half)}
    steps_s = {(side, name): [] for side in ("ours", "base") for name in configs}
    first_s = {(side, name): [] for side in ("ours", "base") for name in configs}
    ran = {}  # every run's result, for the jit_compile they must share
    for i in range(repeats):
        for name, (kind, n, batch) in configs.items():
            for side, env in (("ours", None), ("base", DEFAULTS_ENV)):
                point = training_point(kind, n, model, data_dir, steps, batch, env=env)
                ran[f"{side} {name} {i + 1}"] = point
                steps_s[side, name].append(point["median_step_s"])
                first_s[side, name].append(point["first_step_s"])
                say(f"  {model} {name:<11} {'helpers' if side == 'ours' else 'TF defaults':<11} "
                     f"repeat {i + 1}/{repeats}: {point['median_step_s'] * 1000:6.0f} ms/step, "
                     f"first step {point['first_step_s']:.1f} s, jit_compile={point.get('xla')}")
    jit = same_jit_compile(ran)  # 1 process against 2 replicas and 2 workers: XLA alike on every side
    med = {key: median(values) for key, values in steps_s.items()}
    name = MODEL_NAMES[model]
    targets = {"resnet50": ("<= 1.3", "<= 1.6")}.get(model, ("beat the baseline", "beat the baseline"))
    rows = []
    for (label, key), target in zip((("MirroredStrategy 2 logical CPUs", "mirrored"),
                                     ("MultiWorkerMirroredStrategy 2 local processes", "multiworker")), targets):
        ours = med["ours", key] / med["ours", "single"]
        base = med["base", key] / med["base", "single"]
        rows.append(Row(f"{name} step time, global batch {GLOBAL_BATCH}: {label} / 1 process", ours, base, "x",
                        False, target, f"ms/step ours {med['ours', key] * 1000:.0f}/"
                        f"{med['ours', 'single'] * 1000:.0f}, TF defaults {med['base', key] * 1000:.0f}/"
                        f"{med['base', 'single'] * 1000:.0f}; jit_compile={jit} in every run"))
    if model == "resnet50":
        rows.append(Row(f"{name} first step (tracing) under MirroredStrategy", median(first_s["ours", "mirrored"]),
                        median(first_s["base", "mirrored"]), "s", False, "beat the baseline",
                        "report; baseline: TF defaults"))
    return rows


def bench_overhead(model: str, data_dir: str, steps: int, repeats: int = 2) -> list[Row]:
    """images/s of the helpers' fit and custom-loop paths against hand-written Keras, same
    model, data and strategy (one process), interleaved."""
    rows = []
    name = MODEL_NAMES[model]
    for loop in ("fit", "custom"):
        base_args = ["-m", "helpers.commands.bench_baseline", "--model", model, "--loop", loop, "--data-dir", data_dir,
                     "--batch", str(GLOBAL_BATCH), "--steps", str(steps),
                     "--examples", str(GLOBAL_BATCH * WARM_BATCHES)]
        ours, base, ran = [], [], {}
        for i in range(repeats):
            ran[f"helpers {i + 1}"] = training_point("single", 1, model, data_dir, steps, GLOBAL_BATCH, ("--loop", loop))
            ran[f"plain Keras {i + 1}"] = run_result(base_args)
            ours.append(ran[f"helpers {i + 1}"]["images_per_s"])
            base.append(ran[f"plain Keras {i + 1}"]["images_per_s"])
            say(f"  {model} {loop:<6} repeat {i + 1}/{repeats}: helpers {ours[-1]:.0f} vs plain Keras "
                 f"{base[-1]:.0f} images/s")
        rows.append(Row(f"{name} {loop} images/s, batch {GLOBAL_BATCH}, 1 process: helpers / plain Keras",
                        median(ours), median(base), "images/s", True, ">= 0.97",
                        f"jit_compile={same_jit_compile(ran)} on both sides", target_on="ratio"))
    return rows


# ----------------------------------------------------------------------------- pipeline
def bench_pipeline(data_dir: str, consumed: float | None, consumer: str, batch: int = GLOBAL_BATCH,
                   epochs: int = 5) -> Row:
    """The input pipeline alone (after its cache is warm) against what training consumes."""
    from ..data import load_split
    from ..host import import_tensorflow

    import_tensorflow()  # without its C++ start-up lines in the table's output
    from ..lesson import training_dataset

    ds = training_dataset(load_split("train", data_dir), batch)
    for _ in ds:  # fill the cache
        pass
    count, started = 0, time.perf_counter()
    for _ in range(epochs):
        for images, _ in ds:
            count += int(images.shape[0])
    rate = count / (time.perf_counter() - started)
    return Row(f"input pipeline images/s / {consumer} training images/s", rate, consumed, "images/s", True,
               ">= 10", "pipeline alone, cached", target_on="ratio", versus_defaults=False)


# ------------------------------------------------------------------------------- course
def bench_course() -> Row:
    """`make course`'s run (every notebook, quick mode, local engines) into a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="bench-course-") as out:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "helpers.commands.course_run", "--out", out],
                              capture_output=True, text=True, timeout=1800,
                              env={**os.environ, "COURSE_MODE": "quick", "COURSE_OUTPUT_DIR": out})
        seconds = time.perf_counter() - started
    status = "all notebooks ok" if done.returncode == 0 else "FAILED: " + done.stdout.strip().splitlines()[-3]
    return Row("whole course in quick mode (make course)", seconds, None, "s", False, "<= 600", status)


# ---------------------------------------------------------------------------------- GPU
GPU_SWITCHES = {"float32": (), "mixed precision": ("--precision", "mixed_float16"), "XLA": ("--xla",),
                "mixed precision + XLA": ("--precision", "mixed_float16", "--xla")}
SCALING_SWITCH = "mixed precision"  # no XLA under a strategy: helpers.commands.train.XLA_REFUSED says why


def gpu_runs(visible: list[str]) -> list[tuple[str, str, int, tuple[str, ...], str]]:
    """Every GPU row's run: (switch, kind of run, GPUs, train options, the CUDA_VISIBLE_DEVICES it gets).

    A row that names n GPUs sees exactly the first n of this process's GPUs: MirroredStrategy takes
    every GPU it can see, so without this the "1 GPU" rows would train on all of them. The 1-GPU rows
    run without a strategy ("single"), as a one-GPU user would, which is also the only way the course
    offers XLA; the n-GPU rows run MirroredStrategy over their n GPUs."""
    runs = [(name, "single", 1, extra, visible[0]) for name, extra in GPU_SWITCHES.items()] if visible else []
    runs += [(SCALING_SWITCH, "mirrored", n, GPU_SWITCHES[SCALING_SWITCH], ",".join(visible[:n]))
             for n in (2, 4, 8) if n <= len(visible)]
    return runs


def bench_gpu(data_dir: str, steps: int) -> tuple[list[Row], str | None]:
    """Images/s on 1 GPU (no strategy) for ResNet50 with mixed precision and XLA on and off, and
    MirroredStrategy over 2, 4, 8 of the node's GPUs with mixed precision. Returns (rows, why skipped)."""
    from ..gpus import VISIBLE_ENV, visible_gpus
    from .bench_scaling import gpu_prediction

    runs = gpu_runs(visible_gpus())
    if not runs:
        return [], "no GPU visible to this process (CUDA_VISIBLE_DEVICES / nvidia-smi -L)"
    rows, one_gpu = [], {}
    for name, kind, n, extra, devices in runs:
        point = training_point(kind, n, "resnet50", data_dir, steps, 128, extra, env={VISIBLE_ENV: devices})
        if point["replicas"] != n:
            raise CourseError(f"the {n}-GPU row ran on {point['replicas']} replicas (CUDA_VISIBLE_DEVICES={devices})")
        gradient_bytes = point["gradient_bytes"]
        if n == 1:
            one_gpu[name] = point
            rows.append(Row(f"ResNet50 images/s on 1 GPU, batch 128, {name}", point["images_per_s"],
                            one_gpu["float32"]["images_per_s"], "images/s", True, "report",
                            f"jit_compile={point.get('xla')}"))
            continue
        # the 1-GPU run (no strategy) and this n-GPU run (MirroredStrategy) must share jit_compile
        jit = same_jit_compile({"1 GPU": one_gpu[name], f"{n} GPUs": point})
        rows.append(Row(f"ResNet50 images/s on {n} GPUs ({name}) / {n} x 1 GPU",
                        point["images_per_s"], n * one_gpu[name]["images_per_s"], "images/s", True, "report",
                        f"scaling efficiency = ratio; jit_compile={jit} on both"))
        steps_s = one_gpu[name]["median_step_s"]
        rows.append(gpu_prediction(steps_s, gradient_bytes, n, 128))
    return rows, None


# --------------------------------------------------------------------------------- main
def format_table(rows: list[Row]) -> str:
    lines = [f"{'figure':<92} {'ours':>9} {'baseline':>9} {'ratio':>6}  {'target':<18} met"]
    for r in rows:
        base = f"{r.baseline:9.2f}" if r.baseline is not None else f"{'-':>9}"
        ratio = f"{r.ratio:6.2f}" if r.ratio is not None else f"{'-':>6}"
        target = r.target if r.target_on == "ours" or r.target in ("report", "beat the baseline") \
            else f"ratio {r.target}"
        lines.append(f"{r.figure[:92]:<92} {r.ours:9.2f} {base} {ratio}  {target:<18} {r.met}"
                     + (f"  ({r.note})" if r.note else ""))
    return "\n".join(lines)


def main(out: str | None = None, steps: int = 12, only: str | None = None, repeats: int = 2) -> int:
    from ..data import ensure_data

    wanted = set(only.split(",")) if only else set(ROWS)
    unknown = wanted - set(ROWS)
    if unknown:
        raise CourseError(f"unknown bench rows {sorted(unknown)}: choose from {', '.join(ROWS)}")
    data_dir = str(ensure_data(quick=True).data_dir)
    machine = {"host": platform.node(), "cpus": cpu_count(), "gpus": gpu_count_without_tf(),
               "processor": platform.processor() or platform.machine(), "python": platform.python_version(),
               "data": "SYNTHETIC CIFAR-10-format data",
               "date": time.strftime("%Y-%m-%d", time.gmtime()), "repeats": repeats, "rows": sorted(wanted)}
    say(f"bench on {machine['host']}: {machine['cpus']} CPUs, {machine['gpus']} GPUs, {machine['processor']}; "
         f"{machine['data']}; {repeats} interleaved repeats, {steps} timed steps per ResNet50 run "
         f"({model_steps('cnn', steps)} per small-CNN run)")
    rows: list[Row] = []
    started = time.perf_counter()
    if "engines" in wanted:
        say("engines: ours and ipyparallel defaults, interleaved ...")
        rows += bench_engines(repeats + 1)
    if "distribution" in wanted:
        for model in ("resnet50", "cnn"):
            say(f"{model}: 1 process, MirroredStrategy, 2 workers; helpers and TF defaults, interleaved ...")
            rows += bench_distribution(model, data_dir, model_steps(model, steps), model_repeats(model, repeats))
    if "scaling" in wanted:
        from .bench_scaling import scaling_rows, slurm_nodes_from_here

        two_slurm_nodes = slurm_nodes_from_here()
        if not two_slurm_nodes:
            say("  2 workers on 2 Slurm nodes: skipped (no Slurm answers here, or this runs inside a job)")
        for model in ("resnet50", "cnn"):
            say(f"{model}: the step-time model against 2 and 3 local workers and 2 Slurm nodes, same run ...")
            rows += scaling_rows(model, data_dir, model_steps(model, steps), max(1, repeats - 1),
                                 two_slurm_nodes=two_slurm_nodes)
    consumed = None
    if "overhead" in wanted:
        for model in ("resnet50", "cnn"):
            say(f"{model}: helpers fit/custom loop and plain Keras, interleaved ...")
            rows += bench_overhead(model, data_dir, model_steps(model, steps), model_repeats(model, repeats))
            if model == "resnet50":
                consumed = rows[-2].ours
    if "pipeline" in wanted:
        say("input pipeline ...")
        if consumed is None:
            consumed = training_point("single", 1, "resnet50", data_dir, steps, GLOBAL_BATCH)["images_per_s"]
        rows.append(bench_pipeline(data_dir, consumed, "ResNet50 fit"))
    if "course" in wanted:
        say("whole course (every notebook, quick mode) ...")
        rows.append(bench_course())
    gpu_skipped = None
    if "gpu" in wanted:
        gpu_rows, gpu_skipped = bench_gpu(data_dir, steps)
        rows += gpu_rows
        if gpu_skipped:
            say(f"GPU section skipped: {gpu_skipped}")
    machine["seconds"] = round(time.perf_counter() - started)
    say(f"\nbench took {machine['seconds']} s\n" + format_table(rows))
    target = Path(out) if out else output_dir() / "bench"
    write_tables(rows, machine, target, gpu_skipped)
    say(f"wrote {target / 'bench.json'} and {target / 'bench.csv'}")
    return 0


def write_tables(rows: list[Row], machine: dict, target: Path, gpu_skipped: str | None = None) -> None:
    target.mkdir(parents=True, exist_ok=True)
    records = [{**asdict(r), "ratio": r.ratio, "met": r.met} for r in rows]
    (target / "bench.json").write_text(json.dumps({"machine": machine, "gpu_skipped": gpu_skipped,
                                                   "rows": records}, indent=2))
    with open(target / "bench.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(records[0]) if records else ["figure"])
        writer.writeheader()
        writer.writerows(records)
