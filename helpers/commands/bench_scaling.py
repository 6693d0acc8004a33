"""The bench's scaling rows: the step-time model's prediction next to the measured step, in one run.

For each configuration (2 and 3 local MultiWorkerMirroredStrategy workers; 2 workers on two
Slurm nodes when a Slurm cluster answers) the bench measures, interleaved in the same run:

- compute: the same N processes in the same places (local, or one per Slurm node), with the
  threads a worker gets, training at the same time *without* communicating. On a CPU node they
  compete for cores and memory as the workers do, so this is each worker's compute under that
  sharing; on nodes of their own it is one worker's compute;
- the link: the all-reduce probe between the same N workers (1 to 94 MB), fitted to the ring
  formula (`helpers.scaling_model.fit_link`);
- the model: compute + ring all-reduce of the model's gradient bytes over that link, nothing
  hidden (MWMS all-reduces after the whole backward pass);
- measured: the N workers training as one cluster, median step.

On GPUs (`gpu_prediction`) the same model takes the 1-GPU step and an all-reduce probe over the
node's GPUs, so a centre running the bench gets prediction and measurement side by side.
"""

from __future__ import annotations

import os
import sys

from .. import scaling_model
from ..allreduce_probe import DEFAULT_SIZES_MB, measure_devices, measure_local, parse
from ..errors import CourseError
from ..local_workers import run_local_workers
from ..results import parse_result_lines
from ..tuning import threads_for
from .bench_rows import MODEL_NAMES, Row, median, same_jit_compile, say, training_point, warm_cache_args

PER_REPLICA_BATCH = 32


def predict(compute_s: float, gradient_bytes: float, times: dict[int, float], workers: int, name: str) -> dict:
    """The model's step for `workers`, from the compute time and the probe's all-reduce times."""
    link = scaling_model.fit_link(name, list(times), list(times.values()), workers)
    allreduce = scaling_model.ring_allreduce_s(gradient_bytes, workers, link)
    return {"compute_s": compute_s, "allreduce_s": allreduce, "link": link,
            "step_s": scaling_model.step_s(compute_s, gradient_bytes, workers, link)}


def _train_args(model: str, data_dir: str, steps: int, workers: int, strategy: str) -> list[str]:
    """`helpers train` for one worker's share: the per-replica batch, data cached after 2 steps."""
    return ["-m", "helpers", "train", "--model", model, "--batch", str(PER_REPLICA_BATCH), "--skip-eval",
            *warm_cache_args(PER_REPLICA_BATCH * workers, steps), "--data-dir", data_dir, "--strategy", strategy]


def _compute(results: list[dict], expected: int) -> dict:
    if len(results) != expected:
        raise CourseError(f"the compute runs printed {len(results)} of {expected} results")
    return {"median_step_s": median([r["median_step_s"] for r in results]),
            "gradient_bytes": results[0]["gradient_bytes"],
            "xla": same_jit_compile({f"compute run {i}": r for i, r in enumerate(results)})}


def _local_compute(model: str, data_dir: str, steps: int, n: int) -> dict:
    """n local processes training at once without a cluster, each with a worker's threads."""
    intra, inter = threads_for(n)
    outcomes = run_local_workers(_train_args(model, data_dir, steps, n, "default"), n, deadline_s=900,
                                 env={**os.environ, "TF_NUM_INTRAOP_THREADS": str(intra),
                                      "TF_NUM_INTEROP_THREADS": str(inter), "TF_CPP_MIN_LOG_LEVEL": "2"})
    failed = [o for o in outcomes if o.returncode != 0]
    if failed:
        raise CourseError(f"compute run {failed[0].rank} failed: {failed[0].output.strip()[-500:]}")
    return _compute([parse_result_lines(o.output)[-1] for o in outcomes], n)


