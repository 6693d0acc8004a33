"""The bench's scaling rows: the step-time model's prediction next to the measured step, in one run.

For each configuration (2 and 3 local MultiWorkerMirroredStrategy workers; 2 workers on two
Slurm nodes when a Slurm cluster answers) the bench measures, interleaved in the same run:

- compute: one process training alone on one core (`TF_NUM_INTRAOP_THREADS=1`), the share of
  the node each worker gets when N workers share C cores, stretched by N / C when N > C (3
  workers on 2 cores each get two thirds of a core);
- the link: the all-reduce probe between the same N workers (1 to 94 MB), fitted to the ring
  formula (`helpers.scaling_model.fit_link`);
- the model: compute + ring all-reduce of the model's gradient bytes over that link, nothing
  hidden (MWMS all-reduces after the whole backward pass);
- measured: the N workers training, median step.

On GPUs (`gpu_predictions`) the same model takes the 1-GPU step and an all-reduce probe over the
node's GPUs, so a centre running the bench gets prediction and measurement side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .. import scaling_model
from ..allreduce_probe import DEFAULT_SIZES_MB, PREFIX, measure_devices, measure_local, parse
from ..errors import CourseError
from ..host import cpu_count
from ..results import parse_result_lines
from .bench import MODEL_NAMES, Row, _median, _say, _warm_cache_args, training_point

PER_REPLICA_BATCH = 32
ONE_CORE_ENV = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}


def cpu_share(workers: int, cores: int) -> float:
    """How much longer one worker's compute takes than on a core of its own: N workers on C cores."""
    if workers < 1 or cores < 1:
        raise CourseError(f"workers and cores must be at least 1 (got {workers} workers, {cores} cores)")
    return max(1.0, workers / cores)


def predict(compute_s: float, gradient_bytes: float, times: dict[int, float], workers: int, name: str) -> dict:
    """The model's step for `workers`, from the compute time and the probe's all-reduce times."""
    link = scaling_model.fit_link(name, list(times), list(times.values()), workers)
    allreduce = scaling_model.ring_allreduce_s(gradient_bytes, workers, link)
    return {"compute_s": compute_s, "allreduce_s": allreduce, "link": link,
            "step_s": scaling_model.step_s(compute_s, gradient_bytes, workers, link)}