def _srun_output(args: list[str], nodes: int, timeout: float = 900) -> str:
    """Output of `python ARGS` as one task per node of an srun step, its files under the output
    directory (which the nodes share)."""
    from ..environment import output_dir
    from ..slurm.commands import srun_per_node

    return srun_per_node([sys.executable, *args], nodes, output_dir(), timeout=timeout,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


def _slurm_point(model: str, data_dir: str, steps: int, nodes: int) -> tuple[dict, dict, dict[int, float]]:
    """(compute, the chief's training result, all-reduce times) of `nodes` tasks, one per Slurm node."""
    compute = _compute(parse_result_lines(_srun_output(_train_args(model, data_dir, steps, nodes, "default"), nodes)),
                       nodes)
    results = parse_result_lines(_srun_output(_train_args(model, data_dir, steps, nodes, "multiworker"), nodes))
    chief = [r for r in results if r.get("rank") == 0]
    if not chief:
        raise CourseError("the Slurm training step printed no result from rank 0")
    probe_out = _srun_output(["-m", "helpers.allreduce_probe", "--sizes-mb", *map(str, DEFAULT_SIZES_MB)], nodes)
    return compute, chief[0], parse(probe_out)


def slurm_nodes_from_here() -> bool:
    """Whether the bench can ask Slurm for 2 nodes of their own: Slurm answers here and this process
    runs in no job (inside one, `srun --nodes=2` runs in that job's allocation, which may not hold two)."""
    from ..slurm import slurm_reachable

    return slurm_reachable() and "SLURM_JOB_ID" not in os.environ


def scaling_rows(model: str, data_dir: str, steps: int, repeats: int = 1, workers: tuple[int, ...] = (2, 3), *,
                 two_slurm_nodes: bool) -> list[Row]:
    """Measured against predicted step time for each configuration (see the module docstring): `workers`
    local workers each, and with `two_slurm_nodes` 2 workers on 2 Slurm nodes (the bench: `slurm_nodes_from_here`)."""
    configs = [(f"{n} local workers", n, "local") for n in workers]
    if two_slurm_nodes:
        configs.append(("2 workers on 2 Slurm nodes", 2, "slurm"))
    runs = {label: {"compute": [], "measured": [], "probe": []} for label, _, _ in configs}
    gradient_bytes = 0.0
    ran = {}  # compute runs (no strategy) and clusters (MWMS) alike: the same jit_compile, or no comparison
    for i in range(repeats):
        for label, n, where in configs:
            if where == "local":
                compute = _local_compute(model, data_dir, steps, n)
                point = training_point("multiworker", n, model, data_dir, steps, PER_REPLICA_BATCH)
                probe = measure_local(n, DEFAULT_SIZES_MB)
            else:
                compute, point, probe = _slurm_point(model, data_dir, steps, n)
            gradient_bytes = compute["gradient_bytes"]
            ran.update({f"{label} {i + 1}, compute": compute, f"{label} {i + 1}, cluster": point})
            runs[label]["compute"].append(compute["median_step_s"])
            runs[label]["measured"].append(point["median_step_s"])
            runs[label]["probe"].append(probe)
            say(f"  {model} {label}, repeat {i + 1}/{repeats}: compute {compute['median_step_s'] * 1000:.0f} ms, "
                 f"as one cluster {point['median_step_s'] * 1000:.0f} ms/step; all-reduce "
                 f"{max(probe.values()) * 1000:.0f} ms for {max(probe) / 1e6:.0f} MB")
    jit = same_jit_compile(ran)
    rows = []
    for label, n, _ in configs:
        run = runs[label]
        probe = {size: median([t[size] for t in run["probe"]]) for size in run["probe"][0]}
        step = predict(median(run["compute"]), gradient_bytes, probe, n, label)
        link = step["link"]
        rows.append(Row(
            f"{MODEL_NAMES[model]} step, {label}, per-replica batch {PER_REPLICA_BATCH}: measured / model",
            median(run["measured"]) * 1000, step["step_s"] * 1000, "ms", False, "report",
            f"model: compute {step['compute_s'] * 1000:.1f} ms ({n} processes at once, not communicating) + ring "
            f"all-reduce {step['allreduce_s'] * 1000:.1f} ms ({gradient_bytes / 1e6:.1f} MB at "
            f"{link.bandwidth / 1e6:.0f} MB/s, latency {link.latency * 1000:.2f} ms); jit_compile={jit} in compute "
            "and cluster runs", versus_defaults=False))
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