def _srun_output(args: list[str], nodes: int, timeout: float = 900) -> str:
    """Output of one task per node of an srun step (the local Slurm's nodes included)."""
    try:
        done = subprocess.run(["srun", "--immediate=120", "--time=20", f"--nodes={nodes}", f"--ntasks={nodes}",
                               "--ntasks-per-node=1", "--export=ALL", sys.executable, *args], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    except subprocess.TimeoutExpired:
        raise CourseError(f"srun {' '.join(args[:3])} did not finish within {timeout:.0f} s") from None
    if done.returncode != 0:
        raise CourseError(f"srun {' '.join(args[:3])} failed (exit status {done.returncode}): "
                          f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return done.stdout


def _slurm_point(model: str, data_dir: str, steps: int, nodes: int) -> tuple[dict, dict[int, float], int]:
    """(chief's training result, all-reduce times, distinct machines) of `nodes` workers on Slurm nodes."""
    args = ["-m", "helpers", "train", "--model", model, "--batch", str(PER_REPLICA_BATCH), "--skip-eval",
            *_warm_cache_args(PER_REPLICA_BATCH * nodes, steps), "--data-dir", data_dir, "--strategy", "multiworker"]
    results = parse_result_lines(_srun_output(args, nodes))
    chief = [r for r in results if r.get("rank") == 0]
    if not chief:
        raise CourseError("the Slurm training step printed no result from rank 0")
    probe_out = _srun_output(["-m", "helpers.allreduce_probe", "--sizes-mb", *map(str, DEFAULT_SIZES_MB)], nodes)
    machines = {json.loads(line[len(PREFIX):]).get("machine") for line in probe_out.splitlines() if line.startswith(PREFIX)}
    return chief[0], parse(probe_out), len(machines)


def scaling_rows(model: str, data_dir: str, steps: int, repeats: int = 1, workers: tuple[int, ...] = (2, 3),
                 slurm: bool | None = None) -> list[Row]:
    """Measured against predicted step time for each configuration (see the module docstring)."""
    from ..slurm_engines import slurm_reachable

    use_slurm = slurm_reachable() and "SLURM_JOB_ID" not in os.environ if slurm is None else slurm
    configs = [(f"{n} local workers", n, "local") for n in workers]
    if use_slurm:
        configs.append(("2 workers on 2 Slurm nodes", 2, "slurm"))
    else:
        _say("  Slurm configuration skipped: no Slurm answers here (or this runs inside a job)")
    cores = cpu_count()
    compute, gradient_bytes = [], None
    measured = {label: [] for label, _, _ in configs}
    times = {label: [] for label, _, _ in configs}
    shares = {}
    for i in range(repeats):
        alone = training_point("single", 1, model, data_dir, steps, PER_REPLICA_BATCH, env=ONE_CORE_ENV)
        compute.append(alone["median_step_s"])
        gradient_bytes = alone["gradient_bytes"]
        _say(f"  {model} alone on one core, repeat {i + 1}/{repeats}: {compute[-1] * 1000:.0f} ms/step; "
             f"gradients {gradient_bytes / 1e6:.1f} MB")
        for label, n, where in configs:
            if where == "local":
                point = training_point("multiworker", n, model, data_dir, steps, PER_REPLICA_BATCH)
                probe = measure_local(n, DEFAULT_SIZES_MB)
                shares[label] = cpu_share(n, cores)
            else:
                point, probe, machines = _slurm_point(model, data_dir, steps, n)
                shares[label] = cpu_share(n, cores) if machines == 1 else 1.0  # emulated nodes share this machine
            measured[label].append(point["median_step_s"])
            times[label].append(probe)
            _say(f"  {model} {label}, repeat {i + 1}/{repeats}: {point['median_step_s'] * 1000:.0f} ms/step; "
                 f"all-reduce {max(probe.values()) * 1000:.0f} ms for {max(probe) / 1e6:.0f} MB")
    rows = []
    for label, n, _ in configs:
        probe = {size: _median([t[size] for t in times[label]]) for size in times[label][0]}
        model_step = predict(_median(compute) * shares[label], gradient_bytes, probe, n, label)
        link = model_step["link"]
        rows.append(Row(
            f"{MODEL_NAMES[model]} step, {label}, per-replica batch {PER_REPLICA_BATCH}: measured / model",
            _median(measured[label]) * 1000, model_step["step_s"] * 1000, "ms", False, "report",
            f"model: compute {model_step['compute_s'] * 1000:.0f} ms (one core {_median(compute) * 1000:.0f} ms x "
            f"{shares[label]:.2f} share) + ring all-reduce {model_step['allreduce_s'] * 1000:.0f} ms "
            f"({gradient_bytes / 1e6:.1f} MB at {link.bandwidth / 1e6:.0f} MB/s, latency {link.latency * 1000:.2f} ms)",
            versus_defaults=False))
    return rows


def gpu_prediction(per_gpu_step_s: float, gradient_bytes: float, gpus: int, batch: int) -> Row:
    """The model's images/s on `gpus` GPUs of this node, from the 1-GPU step and a probe over those GPUs."""
    step = predict(per_gpu_step_s, gradient_bytes, measure_devices(gpus), gpus, f"{gpus} GPUs")
    link = step["link"]
    return Row(f"ResNet50 images/s on {gpus} GPUs, model: 1-GPU step + all-reduce over them, no overlap",
               gpus * batch / step["step_s"], None, "images/s", True, "report",
               f"all-reduce {step['allreduce_s'] * 1000:.1f} ms for {gradient_bytes / 1e6:.0f} MB at "
               f"{link.bandwidth / 1e9:.1f} GB/s; predicted efficiency {per_gpu_step_s / step['step_s']:.2f}",
               versus_defaults=False)
