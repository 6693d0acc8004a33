"""Every notebook's proof cell raises when its claim is false.

Each notebook ends with a cell that asserts what the lesson claims, on figures a cell before
it measured. Here that cell's own source runs on figures like those a correct run produces
(it must pass) and on figures where one claim is broken (it must raise, naming the claim),
so no proof cell can silently stop proving anything.
"""

import collections
import math
import os
from pathlib import Path
from types import SimpleNamespace

import nbformat
import numpy as np
import pytest

from helpers.settings import value as settings_value
from helpers.take_home import copy_beside

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
ENVIRON = "ENVIRON"  # a broken variant's key: environment variables set while its proof runs


def proof_source(name: str) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    proofs = [c.source for c in nb.cells if c.cell_type == "code" and "assert" in c.source
              and "solution" not in c.metadata.get("tags", [])]  # exercises' solutions check themselves too
    return proofs[-1]


def _run(name: str, namespace: dict) -> None:
    _execute(proof_source(name), name, namespace)


def _holds_unless(match: str | None, prove, *args) -> None:
    """The proof passes on the correct data (`match` None), else fails with `match` in its message."""
    if match is None:
        prove(*args)
    else:
        with pytest.raises(AssertionError, match=match):
            prove(*args)


def _strategy(replicas: int):
    return SimpleNamespace(num_replicas_in_sync=replicas)


# lesson 01's small CNN: the shapes of its trainable weights, in order
_CNN_SHAPES = [(3, 3, 3, 32), (32,), (32,), (3, 3, 32, 64), (64,), (64,), (64, 10), (10,)]


class _Sizes:
    def __init__(self, **sizes):
        self.__dict__.update(sizes)


OK: dict[str, dict] = {
    "00_environment.ipynb": {
        "dataset": SimpleNamespace(train_size=2048, synthetic=True, label="SYNTHETIC"),
        "sizes": SimpleNamespace(per_replica_batch=32, quick=True, mode="quick", train_examples=2048),
        "data": SimpleNamespace(DATA_DIR_ENV="COURSE_TEST_UNSET_VARIABLE"), "labels": list(range(10)) * 40},
    "01_mirrored_strategy.ipynb": {
        "strategy": _strategy(2), "copies": {2}, "updated_gap": 0.0, "moving_gap": 0.07, "saved_is_replica_0": True,
        "slot_shapes": _CNN_SHAPES, "weight_shapes": _CNN_SHAPES, "moved": 0.05, "slot_size": 0.01,
        "partial_splits": {1: [1, 0], 2: [1, 1], 3: [2, 1], 4: [2, 2]},
        "expected_splits": {1: [1, 0], 2: [1, 1], 3: [2, 1], 4: [2, 2]}},
    "02_input_pipelines.ipynb": {
        "per_replica": [[0, 1, 2, 3], [4, 5, 6, 7]], "from_fn_per_replica": [[0, 1, 2, 3], [4, 5, 6, 7]],
        "global_batch": 8, "counted_once": {1: True, 2: True, 3: True}, "cached_rate": 5000.0,
        "training_rate": 300.0, "reads_in_3_passes": 2048, "examples_in_split": 2048,
        "traced_keep": [[4], [2]], "traced_drop": [[4]],
        # an empty replica batch, as a CPU with oneDNN runs it (the convolution keeps the input's 3 channels)
        "last_split": [1, 0], "empty_loss": 1.231, "gamma_nan": [True, True], "conv_shape": [0, 32, 32, 3],
        "cnn_evaluate": "stopped: Incompatible shapes: [32] vs. [0,32,32,3]",
        "cnn_fit": "stopped: Incompatible shapes: [32] vs. [3]", "cnn_gamma_nan": False, "cnn_control": "ran",
        # per-replica batches of each worker (two replicas each): 100 examples padded, 95 cut to whole global batches
        "batches_per_worker": {1: {"evaluation": [14], "training": [10]}, 2: {"evaluation": [8, 8], "training": [4, 4]},
                               3: {"evaluation": [6, 6, 6], "training": [2, 2, 2]}},
        "seen": {r: {"replicas in sync": 2, "DATA": [i for i in range(32) if i % 8 // 4 == r], "OFF": list(range(32)), "dataset_fn": list(range(r, 32, 2)),
                     "mapped in 2 passes, DATA": 32, "mapped in 2 passes, dataset_fn": 16,
                     **{f"{policy}, 1 file": ("InvalidArgumentError: Could not apply FILE based sharding: the dataset only has 1 "
                                              "file(s), which is not enough" if r == 0 else
                                              "UnavailableError: Collective ops is aborted") for policy in ("FILE", "AUTO")}}
                 for r in (0, 1)}},
    "03_multiworker_ipyparallel.ipynb": {
        "in_sync": [2, 2], "task_ids": [0, 1], "seen": [["a", "b"], ["c", "d"]], "overlap": 0,
        "moved": [0.5, 0.5], "digests": ["d", "d"], "predicted_rows": [512, 512], "padded": [512, 512],
        "val_losses": [[2.1, 1.9], [2.1, 1.9]], "sizes": _Sizes(epochs=2), "found_at": [[0], [32]],
        "rows": [32, 32], "fit_shards": [[(0, 2)], [(1, 2)]], "pass_shards": [[(0, 2)], [(1, 2)]],
        "kept": [True, False], "initial_digests": ["a", "a"], "own_digests": ["a", "b"], "local_replicas": [1, 1],
        "prediction_digests": ["p", "p"], "train_losses": [[1.6, 0.6], [1.6, 0.6]], "uneven_rows": [512, 512],
        # the padded evaluation as a run measured it: 480 test images in 512 rows, loss x 480/512
        "padding_checks": [{"real": 480, "padded": 512, "accuracy": 0.0895833, "plain accuracy": 0.0895833333,
                            "loss": 2.1799622, "plain loss": 2.3252931}] * 2},
    "04_custom_training_loop.ipynb": {
        "in_sync": [2, 2], "seen": [["a"], ["b"]], "overlap": 0, "digests": ["d", "d"], "initial": ["i", "i"],
        "strategy": _strategy(2),
        "right_gap": 1e-7, "wrong_gap": 1e-2, "step_size": 1e-2, "tf32": False, "test": {"examples": 511}, "test_images": 511,
        "worker_test_counts": [511, 511], "global_batch": 64,
        "precision": {"mixed_float16": {"compute": "float16", "loss scale": 32768.0, "steps unscaled": 1, "compile wraps": True, "loss": 0.1,
                                        "moved vs float32": 1.0},
                      "mixed_bfloat16": {"compute": "bfloat16", "loss scale": None, "compile wraps": False, "loss": 0.1,
                                         "moved vs float32": 1.01}},
        "underflow": {"float16": 0.0, "bfloat16": 1e-8, "float16, scaled by 32768": 0.000328},
        "lazy_build": {"momentum (slots)": "InvalidArgumentError", "no momentum (no slot)": None}},
    "05_sync_batch_norm.ipynb": {
        "strategy": _strategy(2), "all_reduces": 6, "spread_plain": 0.05, "spread_sync": 0.0, "moved_sync": 0.02, "same_start": True,
        "gaps": {"synchronized vs global": 1e-7, "synchronized vs own": 2.0, "ordinary vs own": 1e-7,
                 "ordinary vs global": 2.0}},
    "06_fault_tolerance.ipynb": {
        "first_failed": True, "survivor_stopped": True, "backups": ["worker-0", "worker-1"], "N_ENGINES": 2,
        "first_errors": ["engine 0: UnavailableError: Collective ops is aborted by: recvmsg:Connection reset by peer",
                         "engine ?: EngineError: Engine 1 died while running task 'd207b276'"],
        "crash_to_error_s": 1.2, "backup_epochs": {"worker-0": 2, "worker-1": 2},
        "crash_epoch": 2, "epochs": 4, "backup_weights": "b", "fresh_weights": "init",
        "results": [{"rank": r, "epochs run": [2, 3], "weights at start": "b", "weights": "a"} for r in (0, 1)],
        # beside a peer alive but never joining: the all-reduce's error and its wait; beside a peer that
        # joined 13 s late, with no timeout: what each worker got, how long worker 0 waited
        "TIMEOUT_S": 3, "timeout_error": "DeadlineExceededError", "waited_s": 3.1,
        "late_results": [2.0, 2.0], "late_waited_s": 13.1},
}


def _point(label, replicas, agree=True):
    """A point as lesson 07 records it: a MirroredStrategy point in this process, or a multi-worker
    point of `replicas` workers with one replica each, started as `replicas` workers."""
    multi = label == "MultiWorkerMirroredStrategy"
    return {"label": label, "replicas": replicas, "global_batch": 32 * replicas, "steps": 11, "weights_agree": agree,
            "replica_batches": [32] * (1 if multi else replicas), "jit_compile": False, "auto_jit": "",
            **({"workers": replicas, "started": replicas} if multi else {})}


OK["07_scaling_performance.ipynb"] = {
    "points": [_point("MirroredStrategy", 1), _point("MirroredStrategy", 2), _point("MultiWorkerMirroredStrategy", 2)],
    "per_replica": 32, "STEPS": 10,
    "in_steps": {("MirroredStrategy", 1): 0.97, ("MirroredStrategy", 2): 0.95, ("MultiWorkerMirroredStrategy", 2): 0.99},
    "jit": {("MirroredStrategy", 1): False, ("MirroredStrategy", 2): False, ("MultiWorkerMirroredStrategy", 2): False},
    "clustering": {("MirroredStrategy", 1): "", ("MirroredStrategy", 2): "", ("MultiWorkerMirroredStrategy", 2): ""}}


def _plan(rank: int, host: str) -> dict:
    return {"rank": rank, "host": host, "address": f"{host}:20000"}


OK["08_batch_job.ipynb"] = {
    "imported": ["json", "keras", "tensorflow"], "NODES": 2, "use_slurm": True,
    "plans": [_plan(0, "node1"), _plan(1, "node2")], "reports": [{"weights": "w"}, {"weights": "w"}], "course_modules": [],
    "steps_run": 64,
    "hosts": ["node1", "node2"], "result": {"workers": 2, "replicas": 2, "loss": [2.3, 1.6]}, "digests": {"w"},
    "event_files": ["tensorboard/train/events.out.tfevents.1.node1"],
    "written": ["model.keras", "result.json", "tensorboard/train/events.out.tfevents.1.node1"],
    "added": ["--exclusive=user", "--gpus-per-task=1"], "job_seen": {"sharing": "USER", "gpus": 2}, "seen_markers": [],
    "gpus_each": 1, "replicas_expected": 2, "kept_here": [0], "sbatch_exclusive": True}


OK["09_monitoring.ipynb"] = {
    "event_files": {"starved": 1, "healthy": 1}, "histories": {"starved": {"loss": [1.5, 0.5]}, "healthy": {"loss": [1.4, 0.6]}},
    "logged": {"starved": {"epoch_loss": [1.5, 0.5]}, "healthy": {"epoch_loss": [1.4, 0.6]}}, "loss_gap": 0.0,
    "PROFILED_STEPS": 8, "traces": {"starved": {"steps": 8}, "healthy": {"steps": 8}},
    "shares": {"starved": 0.66, "healthy": 0.02}, "per_step_ms": {"starved": 94.0, "healthy": 24.0},
    "served_loss": {"starved": [1.5, 0.5], "healthy": [1.4, 0.6]}, "served_gap": 0.0, "weights_count": 12,
    "graphs": 1, "in_second_epoch": {"starved": True, "healthy": True},
    "histograms": {f"layer{i}/w/histogram": 2 for i in range(12)},
    "traced_reads": {"starved": 128, "healthy": 0}, "global_batch": 16,
    "served_two": [(0, 2.1)], "kept_two": [(0, 2.0), (1, 1.5), (2, 1.0), (0, 2.1)]}  # the planted pair of writers


_RUNS = {f"batch 32{s}": None for s in ("",)} | {f"batch 512, {s}": None for s in
                                                   ("same rate", "linear, no warm-up", "linear + warm-up", "sqrt + warm-up")}
OK["10_large_batches.ipynb"] = {
    "runs": _RUNS, "base_lr": 0.025, "FACTOR": 16, "count": 2048, "per_epoch": 2048, "SMALL": 32, "large": 512,
    "rates": {"start": 0.025, "after warm-up": 0.4, "sqrt peak": 0.1},  # as the optimizers took them
    "final": {"batch 32": 0.07, "batch 512, same rate": 1.4, "batch 512, linear, no warm-up": 0.7,
              "batch 512, linear + warm-up": 0.1, "batch 512, sqrt + warm-up": 0.67},
    # each step's loss, from a start above ln 10 as the runs measure it (3.20): without warm-up the third
    # step spikes above the start, with warm-up no step does
    "step_loss": {"batch 512, linear, no warm-up": [3.2, 3.1, 5.2, 3.0, 2.1] + [1.0] * 19,
                  "batch 512, linear + warm-up": [3.2, 2.9, 2.6, 2.3, 2.0] + [1.0] * 19},
    "during_warmup": {"batch 32": 2.1, "batch 512, same rate": 2.28, "batch 512, linear, no warm-up": 3.0,
                      "batch 512, linear + warm-up": 2.26, "batch 512, sqrt + warm-up": 2.27},
    "epochs": 6, "warmup_steps": 6, "iterations": {"batch 32": 384, **{n: 24 for n in _RUNS if n != "batch 32"}},
    "last_rate": {n: 0.0 for n in _RUNS}, "halfway": {n: 1.0 for n in _RUNS}}


def _lb(key: str, **changes) -> dict:
    return {key: {**OK["10_large_batches.ipynb"][key], **changes}}


def _requeued(final: str, **changes) -> dict:
    """A warned run as the quick mode's 2 workers give it: 2 epochs of 32 steps, a checkpoint every 16,
    warned in the second epoch, stopped at step 48 (16 steps into epoch 1), resumed there, 80 steps in all."""
    return {"runs": [0, 1], "outcomes": ["stopped", "finished"], "stopped at": ["s"], "saved before stop": "s",
            "resumed from": ["s"], "final": [final], "stopped in": [1, 16], "resumed at epoch": [1],
            "iterations at start": [0, 48], "iterations at stop": 48, "iterations at end": [80],
            "epochs, steps per epoch": [2, 32], "stop steps": [48], "workers": [0, 1], "stopped ranks": [0, 1],
            "finished ranks": [0, 1], "exit statuses": [[3, 3], [0, 0]], **changes}


OK["11_checkpoints_requeue.ipynb"] = {"result": {
    "custom, warned": _requeued("u"), "handler, warned": _requeued("u", **{"stop steps": [41]}), "fit, warned": _requeued("f"),
    "custom, never warned": {"runs": [0], "outcomes": ["finished"], "final": ["u"]},
    "fit, never warned": {"runs": [0], "outcomes": ["finished"], "final": ["g"]}}, "use_slurm": False}


def _rq(name: str, summary: dict, use_slurm: bool = False) -> dict:
    return {"result": {**OK["11_checkpoints_requeue.ipynb"]["result"], name: summary}, "use_slurm": use_slurm}


def _seen(changes: dict) -> dict:
    good = OK["02_input_pipelines.ipynb"]["seen"]
    return {r: {**good[r], **changes.get(r, {})} for r in good}


_PS = "/job:ps/replica:0/task:0/device:CPU:0"
_PS_STEPS, _PS_WORKERS = 40, 2  # scheduled steps; each worker also takes one warm-up step
OK["12_strategy_tour.ipynb"] = {
    "roles": [("chief", 0, "h", 11), ("worker", 0, "h", 12), ("worker", 1, "h", 13), ("ps", 0, "h", 14)], "PS_WORKERS": _PS_WORKERS,
    "variable_devices": [_PS], "applied_updates": _PS_STEPS + _PS_WORKERS, "moved_updates": _PS_STEPS + _PS_WORKERS,
    "optimizer_count": _PS_STEPS - 5, "async_log": [(2.3, 0, 1, 0.0, 0.1)] * _PS_STEPS, "overlapping": 30,
    "staleness": [0, 1, 2] * 13 + [0], "first": 2.31, "last": 1.2, "sync_first": 2.31, "sync_last": 0.9,
    "sync_digests": ["d", "d"], "sync_in_sync": [2, 2], "sync_locals": [1, 1], "sync_logs": [[], []], "overflow_step": 119,
    "copies": {"OneDevice": 1, "Mirrored": 2, "CentralStorage": 1}, "replicas": 2,
    "before": {"OneDevice": 2.34, "Mirrored": 2.35, "CentralStorage": 2.35},
    "evaluated": {"OneDevice": 0.4, "Mirrored": 0.5, "CentralStorage": 0.5}, "central_mean": 5 / 3,
    "central_bn_error": "You must specify an aggregation method to update a AggregatingVariable in Replica Context",
    "fit_errors": {"per-worker": "Unrecognized data type: x=<PerWorkerDatasetFromDataset ...>",
                   "tf.data": "To use this dataset, you need to pass this dataset to ClusterCoordinator."
                              "create_per_worker_dataset."}}
_STEP_1 = ["step-1.data-00000-of-00001", "step-1.index"]  # what tf.train.Checkpoint.write leaves
OK["13_from_horovod.ipynb"] = {
    "ranks": [0, 1], "sizes": [2, 2], "initial_digests": ["i", "i"], "start_gap": 0.0, "gradient_gap": 2e-8,
    "gradient_size": 0.1, "update_gap": 3e-9, "rates": [0.1, 0.1], "BASE_LR": 0.05,
    "collective": [[[10.5], [10.0, 11.0], [11.0, -11.0]]] * 2,  # mean, gather, broadcast from the last rank
    "checkpoints": [{"dir": "/w/checkpoint", "wrote": _STEP_1, "left": True, "on_read": []},
                    {"dir": "/tmp/t1", "wrote": _STEP_1, "left": False, "on_read": []}],
    "left": [(0, "/w/checkpoint")], "chief_dir": "/w/checkpoint", "kept": _STEP_1,
    "horovod_gaps": {"gradient": 5e-9, "weights": 7e-9, "recipe": 1.5e-6}}

_LEVERS = {"as it is: batch 64, float32 gradients, no overlap": 0.31, "per-GPU batch 256 (4x the compute per step)": 0.65,
           "InfiniBand 200 Gbit/s instead (8x the bandwidth)": 0.79,
           "TF32 instead of mixed precision (909 images/s: slower GPUs)": 0.54,
           "batch 256 + float16 gradients + 70% overlap": 0.92}
_XLA = {"alone": False, **{f"engine {i}, {step}": False for i in (0, 1) for step in
                           ("together", "distributed, 0 bytes per pack", "distributed, 4194304 bytes per pack",
                            "all-reduce probe")}}
OK["14_predicting_scaling.ipynb"] = {
    "compute_s": 0.06, "allreduce_s": 0.066, "predicted_s": 0.126, "measured_s": 0.1638, "ratio": 1.3, "compute_only": 2.73,
    "growth": 1.75,
    "clustering": {"kernel": "", "engine 0": "", "engine 1": ""},
    "overlap_seen": -0.08, "overlap": 0.0, "packed_ratio": 1.4,
    "times": {1_000_000: 0.009, 4_000_000: 0.02, 16_000_000: 0.064},
    "projection": {(64, "a"): {1: 1.0, 2: 0.87, 8: 0.79}, (64, "b"): {1: 1.0, 2: 0.44}},
    "monotone": {(64, "a"): True, (64, "b"): True}, "ordered": {64: [0.74, 0.61, 0.28], 128: [0.85, 0.76, 0.44]},
    "references": [("DGX A100, mixed, b256", 8, 0.915, 0.993)],
    "levers": {name: {"efficiency": e} for name, e in _LEVERS.items()}, "xla": _XLA}


_SAVED = [True, True, True, False]  # written after epochs 0-2; epoch 3 (the staged 20x learning rate) is worse
OK["15_models_you_keep.ipynb"] = {
    "val_loss": [2.0, 1.8, 1.7, 3.5], "improved": [0, 1, 2], "best_epoch": 2, "saved": [_SAVED, _SAVED],
    "digests": [["a", "b", "c", "d"]] * 2, "file_digest": "c", "histories": [{"val_loss": [2.0, 1.8, 1.7, 3.5]}] * 2,
    "checkpoint_best": [1.7, 1.7], "copies_left": [0], "shared_elsewhere": [],
    "models_listed_by": {"this kernel": ["15_best.keras"], "worker 0": ["15_best.keras"], "worker 1": ["15_best.keras"]},
    "mirrored_replicas": 3, "worker_replicas": 2, "stored_jit": False,
    "on_read": [{"in the file": [], "metrics": ["loss/total", "loss/count"]}] * 2, "served_status": 0, "served_loaded": [],
    "differences": {"no strategy": 0.0, "OneDeviceStrategy": 0.0, "MirroredStrategy, 3 replicas": 0.0,
                    "exported, served": 0.0},
    "losses": {"no strategy": 1.7, "OneDeviceStrategy": 1.7000001, "MirroredStrategy, 3 replicas": 1.7000002},
    "tf32_on": {"workers": False, "here": False, "serving program": False}, "prediction_tolerance": 0.0,  # on CPUs: bit for bit
    "loss_tolerance": 2 * (96 + 12 + 2) * 2**-24,  # on CPUs: 384 images, batches of 32 per replica, 96 here
    "jit": {"no strategy": False, "OneDeviceStrategy": False, "MirroredStrategy, 3 replicas": False}}


_FILES = {2: [[0, 2, 4, 6], [1, 3, 5, 7]], 3: [[0, 3, 6], [1, 4, 7], [2, 5]]}
_READS = {"shared every epoch": {"shared": [64, 64, 64], "node-local": [0, 0, 0]},
          "cache(filename=...)": {"shared": [64, 0, 0], "node-local": "from the cache file (not counted)"},
          "staged": {"shared": [128, 0, 0, 0], "node-local": [0, 64, 64, 64]}}
OK["16_input_at_scale.ipynb"] = {
    "NODES": 2, "STEPS": 64, "TIMED": 64, "ALL": 128, "reports": {2: [{}, {}], 3: [{}, {}, {}]}, "files_of": _FILES,
    "expected": _FILES, "reshuffled": True, "hidden_first": {2: True, 3: True},
    "cache_files": ["cache.data-00000-of-00001", "cache.index"],
    "counts": {2: [1024, 1024], 3: [768, 768, 512]}, "covered": {2: True, 3: True},
    "staged_everywhere": {2: True, 3: True}, "read_from": _READS, "copy_complete": True, "SHARDS": 8,
    "staged_files": {f"f{k}": "d" for k in range(8)}, "shared_files": {f"f{k}": "d" for k in range(8)},
    "epochs": {"shared every epoch": [0.96, 0.96, 0.97], "cache(filename=...)": [0.97, 0.03, 0.02],
               "staged": [0.03, 0.03, 0.02]},
    "same_data": True, "rate": {"map, then batch": 32000.0, "batch, then map": 65000.0}}


_VARIANTS = ("Keras 3", "Keras 3 + fix", "Keras 2 (tf_keras)")
_FLAGGED = {"here": [], "CPU build, 4 GPUs allocated": ["a CPU build"], "CUDA build, sees 2 of 4": ["2 of 4"],
            "CUDA build, sees 4 of 4": []}
OK["17_software_stack.ipynb"] = {
    "NODES": 2, "lmod_here": True, "use_slurm": False, "ran_stack": True, "loaded": True, "stack": {}, "stack_log": "",
    "tf_from_module": True, "keras_from_module": True, "extras_from_venv": True, "own_package_kept": True,
    "module_einops": "0.8.2", "recommended_route": True, "needs_module": True,
    "unloaded": {"tensorflow": False, "EBPYTHONPREFIXES": ""},
    "other_python": {"tensorflow": False, "keras": False, "einops": False}, "workers": dict.fromkeys(_VARIANTS, 2),
    "outcomes": {"Keras 3": ["ValueError"], "Keras 3 + fix": ["ok"], "Keras 2 (tf_keras)": ["ok"]},
    "keras_log": "ValueError: Attempt to convert a value (PerReplica:{...})",
    "keras3_fits": ["ValueError: Attempt to convert a value (PerReplica:{...})"] * 2,
    "weights": {"Keras 3": [None], "Keras 3 + fix": ["a"], "Keras 2 (tf_keras)": ["b"]},
    "versions": {"Keras 3": ["keras 3.15.1"], "Keras 3 + fix": ["keras 3.15.1"], "Keras 2 (tf_keras)": ["tf_keras 2.21.0"]},
    "imported": {"Keras 3": ["keras"], "Keras 3 + fix": ["keras"], "Keras 2 (tf_keras)": ["tf_keras"]},
    "flagged": _FLAGGED, "where": "this machine"}


_MISTAKES_18 = ("model outside strategy.scope()", "one checkpoint path for all", "global batch as each worker's batch",
                "shuffle seeded per worker")
_CHECKS_18 = ["strategy.scope()", "batch per replica", "input sharding", "same weights as one worker",
              "identical weights on every worker", "who writes"]
OK["18_your_own_script.ipynb"] = {
    "ORDER": ["as written", "scope fixed", "checkpoint fixed", "batch fixed", "seed fixed"],
    "SIGNS": dict.fromkeys(_MISTAKES_18), "CHECKS": _CHECKS_18, "named": dict.fromkeys(_MISTAKES_18, True),
    "turned_pass": dict.fromkeys(_MISTAKES_18, True), "codes": [1, 1, 1, 1, 0], "final": {},
    "passed": sorted(_CHECKS_18), "not_passed": [], "on_two_workers": True, "take_home": True,
    "stopped_alone": True, "first_stop": "FAIL     the run with 1 worker: ...: AssertionError", "wrote_alone": True,
    "alone_code": 0, "alone_files": ["ckpt.data-00000-of-00001", "ckpt.index"],
    "no_step_ran": True, "first_marks": "1.0 distribute_datasets_from_function at train.py:51\n1.9 script raised AssertionError",
    "to_the_end": {"checkpoint fixed": True, "batch fixed": True}, "alone_task_none": True,
    "alone": SimpleNamespace(stdout="worker None, epoch 0: loss 1.3427\n")}

def _levers(**changes) -> dict:
    return {"levers": {name: {"efficiency": changes.get(name, e)} for name, e in _LEVERS.items()}}


BROKEN: list[tuple[str, dict, str]] = [
    ("00_environment.ipynb", {"labels": [1, 2, 3]}, "all ten classes"),
    ("00_environment.ipynb", {"dataset": SimpleNamespace(train_size=16, synthetic=True, label="x")}, "smaller than one batch"),
    ("00_environment.ipynb", {"dataset": SimpleNamespace(train_size=2048, synthetic=False, label="x")}, "synthetic"),
    # 40 images: more than one per-replica batch, less than the mode's 2048 it would train on
    ("00_environment.ipynb", {"dataset": SimpleNamespace(train_size=40, synthetic=True, label="x")}, "smaller than one batch"),
    ("00_environment.ipynb", {"dataset": SimpleNamespace(train_size=1024, synthetic=True, label="x")}, "fewer than the mode"),
    # workshop mode (every image, batch 128) on a split that does not fill one global batch of 2 replicas
    ("00_environment.ipynb", {"sizes": SimpleNamespace(per_replica_batch=128, quick=False, mode="workshop",
                                                          train_examples=None),
                              "dataset": SimpleNamespace(train_size=200, synthetic=False, label="x")}, "smaller than one batch"),
    # workshop mode pointed (COURSE_DATA_DIR) at the synthetic data
    ("00_environment.ipynb", {"sizes": SimpleNamespace(per_replica_batch=128, quick=False, mode="workshop",
                                                          train_examples=None),
                              "dataset": SimpleNamespace(train_size=2048, synthetic=True, label="x")}, "needs real CIFAR-10"),
    ("01_mirrored_strategy.ipynb", {"copies": {1}}, "one copy per replica"),
    ("01_mirrored_strategy.ipynb", {"updated_gap": 1e-3}, "differ between replicas"),
    ("01_mirrored_strategy.ipynb", {"updated_gap": 1e-7}, "differ between replicas"),  # one ulp or so apart: not mirrored
    ("01_mirrored_strategy.ipynb", {"moving_gap": 0.0}, "moving statistics should differ"),
    ("01_mirrored_strategy.ipynb", {"saved_is_replica_0": False}, "replica 0's copies"),
    ("01_mirrored_strategy.ipynb", {"slot_shapes": []}, "one momentum slot per weight"),  # SGD without momentum
    ("01_mirrored_strategy.ipynb", {"slot_shapes": [], "weight_shapes": []}, "one momentum slot per weight"),  # nothing found
    # as many slots as weights, but not one per weight: the first two swapped (or one per layer, counted alike)
    ("01_mirrored_strategy.ipynb", {"slot_shapes": [_CNN_SHAPES[1], _CNN_SHAPES[0], *_CNN_SHAPES[2:]]},
     "one momentum slot per weight"),
    # SGD(0.0, momentum=0.9): every copy equal because nothing was updated, every slot zero
    ("01_mirrored_strategy.ipynb", {"moved": 0.0, "slot_size": 0.0}, "should move every weight"),
    ("01_mirrored_strategy.ipynb", {"moved": 0.0}, "should move every weight"),  # a weight the update never reached
    ("01_mirrored_strategy.ipynb", {"slot_size": 0.0}, "should move every weight"),  # a slot never written
    # 4 replicas splitting a partial batch as evenly as can be (5 as 2, 1, 1, 1) instead of 2 at a time
    ("01_mirrored_strategy.ipynb", {"strategy": _strategy(4), "copies": {4}, "partial_splits": {5: [2, 1, 1, 1], 6: [2, 2, 1, 1]},
                                    "expected_splits": {5: [2, 2, 1, 0], 6: [2, 2, 2, 0]}}, "partial batch should go out"),
    ("02_input_pipelines.ipynb", {"per_replica": [[0, 1, 2, 3], [0, 1, 2, 3]]}, "cover the global batch"),
    ("02_input_pipelines.ipynb", {"per_replica": [[0, 1, 2, 3], [4, 5, 6, 7, 7]]}, "exactly once"),  # a duplicate
    ("02_input_pipelines.ipynb", {"seen": _seen({1: {"dataset_fn": list(range(1, 31, 2))}})},
     "under dataset_fn worker 1"),  # example 31 lost
    ("02_input_pipelines.ipynb", {"from_fn_per_replica": [[0, 1, 2, 3, 4, 5, 6, 7], [0]]}, "cover the global batch"),
    ("02_input_pipelines.ipynb", {"seen": _seen({1: {"dataset_fn": list(range(0, 32, 2))}})},
     "under dataset_fn worker 1"),  # the unsharded dataset_fn of issue 13
    ("02_input_pipelines.ipynb", {"seen": _seen({1: {"DATA": [0, 1]}})}, "under DATA worker 1"),
    ("02_input_pipelines.ipynb", {"seen": _seen({1: {"OFF": [2, 3]}})}, "OFF both workers should see every example"),
    # each worker's first batch only (what the worker program reported before issue 54): DATA's halves of one batch
    ("02_input_pipelines.ipynb", {"seen": _seen({r: {"DATA": [4 * r + i for i in range(4)], "OFF": [0, 1, 2, 3]} for r in (0, 1)})},
     "under DATA worker 0"),
    ("02_input_pipelines.ipynb", {"seen": _seen({r: {"OFF": [0, 1, 2, 3]} for r in (0, 1)})}, "OFF both workers should see"),
    ("02_input_pipelines.ipynb", {"seen": _seen({0: {"OFF": [0, 1]}})}, "OFF both workers should see"),  # worker 0 short
    # DATA's halves the other way round: worker 0 the second half of every batch
    ("02_input_pipelines.ipynb", {"seen": _seen({r: {"DATA": [i for i in range(32) if i % 8 // 4 != r]} for r in (0, 1)})},
     "under DATA worker 0"),
    # one worker with every example, the other none: no example twice, yet not sharded
    ("02_input_pipelines.ipynb", {"seen": _seen({0: {"dataset_fn": []}, 1: {"dataset_fn": list(range(32))}})},
     "under dataset_fn worker 0"),
    ("02_input_pipelines.ipynb", {"seen": _seen({0: {"dataset_fn": list(range(32))}, 1: {"dataset_fn": []}})},
     "under dataset_fn worker 0"),
    # issue 54: disjoint shares that cover the ids, yet not each worker's own shard: DATA's halves, or the shards swapped
    ("02_input_pipelines.ipynb", {"seen": _seen({r: {"dataset_fn": [i for i in range(32) if i % 8 // 4 == r]} for r in (0, 1)})},
     "under dataset_fn worker 0"),
    ("02_input_pipelines.ipynb", {"seen": _seen({r: {"dataset_fn": list(range(1 - r, 32, 2))} for r in (0, 1)})},
     "under dataset_fn worker 0"),
    # the step traced once for both shapes (a static batch shape), or the dropped remainder traced anyway
    ("02_input_pipelines.ipynb", {"traced_keep": [[4]]}, "trace the step again"),
    ("02_input_pipelines.ipynb", {"traced_drop": [[4], [2]]}, "trace the step again"),
    # an empty replica batch: the example given to another replica, no NaN, NaN only where the batch was empty
    ("02_input_pipelines.ipynb", {"last_split": [0, 1]}, "all replicas but the first empty"),
    ("02_input_pipelines.ipynb", {"empty_loss": float("nan")}, "loss finite"),
    ("02_input_pipelines.ipynb", {"gamma_nan": [False, True]}, "gamma NaN on every replica"),
    ("02_input_pipelines.ipynb", {"gamma_nan": [False, False]}, "gamma NaN on every replica"),  # synchronized BN, say
    ("02_input_pipelines.ipynb", {"cnn_fit": "ran", "cnn_gamma_nan": False, "conv_shape": [0, 32, 32, 32],
                                  "cnn_evaluate": "ran"}, "the CNN trained on an empty replica batch"),
    # the convolution returned 3 channels, yet evaluate, or fit, went through
    ("02_input_pipelines.ipynb", {"cnn_evaluate": "ran"}, "evaluate and fit should stop"),
    ("02_input_pipelines.ipynb", {"cnn_fit": "ran", "cnn_gamma_nan": True}, "evaluate and fit should stop"),
    ("02_input_pipelines.ipynb", {"seen": _seen({0: {"mapped in 2 passes, dataset_fn": 32}})}, "only its half"),
    ("02_input_pipelines.ipynb", {"seen": _seen({0: {"mapped in 2 passes, DATA": 16}})}, "every example on every worker"),
    # no cache: the second pass maps every example again (64 and 32 map calls in two passes)
    ("02_input_pipelines.ipynb", {"seen": _seen({r: {"mapped in 2 passes, DATA": 64, "mapped in 2 passes, dataset_fn": 32}
                                                 for r in (0, 1)})}, "every example on every worker"),
    # both workers raising the FILE error (the other's collective never aborted), or worker 1 seeing no error
    ("02_input_pipelines.ipynb", {"seen": _seen({1: {"FILE, 1 file": "InvalidArgumentError: Could not apply FILE based "
                                                                     "sharding: the dataset only has 1 file(s)"}})},
     "on worker 0 only"),
    ("02_input_pipelines.ipynb", {"seen": _seen({1: {"FILE, 1 file": "no error"}})}, "abort worker 1's collective"),
    # the pipeline without .cache(): every pass reads the files (test_lesson_02_cache_... runs it for real)
    ("02_input_pipelines.ipynb", {"reads_in_3_passes": 6144}, "cache should serve"),
    ("02_input_pipelines.ipynb", {"seen": _seen({0: {"FILE, 1 file": "no error"}})}, "should raise"),
    # the worker caught some other error: a misspelled policy, say, raises AttributeError on both workers
    ("02_input_pipelines.ipynb", {"seen": _seen({r: {"FILE, 1 file": "AttributeError: type object 'AutoShardPolicy' "
                                                                     "has no attribute 'FILES'"} for r in (0, 1)})},
     "sharding error"),
    ("02_input_pipelines.ipynb", {"counted_once": {1: True, 2: False, 3: True}}, "every example once"),
    ("02_input_pipelines.ipynb", {"cached_rate": 100.0}, "slower than training"),
    ("02_input_pipelines.ipynb", {"training_rate": 6000.0}, "slower than training"),  # GPUs outpacing the input
    # a worker that got no examples at all shares none with its peer: disjoint, yet not sharded
    ("02_input_pipelines.ipynb", {"seen": _seen({0: {"DATA": []}})}, "under DATA worker 0"),
    ("02_input_pipelines.ipynb", {"seen": _seen({1: {"DATA": []}})}, "under DATA worker 1"),
    # issue 54: a counter the pipeline never touched (the cache claim must not pass on 0 reads)
    ("02_input_pipelines.ipynb", {"reads_in_3_passes": 0}, "cache should serve"),
    # the CNN failing on whole batches too: its stop on the empty batch would prove nothing
    ("02_input_pipelines.ipynb", {"cnn_control": "stopped: Incompatible shapes: [32] vs. [3]"}, "should train on whole batches"),
    # the convolution's shape right (no oneDNN), yet the runs stopped on something else (a label out of range, say), or
    # one of them did, or fit went on without NaN: none of it is the empty batch's NaN
    ("02_input_pipelines.ipynb", {"conv_shape": [0, 32, 32, 32], "cnn_gamma_nan": False,
                                  "cnn_evaluate": "stopped: Received a label value of 10 which is outside the valid range",
                                  "cnn_fit": "stopped: Received a label value of 10 which is outside the valid range"},
     "the CNN trained on an empty replica batch"),
    ("02_input_pipelines.ipynb", {"conv_shape": [0, 32, 32, 32], "cnn_gamma_nan": True, "cnn_fit": "ran",
                                  "cnn_evaluate": "stopped: Received a label value of 10 which is outside the valid range"},
     "the CNN trained on an empty replica batch"),
    ("02_input_pipelines.ipynb", {"conv_shape": [0, 32, 32, 32], "cnn_gamma_nan": True, "cnn_evaluate": "ran",
                                  "cnn_fit": "stopped: Received a label value of 10 which is outside the valid range"},
     "the CNN trained on an empty replica batch"),
    # FILE's error on worker 1 instead of worker 0 (the worker given the file is worker 0)
    ("02_input_pipelines.ipynb", {"seen": _seen({0: {"FILE, 1 file": "UnavailableError: Collective ops is aborted"},
                                                 1: {"FILE, 1 file": "InvalidArgumentError: Could not apply FILE based sharding"}})},
     "FILE with 1 file should raise its sharding error on worker 0 only"),
    # AUTO falling back to DATA with one file (no error on either worker), or worker 1 seeing no error under AUTO
    ("02_input_pipelines.ipynb", {"seen": _seen({r: {"AUTO, 1 file": "no error"} for r in (0, 1)})},
     "AUTO with 1 file should raise"),
    # (worker 1's error under AUTO is not checked: FILE's run left its collectives aborted, context.abort_collective_ops)
    # issue 54: two replicas per worker (a 4-GPU node), yet DATA's halves as with one: DATA deals per-replica pieces
    ("02_input_pipelines.ipynb", {"seen": _seen({r: {"replicas in sync": 4} for r in (0, 1)})}, "under DATA worker 0"),
    # the workers in clusters of different sizes, or 3 replicas each (a batch of 8 not cut in equal pieces)
    ("02_input_pipelines.ipynb", {"seen": _seen({1: {"replicas in sync": 4}})}, "equal replicas"),
    ("02_input_pipelines.ipynb", {"seen": _seen({r: {"replicas in sync": 6, "DATA": list(range(r, 32, 2))} for r in (0, 1)})},
     "equal pieces"),
    # training_dataset without its cut to whole global batches: 95 examples give the workers 6 and 5 batches
    ("02_input_pipelines.ipynb", {"batches_per_worker": {1: {"evaluation": [14], "training": [11]},
                                                         2: {"evaluation": [8, 8], "training": [6, 5]},
                                                         3: {"evaluation": [6, 6, 6], "training": [4, 4, 3]}}},
     "training: each of"),
    # evaluation padded to whole per-replica batches only: 13 batches of 8 on one worker of two replicas
    ("02_input_pipelines.ipynb", {"batches_per_worker": {**OK["02_input_pipelines.ipynb"]["batches_per_worker"],
                                                         1: {"evaluation": [13], "training": [10]}}},
     "evaluation: each of 1 worker"),
    ("03_multiworker_ipyparallel.ipynb", {"in_sync": [1, 1]}, "did not form one cluster"),
    # the workers answered from clusters of different sizes (one of them joined another run)
    ("03_multiworker_ipyparallel.ipynb", {"in_sync": [2, 3]}, "did not form one cluster"),
    # fit read unsharded data while the fingerprinted pass was sharded, or both read unsharded data
    ("03_multiworker_ipyparallel.ipynb", {"fit_shards": [[(0, 1)], [(0, 1)]]}, "the shard fit read"),
    ("03_multiworker_ipyparallel.ipynb", {"fit_shards": [[(0, 1)], [(0, 1)]], "pass_shards": [[(0, 1)], [(0, 1)]]},
     "the shard fit read"),
    # a worker whose pass yielded nothing: no overlap, trivially
    ("03_multiworker_ipyparallel.ipynb", {"seen": [["a", "b"], []]}, "shared examples"),
    ("03_multiworker_ipyparallel.ipynb", {"task_ids": [0, 0], "found_at": [[0], [0]],
                                          "fit_shards": [[(0, 2)], [(0, 2)]], "pass_shards": [[(0, 2)], [(0, 2)]],
                                          "kept": [True, True]}, "task ids"),
    ("03_multiworker_ipyparallel.ipynb", {"pass_shards": [[(0, 1)], [(0, 1)]]}, "the shard fit read"),
    ("03_multiworker_ipyparallel.ipynb", {"in_sync": [1], "task_ids": [0], "seen": [["a"]], "overlap": 0, "moved": [0.5],
                                          "digests": ["d"], "predicted_rows": [512], "padded": [512],
                                          "val_losses": [[2.1, 1.9]], "found_at": [[0]], "rows": [32],
                                          "fit_shards": [[(0, 1)]], "pass_shards": [[(0, 1)]], "kept": [True]},
     "at least 2 workers"),
    ("03_multiworker_ipyparallel.ipynb", {"found_at": [[32], [0]]}, "order of the shards"),
    ("03_multiworker_ipyparallel.ipynb", {"found_at": [[0], []]}, "order of the shards"),
    ("03_multiworker_ipyparallel.ipynb", {"val_losses": [[2.1, 1.9], [2.1, 1.8]]}, "same all-reduced validation loss"),
    ("03_multiworker_ipyparallel.ipynb", {"val_losses": [[2.1], [2.1]]}, "same all-reduced validation loss"),
    ("03_multiworker_ipyparallel.ipynb", {"seen": [["a"], ["a"]], "overlap": 1}, "shared examples"),
    ("03_multiworker_ipyparallel.ipynb", {"moved": [0.0, 0.0]}, "did not change the weights"),
    ("03_multiworker_ipyparallel.ipynb", {"digests": ["d", "e"]}, "different trainable weights"),
    # the model built outside the scope (or no broadcast): each worker starts from its own seed's weights
    ("03_multiworker_ipyparallel.ipynb", {"initial_digests": ["a", "b"]}, "worker 0's own weights"),
    # a common start that is not worker 0's seed's: worker 1's broadcast, or a seed spelled apart from the model's
    ("03_multiworker_ipyparallel.ipynb", {"initial_digests": ["b", "b"], "own_digests": ["a", "b"]}, "worker 0's own weights"),
    ("03_multiworker_ipyparallel.ipynb", {"initial_digests": ["z", "z"]}, "worker 0's own weights"),
    # the rows gathered in another order (or other rows) on one worker
    ("03_multiworker_ipyparallel.ipynb", {"prediction_digests": ["p", "q"]}, "same predictions"),
    # each worker logging its own shard's loss, not the all-reduced one
    ("03_multiworker_ipyparallel.ipynb", {"train_losses": [[1.6, 0.6], [1.6, 0.5]]}, "same training loss"),
    # a test set that filled whole batches: nothing padded, nothing shown
    ("03_multiworker_ipyparallel.ipynb", {"padding_checks": [{**OK["03_multiworker_ipyparallel.ipynb"]["padding_checks"][0],
                                                             "real": 512, "loss": 2.3252931}] * 2}, "need padding"),
    # the 32 padding rows weighted 1: the copies of the first images counted in the accuracy
    ("03_multiworker_ipyparallel.ipynb", {"padding_checks": [{**OK["03_multiworker_ipyparallel.ipynb"]["padding_checks"][0],
                                                             "accuracy": 0.1}] * 2}, "count for nothing"),
    # a loss divided by the real rows only (mean_with_sample_weight): not lower than the plain one
    ("03_multiworker_ipyparallel.ipynb", {"padding_checks": [{**OK["03_multiworker_ipyparallel.ipynb"]["padding_checks"][0],
                                                             "loss": 2.3252931}] * 2}, "real rows / all rows"),
    # one seed on every worker: identical starts would follow without any broadcast
    ("03_multiworker_ipyparallel.ipynb", {"own_digests": ["a", "a"]}, "own seeds should give different"),
    ("03_multiworker_ipyparallel.ipynb", {"predicted_rows": [256, 256]}, "all workers' rows"),
    # predict on the padded test set dropped the 32 rows of padding (at 2 or 4 workers the test set has none)
    ("03_multiworker_ipyparallel.ipynb", {"uneven_rows": [480, 480]}, "should return the padding too"),
    # worker 1's temporary copy left on its node; the chief's file missing on the chief's node
    ("03_multiworker_ipyparallel.ipynb", {"kept": [True, True]}, "only the chief should keep"),
    ("03_multiworker_ipyparallel.ipynb", {"kept": [False, False]}, "only the chief should keep"),
    ("04_custom_training_loop.ipynb", {"in_sync": [1, 1]}, "not one cluster"),
    ("04_custom_training_loop.ipynb", {"in_sync": [1]}, "not one cluster"),  # one worker alone: a cluster of 1
    ("04_custom_training_loop.ipynb", {"in_sync": [2, 3]}, "not one cluster"),  # workers in different clusters
    ("04_custom_training_loop.ipynb", {"seen": [["a"], []]}, "shared examples"),  # a worker that trained on nothing
    ("04_custom_training_loop.ipynb", {"seen": [["a"], ["a"]], "overlap": 1}, "shared examples"),
    ("04_custom_training_loop.ipynb", {"digests": ["i", "i"]}, "did not change the weights"),
    ("04_custom_training_loop.ipynb", {"digests": ["d", "e"]}, "different weights"),
    ("04_custom_training_loop.ipynb", {"right_gap": 1e-3, "wrong_gap": 1.0}, "disagree"),
    ("04_custom_training_loop.ipynb", {"tf32": True}, "TF32 was on"),
    ("04_custom_training_loop.ipynb", {"wrong_gap": 1e-7}, "per-replica batch should change"),
    # the runs 2e-5 apart: more than float32 rounding, though the wrong step is still 1 step off
    ("04_custom_training_loop.ipynb", {"right_gap": 2e-5}, "disagree"),
    # a step so small that the wrong divisor's gap (one step) is within 100 times the rounding gap
    ("04_custom_training_loop.ipynb", {"right_gap": 9e-6, "wrong_gap": 5e-4, "step_size": 5e-4}, "should change the step"),
    # a divisor of a quarter of the per-replica batch (8 times too large on 2 replicas): 7 steps off, not 1
    ("04_custom_training_loop.ipynb", {"wrong_gap": 7e-2}, "N times as large"),
    # 1.05 steps off, not 1: the wrong step 5% larger than N times the right one (measured: 1.000 on 2 and 3.000 on 4)
    ("04_custom_training_loop.ipynb", {"wrong_gap": 1.05e-2}, "N times as large"),
    ("04_custom_training_loop.ipynb", {"test": {"examples": 448}}, "evaluation counted"),  # a dropped remainder
    ("04_custom_training_loop.ipynb", {"worker_test_counts": [511, 448]}, "evaluation counted"),
    # a test split of whole global batches: nothing padded, so a dropped remainder would count all the same
    ("04_custom_training_loop.ipynb", {"test": {"examples": 512}, "test_images": 512, "worker_test_counts": [512, 512]},
     "no padding tested"),
    ("04_custom_training_loop.ipynb", {"precision": {
        "mixed_float16": {"compute": "float16", "loss scale": 32768.0, "steps unscaled": 1, "compile wraps": False, "loss": 0.1, "moved vs float32": 1.0},
        "mixed_bfloat16": {"compute": "bfloat16", "loss scale": None, "compile wraps": False, "loss": 0.1, "moved vs float32": 1.0}}}, "mixed_float16"),
    ("04_custom_training_loop.ipynb", {"precision": {
        "mixed_float16": {"compute": "float16", "loss scale": 32768.0, "steps unscaled": 1, "compile wraps": True, "loss": 0.1, "moved vs float32": 1.0},
        "mixed_bfloat16": {"compute": "bfloat16", "loss scale": None, "compile wraps": True, "loss": 0.1, "moved vs float32": 1.0}}}, "mixed_bfloat16"),
    ("04_custom_training_loop.ipynb", {"precision": {
        "mixed_float16": {"compute": "float16", "loss scale": 32768.0, "steps unscaled": 1, "compile wraps": True, "loss": float("nan"), "moved vs float32": 1.0},
        "mixed_bfloat16": {"compute": "bfloat16", "loss scale": None, "compile wraps": False, "loss": 0.1, "moved vs float32": 1.0}}}, "no finite loss"),
    ("04_custom_training_loop.ipynb", {"precision": {
        "mixed_float16": {"compute": "float16", "loss scale": 16384.0, "steps unscaled": 0, "compile wraps": True, "loss": 0.1, "moved vs float32": 1.0},
        "mixed_bfloat16": {"compute": "bfloat16", "loss scale": None, "compile wraps": False, "loss": 0.1, "moved vs float32": 1.0}}},
     "loss scale should be 32768"),  # the first step overflowed and was skipped
    # the step differentiated the unscaled loss and applied through optimizer.inner_optimizer: nothing scaled,
    # nothing divided back, the step as long as float32's, the scale untouched; the optimizer unscaled no step
    ("04_custom_training_loop.ipynb", {"precision": {
        "mixed_float16": {"compute": "float16", "loss scale": 32768.0, "steps unscaled": 0, "compile wraps": True, "loss": 0.1,
                          "moved vs float32": 1.0},
        "mixed_bfloat16": {"compute": "bfloat16", "loss scale": None, "compile wraps": False, "loss": 0.1, "moved vs float32": 1.0}}},
     "unscaled one step"),
    # a LossScaleOptimizer started at another scale (initial_scale=2**16): one step unscaled, not by 32768
    ("04_custom_training_loop.ipynb", {"precision": {
        "mixed_float16": {"compute": "float16", "loss scale": 65536.0, "steps unscaled": 1, "compile wraps": True, "loss": 0.1,
                          "moved vs float32": 1.0},
        "mixed_bfloat16": {"compute": "bfloat16", "loss scale": None, "compile wraps": False, "loss": 0.1, "moved vs float32": 1.0}}},
     "loss scale should be 32768"),
    # an optimizer with slots built lazily in the replica step that ran (what one replica does): the failure not shown
    ("04_custom_training_loop.ipynb", {"lazy_build": {"momentum (slots)": None, "no momentum (no slot)": None}}, "slots built inside"),
    # SGD without slots failing there too: the failure would not be the slots'
    ("04_custom_training_loop.ipynb", {"lazy_build": {"momentum (slots)": "InvalidArgumentError",
                                                      "no momentum (no slot)": "InvalidArgumentError"}}, "slots built inside"),
    # the step forgot to scale the loss: the optimizer still divided the gradients by 32768
    ("04_custom_training_loop.ipynb", {"precision": {
        "mixed_float16": {"compute": "float16", "loss scale": 32768.0, "steps unscaled": 1, "compile wraps": True, "loss": 0.1,
                          "moved vs float32": 3.05e-5},
        "mixed_bfloat16": {"compute": "bfloat16", "loss scale": None, "compile wraps": False, "loss": 0.1, "moved vs float32": 1.0}}},
     "about as far"),
    # a float16 step a fifth, or 3 times, as long as float32's (measured: 1.002); a 10x wider band would take both
    *[("04_custom_training_loop.ipynb", {"precision": {
        "mixed_float16": {"compute": "float16", "loss scale": 32768.0, "steps unscaled": 1, "compile wraps": True, "loss": 0.1,
                          "moved vs float32": moved},
        "mixed_bfloat16": {"compute": "bfloat16", "loss scale": None, "compile wraps": False, "loss": 0.1, "moved vs float32": 1.0}}},
       "about as far") for moved in (0.2, 3.0)],
    ("04_custom_training_loop.ipynb", {"underflow": {"float16": 1e-8, "bfloat16": 1e-8, "float16, scaled by 32768": 3e-4}},
     "vanish in float16"),
    ("04_custom_training_loop.ipynb", {"underflow": {"float16": 0.0, "bfloat16": 1e-8, "float16, scaled by 32768": 0.0}},
     "survive there once scaled"),  # the scaled gradient vanished too: scaling would not help
    ("04_custom_training_loop.ipynb", {"underflow": {"float16": 0.0, "bfloat16": 0.0, "float16, scaled by 32768": 3e-4}},
     "vanish in float16 only"),  # bfloat16 lost it too: no range advantage shown
    # the policy not set before building (the model computes in float32), though compile wrapped the optimizer
    ("04_custom_training_loop.ipynb", {"precision": {
        "mixed_float16": {"compute": "float32", "loss scale": 32768.0, "steps unscaled": 1, "compile wraps": True, "loss": 0.1, "moved vs float32": 1.0},
        "mixed_bfloat16": {"compute": "bfloat16", "loss scale": None, "compile wraps": False, "loss": 0.1, "moved vs float32": 1.0}}},
     "compute in float16"),
    ("04_custom_training_loop.ipynb", {"precision": {
        "mixed_float16": {"compute": "float16", "loss scale": 32768.0, "steps unscaled": 1, "compile wraps": True, "loss": 0.1, "moved vs float32": 1.0},
        "mixed_bfloat16": {"compute": "float32", "loss scale": None, "compile wraps": False, "loss": 0.1, "moved vs float32": 1.0}}},
     "compute in bfloat16"),
    ("05_sync_batch_norm.ipynb", {"gaps": {**OK["05_sync_batch_norm.ipynb"]["gaps"], "synchronized vs global": 2.0}},
     "global batch"),
    ("05_sync_batch_norm.ipynb", {"gaps": {**OK["05_sync_batch_norm.ipynb"]["gaps"], "ordinary vs global": 1e-7}},
     "differ from the global statistics"),
    ("05_sync_batch_norm.ipynb", {"gaps": {**OK["05_sync_batch_norm.ipynb"]["gaps"], "ordinary vs own": 1.0}},
     "each replica's own statistics"),
    ("05_sync_batch_norm.ipynb", {"all_reduces": 2}, "3 all-reduces"),
    ("05_sync_batch_norm.ipynb", {"all_reduces": 7}, "3 all-reduces"),  # review P1: 7 // 2 == 3 passed before
    ("05_sync_batch_norm.ipynb", {"moved_sync": 0.0}, "never moved"),  # review P2: identical zeros
    ("05_sync_batch_norm.ipynb", {"same_start": False}, "same weights"),  # review P3: runs from different seeds
    ("05_sync_batch_norm.ipynb", {"spread_plain": 0.0}, "different statistics"),
    ("05_sync_batch_norm.ipynb", {"spread_sync": 0.01}, "identical statistics"),
    # issue 54, thresholds: each between its bound and the bound loosened 10x (measured: gaps 6e-8 and 4e-7 where
    # 1e-4 is allowed, 2.07 where 0.1 is asked), and one float32 rounding of a moving mean apart where 0 is asked
    ("05_sync_batch_norm.ipynb", {"gaps": {**OK["05_sync_batch_norm.ipynb"]["gaps"], "synchronized vs global": 5e-4}},
     "global batch"),
    ("05_sync_batch_norm.ipynb", {"gaps": {**OK["05_sync_batch_norm.ipynb"]["gaps"], "ordinary vs own": 5e-4}},
     "each replica's own statistics"),
    ("05_sync_batch_norm.ipynb", {"gaps": {**OK["05_sync_batch_norm.ipynb"]["gaps"], "ordinary vs global": 0.05}},
     "differ from the global statistics"),
    ("05_sync_batch_norm.ipynb", {"spread_sync": 1e-7}, "identical statistics"),
    ("06_fault_tolerance.ipynb", {"first_failed": False}, "should have failed"),
    ("06_fault_tolerance.ipynb", {"survivor_stopped": False}, "not wait for its dead peer"),
    # the survivor stopped only when its collective timeout fired: the dead peer went unnoticed until then
    ("06_fault_tolerance.ipynb", {"first_errors": ["engine 0: DeadlineExceededError: Collective has timed out waiting "
                                                   "for other workers.", "engine ?: EngineError: Engine 1 died"]},
     "before the collective timeout"),
    # one survivor saw the death, another (3 workers) waited for the timeout
    ("06_fault_tolerance.ipynb", {"first_errors": ["engine 0: UnavailableError: Connection reset by peer",
                                                   "engine 2: DeadlineExceededError: Collective has timed out waiting "
                                                   "for other workers.", "engine ?: EngineError: Engine 1 died"]},
     "before the collective timeout"),
    # nothing says worker 0 raised: only the dead engine's line; or the UnavailableError was the dead engine's
    # own; or an UnavailableError with no engine lost
    ("06_fault_tolerance.ipynb", {"first_errors": ["engine ?: EngineError: Engine 1 died while running task 'd'"]},
     "a surviving one raised UnavailableError"),
    ("06_fault_tolerance.ipynb", {"first_errors": ["engine 1: UnavailableError: Connection reset by peer",
                                                   "engine ?: EngineError: Engine 1 died while running task 'd'"]},
     "a surviving one raised UnavailableError"),
    ("06_fault_tolerance.ipynb", {"first_errors": ["engine 0: UnavailableError: Connection reset by peer"]},
     "a surviving one raised UnavailableError"),
    # the survivor's error came only after the 30 s timeout, or no crash time was noted (nan)
    ("06_fault_tolerance.ipynb", {"crash_to_error_s": 31.0}, "within 30 s of the death"),
    ("06_fault_tolerance.ipynb", {"crash_to_error_s": float("nan")}, "within 30 s of the death"),
    ("06_fault_tolerance.ipynb", {"crash_to_error_s": -5.0}, "within 30 s of the death"),
    ("06_fault_tolerance.ipynb", {"backups": ["shared"]}, "one backup directory per worker"),
    # a backup a whole epoch behind (or ahead of) the crash: saved before the last epoch that finished
    ("06_fault_tolerance.ipynb", {"backup_epochs": {"worker-0": 2, "worker-1": 1}}, "every backup should hold epoch 2"),
    ("06_fault_tolerance.ipynb", {"backup_epochs": {"worker-0": 3, "worker-1": 3}}, "every backup should hold epoch 2"),
    ("06_fault_tolerance.ipynb", {"results": [{"rank": r, "epochs run": [0, 1, 2, 3], "weights at start": "b",
                                               "weights": "a"} for r in (0, 1)]}, "ran epochs"),
    ("06_fault_tolerance.ipynb", {"results": [{"rank": r, "epochs run": [2, 3], "weights at start": "init",
                                               "weights": "a"} for r in (0, 1)]}, "backup's weights"),  # epoch only
    ("06_fault_tolerance.ipynb", {"backup_weights": "init", "results": [
        {"rank": r, "epochs run": [2, 3], "weights at start": "init", "weights": "a"} for r in (0, 1)]}, "trained weights"),
    ("06_fault_tolerance.ipynb", {"results": [{"rank": r, "epochs run": [2, 3], "weights at start": "b",
                                               "weights": str(r)} for r in (0, 1)]}, "different weights"),
    # the all-reduce beside a hung peer: the dead-peer error instead of the timeout's, an error before the
    # timeout could fire, one long after it
    ("06_fault_tolerance.ipynb", {"timeout_error": "UnavailableError"}, "should time out"),
    ("06_fault_tolerance.ipynb", {"waited_s": 0.4}, "after about 3 s"),
    ("06_fault_tolerance.ipynb", {"waited_s": 11.0}, "after about 3 s"),
    # beside the late peer with no timeout: the heartbeats' error (a peer asleep counted as dead), or a
    # peer that joined before the heartbeat timeout could have told anything
    ("06_fault_tolerance.ipynb", {"late_results": [2.0, "UnavailableError"]}, "asleep past the heartbeat timeout"),
    ("06_fault_tolerance.ipynb", {"late_results": ["UnavailableError", "UnavailableError"]},
     "asleep past the heartbeat timeout"),
    ("06_fault_tolerance.ipynb", {"late_waited_s": 4.0}, "asleep past the heartbeat timeout"),
    ("07_scaling_performance.ipynb", {"points": [_point("MirroredStrategy", 1)]}, "more than one replica"),
    # a strategy whose replicas got the global batch each (batched by the global batch, not per replica)
    ("07_scaling_performance.ipynb", {"points": [_point("MirroredStrategy", 1),
                                                 dict(_point("MirroredStrategy", 2), replica_batches=[64, 64])]},
     "received batches"),
    # a "2-replica" point whose strategy had one replica's device only
    ("07_scaling_performance.ipynb", {"points": [_point("MirroredStrategy", 1),
                                                 dict(_point("MirroredStrategy", 2), replica_batches=[32])]},
     "received batches"),
    # the worker program built MirroredStrategy(["/cpu:0"]) in each of 2 processes: no cluster, 1 replica each
    ("07_scaling_performance.ipynb", {"points": [_point("MirroredStrategy", 1), _point("MirroredStrategy", 2),
                                                 dict(_point("MultiWorkerMirroredStrategy", 2), replicas=1, workers=1,
                                                      global_batch=32)],
                                      "in_steps": {**OK["07_scaling_performance.ipynb"]["in_steps"],
                                                   ("MultiWorkerMirroredStrategy", 1): 0.99}},
     "formed a cluster of 1"),
    # 2 workers of one replica each reported a cluster of 3 replicas: one batch each, but 2 batches for 3 replicas
    ("07_scaling_performance.ipynb", {"points": [_point("MirroredStrategy", 1), _point("MirroredStrategy", 2),
                                                 dict(_point("MultiWorkerMirroredStrategy", 2), replicas=3)],
                                      "in_steps": {**OK["07_scaling_performance.ipynb"]["in_steps"],
                                                   ("MultiWorkerMirroredStrategy", 3): 0.99}}, "received batches"),
    # 2 workers started, a cluster of 1 worker holding 2 replicas (one process trained alone on two devices)
    ("07_scaling_performance.ipynb", {"points": [_point("MirroredStrategy", 1), _point("MirroredStrategy", 2),
                                                 dict(_point("MultiWorkerMirroredStrategy", 2), workers=1,
                                                      replica_batches=[32, 32])]}, "formed a cluster of 1"),
    ("07_scaling_performance.ipynb", {"in_steps": {**OK["07_scaling_performance.ipynb"]["in_steps"],
                                                   ("MirroredStrategy", 2): 0.6}}, "inside timed steps"),
    ("07_scaling_performance.ipynb", {"in_steps": {**OK["07_scaling_performance.ipynb"]["in_steps"],
                                                   ("MirroredStrategy", 2): 1.3}}, "inside timed steps"),
    ("07_scaling_performance.ipynb", {"points": [_point("MirroredStrategy", 1), _point("MultiWorkerMirroredStrategy", 2, agree=False)]},
     "weights differ"),
    # one configuration measured with jit_compile=True (the measure() default changed, or the argument passed)
    ("07_scaling_performance.ipynb", {"jit": {**OK["07_scaling_performance.ipynb"]["jit"], ("MirroredStrategy", 1): True}},
     "without XLA"),
    # every configuration asked for jit_compile=False, but the workers ran with TF_XLA_FLAGS=--tf_xla_auto_jit=2
    ("07_scaling_performance.ipynb", {"clustering": {**OK["07_scaling_performance.ipynb"]["clustering"],
                                                     ("MultiWorkerMirroredStrategy", 2): "--tf_xla_auto_jit=2"}},
     "auto-clustering"),
    # the same value everywhere, but XLA: under a strategy over 2 logical CPUs it fails (tests/test_gpu_paths.py)
    ("07_scaling_performance.ipynb", {"jit": dict.fromkeys(OK["07_scaling_performance.ipynb"]["jit"], True)},
     "without XLA"),
    ("08_batch_job.ipynb", {"imported": ["helpers", "keras"]}, "imports the course"),
    # a worker loading the course without an import statement (importlib.import_module("helpers.keras_fix"))
    ("08_batch_job.ipynb", {"course_modules": ["helpers", "helpers.keras_fix"]}, "workers held"),
    # a learning rate of 1e-4: the loss fell, but by 0.0016 and above ln 10 (2.3026) after 64 steps
    ("08_batch_job.ipynb", {"result": {"workers": 2, "replicas": 2, "loss": [2.3122, 2.3106]}}, "learnt nothing"),
    # below ln 10, but by less than the margin
    ("08_batch_job.ipynb", {"result": {"workers": 2, "replicas": 2, "loss": [2.31, 2.1]}}, "learnt nothing"),
    ("08_batch_job.ipynb", {"reports": [{"weights": "w"}]}, "1 reports"),
    # every task planned and reporting, but the chief's result counts 1 worker in its cluster
    ("08_batch_job.ipynb", {"result": {"workers": 1, "replicas": 2, "loss": [2.3, 1.6]}}, "2 asked"),
    ("08_batch_job.ipynb", {"plans": [_plan(0, "node1"), _plan(1, "node1") | {"address": "node1:20000"}]},
     "share an address"),
    ("08_batch_job.ipynb", {"hosts": ["node1"]}, "one worker on each"),
    ("08_batch_job.ipynb", {"result": {"workers": 2, "replicas": 1, "loss": [2.3, 1.6]}}, "one cluster"),
    ("08_batch_job.ipynb", {"result": {"workers": 2, "replicas": 2, "loss": [1.6, 1.6]}}, "lower the loss"),
    ("08_batch_job.ipynb", {"digests": {"w", "v"}}, "differ"),
    ("08_batch_job.ipynb", {"event_files": ["tensorboard/train/a.tfevents", "tensorboard/train/b.tfevents"]},
     "more than one writer"),
    ("08_batch_job.ipynb", {"written": ["result.json"]}, "chief's model"),
    # the job's environment built as {**os.environ, ...}: its tasks report the markers the kernel set
    ("08_batch_job.ipynb", {"seen_markers": ["SLURM_COURSE_PARENT_MARKER"]}, "own Slurm settings"),
    ("08_batch_job.ipynb", {"seen_markers": ["ROCR_VISIBLE_DEVICES=course-parent-marker"]}, "own Slurm settings"),
    # every worker keeping its model in --out: ranks 0 and 1 report a file in the run's directory
    ("08_batch_job.ipynb", {"kept_here": [0, 1]}, "only the chief's model"),
    # resolve() not setting TF_CONFIG: each worker trains alone, the chief's result counts its own replicas
    ("08_batch_job.ipynb", {"result": {"workers": 2, "replicas": 1, "loss": [2.3, 1.6]}}, "did not form one cluster"),
    # two workers alone with 4 local replicas each: 4 in sync, 8 planned (the old >= NODES let it pass)
    ("08_batch_job.ipynb", {"result": {"workers": 2, "replicas": 4, "loss": [2.3, 1.6]}, "replicas_expected": 8},
     "did not form one cluster"),
    ("08_batch_job.ipynb", {"sbatch_exclusive": False}, "ask for --exclusive=user itself"),
    # job_options dropping the GPU option while the class asks for one per task: 0 GPUs, 2 expected
    ("08_batch_job.ipynb", {"added": ["--exclusive=user"], "job_seen": {"sharing": "USER", "gpus": 0}}, "should have 2 GPU"),
    ("08_batch_job.ipynb", {"job_seen": {"sharing": "OK", "gpus": 2}}, "exclusive=user exactly"),
    ("08_batch_job.ipynb", {"added": ["--oversubscribe", "--gpus-per-task=1"]}, "exclusive=user exactly"),
    ("08_batch_job.ipynb", {"job_seen": {"sharing": "USER", "gpus": 0}}, "should have 2 GPU"),
    ("08_batch_job.ipynb", {"plans": [_plan(0, "node1"), _plan(0, "node2")]}, "node2"),  # two rank 0s
    ("08_batch_job.ipynb", {"result": {"workers": 2, "replicas": 2, "loss": [float("nan")]}, "steps_run": 32}, "not a number"),
    ("08_batch_job.ipynb", {"event_files": ["tensorboard/train/events.out.tfevents.1.node1",
                                            "logs/events.out.tfevents.1.node2"]}, "logs/events"),  # a stray writer
    ("09_monitoring.ipynb", {"event_files": {"starved": 2, "healthy": 1}}, "one event file per run"),
    ("09_monitoring.ipynb", {"histograms": {f"layer{i}/w/histogram": 2 for i in range(10)}}, "a histogram of every weight"),
    ("09_monitoring.ipynb", {"histograms": {f"layer{i}/w/histogram": 1 for i in range(12)}}, "a histogram of every weight"),
    ("09_monitoring.ipynb", {"graphs": 0}, "the model's graph once"),
    # the starved run traced in its first epoch, the healthy one in its second: the counts alone pass that
    ("09_monitoring.ipynb", {"in_second_epoch": {"starved": False, "healthy": True}}, "second epoch"),
    ("09_monitoring.ipynb", {"logged": {"starved": {"epoch_loss": [1.5]}, "healthy": {"epoch_loss": [1.5, 0.5]}}},
     "epoch_loss"),
    ("09_monitoring.ipynb", {"loss_gap": 0.1}, "differs from fit"),
    # both runs the same losses: a read-back of the other run's file could not fail
    ("09_monitoring.ipynb", {"histories": {"starved": {"loss": [1.5, 0.5]}, "healthy": {"loss": [1.5, 0.5]}},
                             "logged": {"starved": {"epoch_loss": [1.5, 0.5]}, "healthy": {"epoch_loss": [1.5, 0.5]}}},
     "same losses"),
    ("09_monitoring.ipynb", {"traces": {"starved": {"steps": 8}, "healthy": {"steps": 3}}}, "healthy"),
    ("09_monitoring.ipynb", {"shares": {"starved": 0.1, "healthy": 0.02}}, "starved pipeline should spend"),
    ("09_monitoring.ipynb", {"shares": {"starved": 0.66, "healthy": 0.5}}, "wait far less"),
    # under half the starved share, not under a quarter: the healthy pipeline without its cache, alone on this
    # machine, waited 36-41 % against 66-68 % (the /2 proof let one such run through in make test)
    ("09_monitoring.ipynb", {"shares": {"starved": 0.68, "healthy": 0.30}}, "wait far less"),
    ("09_monitoring.ipynb", {"per_step_ms": {"starved": 94.0, "healthy": 95.0}}, "train faster"),
    # the cause counted in the trace: a healthy pipeline that read from disk there (no cache, or the trace in
    # the first epoch; timing alone passed with 16 reading threads, reviews of 2026-11-27), and a starved one
    # that barely read
    ("09_monitoring.ipynb", {"traced_reads": {"starved": 128, "healthy": 128}}, "healthy pipeline read from disk"),
    ("09_monitoring.ipynb", {"traced_reads": {"starved": 128, "healthy": 1}}, "healthy pipeline read from disk"),
    ("09_monitoring.ipynb", {"traced_reads": {"starved": 63, "healthy": 0}}, "starved pipeline should read"),
    # TensorBoard never answered, or served one epoch of two (zip alone would pass it), or another value
    ("09_monitoring.ipynb", {"served_loss": {}}, "serve every epoch"),
    ("09_monitoring.ipynb", {"served_loss": {"starved": [1.5, 0.5], "healthy": [1.4]}}, "serve every epoch"),
    ("09_monitoring.ipynb", {"served_gap": 0.1}, "serves an epoch_loss that differs"),
    # issue 54, thresholds: gaps 5x the 1e-6 allowed (float32 rounding of a loss near 1 is 1e-7), inside a 10x loosening
    ("09_monitoring.ipynb", {"loss_gap": 5e-6}, "differs from fit"),
    ("09_monitoring.ipynb", {"served_gap": 5e-6}, "serves an epoch_loss that differs"),
    # issue 54, the planted pair of writers: a default loader that kept the chief's curve (or cut only step 0),
    # and a --load_fast=false loader that cut it too, or read the files in the order they were written
    ("09_monitoring.ipynb", {"served_two": [(0, 2.0), (1, 1.5), (2, 1.0)]}, "second writer's point alone"),
    ("09_monitoring.ipynb", {"served_two": [(0, 2.1), (1, 1.5), (2, 1.0)]}, "second writer's point alone"),
    ("09_monitoring.ipynb", {"kept_two": [(0, 2.1)]}, "keep every point"),
    ("09_monitoring.ipynb", {"kept_two": [(0, 2.1), (0, 2.0), (1, 1.5), (2, 1.0)]}, "keep every point"),
    ("10_large_batches.ipynb", _lb("rates", **{"after warm-up": 0.1}), "linear warm-up"),
    ("10_large_batches.ipynb", _lb("rates", start=0.4), "linear warm-up"),
    # the square-root schedule peaking at the linear rate (sqrt(16) x 0.025 = 0.1, not 0.4)
    ("10_large_batches.ipynb", _lb("rates", **{"sqrt peak": 0.4}), "sqrt peak"),
    # the small batch trained fewer updates than 16x the large one's (an epoch cut short)
    ("10_large_batches.ipynb", _lb("iterations", **{"batch 32": 200}), "updates"),
    # both sizes a whole epoch short, in proportion: 16x holds, the epochs' updates do not
    ("10_large_batches.ipynb", {"iterations": {"batch 32": 320, **{n: 20 for n in _RUNS if n != "batch 32"}}}, "updates"),
    ("10_large_batches.ipynb", _lb("iterations", **{"batch 512, same rate": 384}), "updates"),
    # the unscaled large run right, one of the others an epoch short: every large run is held to its updates
    ("10_large_batches.ipynb", _lb("iterations", **{"batch 512, linear + warm-up": 20}), "updates of the large batch"),
    ("10_large_batches.ipynb", _lb("last_rate", **{"batch 32": 0.01}), "decayed to 0"),
    # a cosine that reached 0 at step 12 of the decay's 20 and stayed there (CosineDecay clamps the step at
    # decay_steps): 0 at the end all the same, but halfway through the decay 0.067 of the peak, not 0.5
    ("10_large_batches.ipynb", _lb("halfway", **{"batch 512, linear + warm-up": 0.134}), "not before"),
    # at 50,000 images and 2 epochs (3,124 steps) the small batch's cosine reaching 0 one step after its run
    # (decay_steps = steps + 1): its last rate 6e-9, under 1e-6; halfway 1 + sin(pi / 6250) = 1.0005 (Keras: 1.000503)
    ("10_large_batches.ipynb", _lb("halfway", **{"batch 32": 1.0005}), "not before"),
    # CosineDecay(alpha=1e-5): a floor at 1e-5 of the peak, never 0 (4e-6 for the linear peak of 0.4); halfway 1.00001
    ("10_large_batches.ipynb", {**_lb("last_rate", **{"batch 512, linear + warm-up": 4e-6}),
                                **_lb("halfway", **{"batch 512, linear + warm-up": 1.00001})}, "decayed to 0"),
    ("10_large_batches.ipynb", _lb("final", **{"batch 512, same rate": 0.05}), "end behind"),  # unscaled not behind
    ("10_large_batches.ipynb", _lb("final", **{"batch 512, linear + warm-up": 1.5}), "close most of the gap"),
    # half the gap (1.4 - 0.07) left, either side of the small batch: "most" is more than half
    ("10_large_batches.ipynb", _lb("final", **{"batch 512, linear + warm-up": 0.07 + 1.33 / 2}), "close most of the gap"),
    ("10_large_batches.ipynb", _lb("final", **{"batch 32": 0.8, "batch 512, linear + warm-up": 0.1}), "close most"),
    ("10_large_batches.ipynb", _lb("step_loss", **{"batch 512, linear, no warm-up": [3.2, 3.1, 2.9, 1.5] + [1.0] * 20}),
     "rise above its start"),
    # a rise, but after the warm-up's 6 steps and the step after them (step 9 of 24)
    ("10_large_batches.ipynb", _lb("step_loss", **{"batch 512, linear, no warm-up": [3.2, 3.1, 3.0, 2.9, 2.8, 2.7, 2.6, 2.5, 4.0]
                                                   + [1.0] * 15}), "rise above its start"),
    # back at its start within the window, never above it (measured: +0.47 quick, +0.09 at 50,000 images)
    ("10_large_batches.ipynb", _lb("step_loss", **{"batch 512, linear, no warm-up": [3.2, 3.2, 3.0, 2.9, 2.1] + [1.0] * 19}),
     "rise above its start"),
    # the warm-up's run rising above its start too: the rise would not be warm-up's absence
    ("10_large_batches.ipynb", _lb("step_loss", **{"batch 512, linear + warm-up": [3.2, 2.9, 3.4, 1.5]}),
     "with warm-up no step"),
    ("10_large_batches.ipynb", _lb("during_warmup", **{"batch 512, linear, no warm-up": 2.2}), "warm-up's steps"),
    ("11_checkpoints_requeue.ipynb", _rq("custom, warned", _requeued("u", runs=[0])), "one resumed run"),
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("f", outcomes=["stopped", "stopped"])), "fit"),
    ("11_checkpoints_requeue.ipynb", _rq("custom, warned", _requeued("u", **{"stopped at": ["s", "t"]})),
     "none differing"),
    ("11_checkpoints_requeue.ipynb", _rq("custom, warned", _requeued("u", **{"saved before stop": "r"})), "right after it"),
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("f", **{"resumed from": ["init"]})),
     "checkpoint's weights"),
    ("11_checkpoints_requeue.ipynb", _rq("custom, warned", {**_requeued("u"), "final": ["u", "v"]}), "finished with different"),
    ("11_checkpoints_requeue.ipynb", _rq("custom, warned", _requeued("v")), "equal the uninterrupted"),
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("g")), "repeats steps"),
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", {**_requeued("f"), "final": ["f", "h"]}), "finished with different"),
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("f", **{"resumed at epoch": [0]})), "start that epoch again"),
    # training_metadata.json deleted before the resumed run: the weights and optimizer come back, the epoch not
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("f", **{"resumed at epoch": [0],
                                                                           "iterations at end": [112]})),
     "start that epoch again"),
    # a stop in epoch 0 says nothing about restoring the epoch (a fit that restores none starts there too)
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("f", **{"stopped in": [0, 16], "resumed at epoch": [0],
                                                                           "iterations at stop": 16,
                                                                           "iterations at start": [0, 16],
                                                                           "iterations at end": [80]})),
     "start that epoch again"),
    # the stop's step count made up: the first run logged no steps between its start and its stop
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("f", **{"iterations at start": [48, 48]})),
     "from step 0 to its stop"),
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("f", **{"stopped in": [1, 0], "iterations at stop": 32,
                                                                           "iterations at start": [0, 32],
                                                                           "iterations at end": [64]})),
     "from step 0 to its stop"),
    # the optimizer not restored: the resumed run starts counting at 0
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("f", **{"iterations at start": [0, 0],
                                                                           "iterations at end": [32]})),
     "optimizer's saved state"),
    # resumed at the right epoch, but not at its first step (the steps before the stop not repeated)
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("f", **{"iterations at end": [64]})), "in full"),
    ("11_checkpoints_requeue.ipynb", _rq("fit, never warned", {"runs": [0, 1], "outcomes": ["stopped", "finished"],
                                                               "final": ["g"]}), "never-warned run"),
    # a never-warned fit whose workers ended apart
    ("11_checkpoints_requeue.ipynb", _rq("fit, never warned", {"runs": [0], "outcomes": ["finished"], "final": ["g", "h"]}),
     "never-warned run"),
    # the optimizer's count at the stop (40) is not where the callback says fit stopped (16 steps into epoch 1: 48)
    ("11_checkpoints_requeue.ipynb", _rq("fit, warned", _requeued("f", **{"iterations at stop": 40, "iterations at start": [0, 40],
                                                                           "iterations at end": [72]})),
     "from step 0 to its stop"),
    # the handler: a worker that stopped one step later than its peer (no agreement), or a resume that is not the
    # uninterrupted run (data skipped wrongly, or the step counter not restored)
    ("11_checkpoints_requeue.ipynb", _rq("handler, warned", _requeued("u", **{"stop steps": [41, 42]})), "different numbers"),
    ("11_checkpoints_requeue.ipynb", _rq("custom, warned", _requeued("u", **{"stop steps": [48, 64]})), "different numbers"),
    ("11_checkpoints_requeue.ipynb", _rq("handler, warned", _requeued("v", **{"stop steps": [41]})), "handler's resumed"),
    ("11_checkpoints_requeue.ipynb", _rq("handler, warned", _requeued("u", runs=[0], **{"stop steps": [41]})), "one resumed run"),
    # the agreement removed: worker 1 trained on after the chief stopped, its all-reduce failed (no "stopped", status 1),
    # and the restarted run finished: the same stop steps and final weights as a correct run, from the chief alone
    # (on Slurm, where the notebook has no exit statuses; as local processes, with them)
    ("11_checkpoints_requeue.ipynb", _rq("custom, warned", _requeued("u", **{"stopped ranks": [0], "exit statuses": None}), use_slurm=True),
     "every worker should log its stop"),
    ("11_checkpoints_requeue.ipynb", _rq("custom, warned", _requeued("u", **{"stopped ranks": [0], "exit statuses": [[3, 1], [0, 0]]})),
     "every worker should log its stop"),
    ("11_checkpoints_requeue.ipynb", _rq("custom, warned", _requeued("u", **{"exit statuses": [[3, 1], [0, 0]]})), "exit with 3"),
    ("11_checkpoints_requeue.ipynb", _rq("handler, warned", _requeued("u", **{"exit statuses": [[3, 3], [0, 1]]})), "exit with 3"),
    ("11_checkpoints_requeue.ipynb", _rq("handler, warned", _requeued("u", **{"finished ranks": [0]})), "finish in the second"),
    # local processes whose exit statuses were never gathered: only on Slurm do the logged stops stand in for them
    ("11_checkpoints_requeue.ipynb", _rq("custom, warned", _requeued("u", **{"exit statuses": None})), "exit with 3"),
    ("12_strategy_tour.ipynb", {"roles": [("chief", 0, "h", 11), ("worker", 0, "h", 11), ("worker", 1, "h", 13),
                                          ("ps", 0, "h", 14)]}, "separate processes"),
    ("12_strategy_tour.ipynb", {"roles": [("chief", 0, "h", 11), ("worker", 0, "h", 12), ("worker", 1, "h", 13)]},
     "separate processes"),
    ("12_strategy_tour.ipynb", {"variable_devices": [_PS, "/job:worker/replica:0/task:0/device:CPU:0"]},
     "not on the parameter server"),
    ("12_strategy_tour.ipynb", {"variable_devices": []}, "not on the parameter server"),
    ("12_strategy_tour.ipynb", {"applied_updates": _PS_STEPS + _PS_WORKERS - 1}, "not one update per step"),  # one count lost
    # a step whose apply moved nothing (test_lesson_12_proof_fails_when_the_scheduled_steps_apply_no_update runs it)
    ("12_strategy_tour.ipynb", {"moved_updates": _PS_STEPS + _PS_WORKERS - 1}, "not one update per step"),
    # a scheduled step that never ran: both counters agree, one short
    ("12_strategy_tour.ipynb", {"applied_updates": _PS_STEPS + _PS_WORKERS - 1, "moved_updates": _PS_STEPS + _PS_WORKERS - 1},
     "not one update per step"),
    ("12_strategy_tour.ipynb", {"overlapping": 0, "staleness": [0] * 40}, "did not train asynchronously"),
    ("12_strategy_tour.ipynb", {"staleness": [0] * 40}, "did not train asynchronously"),
    ("12_strategy_tour.ipynb", {"overlapping": 0}, "did not train asynchronously"),  # stale, yet no step overlapped
    ("12_strategy_tour.ipynb", {"last": 2.4}, "did not lower its loss"),
    ("12_strategy_tour.ipynb", {"sync_last": 2.4}, "did not lower its loss"),
    # no update applied (apply_gradients deleted): the counter still counts, the loss only drifts with the batches
    ("12_strategy_tour.ipynb", {"last": 2.0}, "did not lower its loss"),
    ("12_strategy_tour.ipynb", {"sync_last": 2.0}, "did not lower its loss"),
    ("12_strategy_tour.ipynb", {"sync_digests": ["d", "e"]}, "different weights"),
    # each worker alone (no TF_CONFIG): same seeds and data give the same digest, but one replica each
    ("12_strategy_tour.ipynb", {"sync_in_sync": [1, 1]}, "did not form one cluster"),
    ("12_strategy_tour.ipynb", {"sync_in_sync": [2, 1]}, "did not form one cluster"),
    # each worker alone on its own 2 GPUs: 2 replicas each, as two workers of one device each would count
    ("12_strategy_tour.ipynb", {"sync_in_sync": [2, 2], "sync_locals": [2, 2]}, "did not form one cluster"),
    # one engine only: a cluster of one agrees with itself
    ("12_strategy_tour.ipynb", {"sync_in_sync": [1], "sync_locals": [1], "sync_digests": ["d"]}, "did not form one cluster"),
    ("12_strategy_tour.ipynb", {"overflow_step": None}, "should overflow"),
    ("12_strategy_tour.ipynb", {"central_mean": 2.0}, "sum the replicas' updates"),  # the true mean: nothing summed
    ("12_strategy_tour.ipynb", {"fit_errors": {"per-worker": None, "tf.data": "... create_per_worker_dataset."}},
     "refuse the per-worker dataset"),
    ("12_strategy_tour.ipynb", {"fit_errors": {"per-worker": "To use this dataset, ...",
                                               "tf.data": "... create_per_worker_dataset."}},
     "refuse the per-worker dataset"),  # TensorFlow's error, not Keras's: some other ValueError
    # fit ran on the plain dataset (a Keras that drives the coordinator), or failed some other way
    ("12_strategy_tour.ipynb", {"fit_errors": {"per-worker": "Unrecognized data type: x=...", "tf.data": None}},
     "refuse fit's plain dataset"),
    ("12_strategy_tour.ipynb", {"fit_errors": {"per-worker": "Unrecognized data type: x=...",
                                               "tf.data": "Unrecognized data type: x=..."}}, "refuse fit's plain dataset"),
    ("12_strategy_tour.ipynb", {"copies": {"OneDevice": 1, "Mirrored": 2, "CentralStorage": 2}}, "copies per strategy"),
    ("12_strategy_tour.ipynb", {"copies": {"OneDevice": 1, "Mirrored": 1, "CentralStorage": 1}}, "copies per strategy"),
    ("12_strategy_tour.ipynb", {"central_bn_error": None}, "batch norm should fail"),
    ("12_strategy_tour.ipynb", {"central_bn_error": "ValueError: some other error"}, "batch norm should fail"),
    ("12_strategy_tour.ipynb", {"optimizer_count": 0}, "the optimizer counted"),
    ("12_strategy_tour.ipynb", {"optimizer_count": _PS_STEPS + _PS_WORKERS + 1}, "the optimizer counted"),
    ("12_strategy_tour.ipynb", {"evaluated": {"OneDevice": 0.4, "Mirrored": 0.5, "CentralStorage": 2.31}},
     "did not train"),
    # below chance (ln 10 = 2.30) yet barely trained: the old check passed this; a fifth of the own start does not
    ("12_strategy_tour.ipynb", {"evaluated": {"OneDevice": 0.4, "Mirrored": 0.5, "CentralStorage": 2.0}},
     "did not train"),
    ("13_from_horovod.ipynb", {"ranks": [0, 0]}, "not one job"),
    ("13_from_horovod.ipynb", {"sizes": [1, 1]}, "not one job"),
    # one worker alone (N_ENGINES = 1): a job of 1 is consistent with itself, yet proves nothing about averaging
    ("13_from_horovod.ipynb", {"ranks": [0], "sizes": [1], "initial_digests": ["i"], "rates": [0.05],
                               "checkpoints": [{"dir": "/w/checkpoint", "wrote": _STEP_1, "left": True, "on_read": []}],
                               "collective": [[[10.0], [10.0], [10.0, -10.0]]]}, "at least 2 workers"),
    ("13_from_horovod.ipynb", {"initial_digests": ["i", "j"]}, "rank 0's weights"),  # the gap measured on one layer only
    ("13_from_horovod.ipynb", {"start_gap": 0.1}, "rank 0's weights"),
    ("13_from_horovod.ipynb", {"initial_digests": ["i", "j"], "start_gap": 0.1}, "rank 0's weights"),
    ("13_from_horovod.ipynb", {"gradient_gap": 0.01}, "Horovod's average"),
    ("13_from_horovod.ipynb", {"update_gap": 0.01}, "update differs"),
    ("13_from_horovod.ipynb", {"rates": [0.05, 0.05]}, "scale with the workers"),
    ("13_from_horovod.ipynb", {"collective": [[[10.5], [10.0, 11.0], [10.0, -10.0]]] * 2}, "collectives"),  # rank 0's
    # issue 54: a minimum or a maximum of the ranks' pairs is no rank's pair (a broadcast of rank 0's 10 was a MIN)
    ("13_from_horovod.ipynb", {"collective": [[[10.5], [10.0, 11.0], [10.0, -11.0]]] * 2}, "collectives"),  # MIN
    ("13_from_horovod.ipynb", {"collective": [[[10.5], [10.0, 11.0], [11.0, -10.0]]] * 2}, "collectives"),  # MAX
    ("13_from_horovod.ipynb", {"collective": [[[10.5], [10.0, 11.0], [11.0, -11.0]], [[10.5], [10.0, 11.0], [10.0, -10.0]]]},
     "collectives"),  # each rank kept its own pair
    ("13_from_horovod.ipynb", {"left": [(0, "/w/checkpoint"), (1, "/tmp/t1")]}, "chief alone"),  # rank 1 kept its copy
    ("13_from_horovod.ipynb", {"left": [(1, "/w/checkpoint")]}, "chief alone"),  # the kept copy is rank 1's
    ("13_from_horovod.ipynb", {"left": []}, "chief alone"),  # the chief deleted its copy too
    ("13_from_horovod.ipynb", {"checkpoints": [{"dir": "/w/checkpoint", "wrote": _STEP_1, "left": True, "on_read": []}] * 2},
     "directory of its own"),  # both wrote into the chief's directory
    ("13_from_horovod.ipynb", {"checkpoints": [{"dir": "/w/checkpoint", "wrote": _STEP_1, "left": True, "on_read": []},
                                               {"dir": "/tmp/t1", "wrote": [], "left": False, "on_read": []}]},
     "directory of its own"),
    # issue 54: a metric's total in the checkpoint: saving it is a collective, a chief-only write would hang
    ("13_from_horovod.ipynb", {"checkpoints": [{"dir": "/w/checkpoint", "wrote": _STEP_1, "left": True, "on_read": ["mean/total"]},
                                               {"dir": "/tmp/t1", "wrote": _STEP_1, "left": False, "on_read": ["mean/total"]}]},
     "synchronised on read"),
    ("13_from_horovod.ipynb", {"kept": []}, "chief alone"),
    ("13_from_horovod.ipynb", {"kept": ["step-2.index"]}, "chief alone"),  # a later step's checkpoint, not step 1's
    # CI asks for Horovod's own run: its absence must fail there, not pass as "not compared"
    ("13_from_horovod.ipynb", {"horovod_gaps": None, ENVIRON: {"COURSE_REQUIRE_HOROVOD": "1"}}, "own run was not compared"),
    ("13_from_horovod.ipynb", {"horovod_gaps": {"gradient": 0.02, "weights": 7e-9, "recipe": 1.5e-6}},
     "Horovod's own run"),
    # issue 54, thresholds: each between its bound and the bound loosened 10x, so also inside the review's
    # loosenings (gradient 1e-5 to 5e-3, rate 1e-3 to 0.4, Horovod 1e-5 to 1e-2); measured here: gradient 1.5e-6,
    # update 1.5e-7, rate 0.100000 of 0.1. The gradient's bounds are relative to its largest entry (0.1 here)
    ("13_from_horovod.ipynb", {"gradient_gap": 5e-5}, "Horovod's average"),
    # a small gradient (largest entry 1e-3) off by 0.5 %: inside the absolute 1e-5 the proof once had, not its relative bound
    ("13_from_horovod.ipynb", {"gradient_gap": 5e-6, "gradient_size": 1e-3,
                               "horovod_gaps": {"gradient": 5e-9, "weights": 7e-9, "recipe": 1e-8}}, "Horovod's average"),
    ("13_from_horovod.ipynb", {"update_gap": 5e-5}, "update differs"),
    ("13_from_horovod.ipynb", {"rates": [0.1, 0.1005]}, "scale with the workers"),  # one worker's rate 0.5 % off
    ("13_from_horovod.ipynb", {"horovod_gaps": {"gradient": 5e-5, "weights": 7e-9, "recipe": 1.5e-6}},
     "Horovod's own run"),
    ("15_models_you_keep.ipynb", {"saved": [_SAVED, [True, True, False, False]]}, "same epochs"),
    # each worker validated on its own shard alone: the same epochs saved, other losses
    ("15_models_you_keep.ipynb", {"histories": [{"val_loss": [2.0, 1.8, 1.7, 3.5]}, {"val_loss": [2.1, 1.9, 1.6, 3.4]}]},
     "chief's val_loss"),
    ("15_models_you_keep.ipynb", {"saved": [[True] * 4] * 2}, "written exactly when"),  # saved every epoch
    ("15_models_you_keep.ipynb", {"val_loss": [2.0, 1.8, 1.7, 1.6], "improved": [0, 1, 2, 3], "best_epoch": 3,
                                  "saved": [[True] * 4] * 2, "file_digest": "d", "losses": {"no strategy": 1.6},
                                  "histories": [{"val_loss": [2.0, 1.8, 1.7, 1.6]}] * 2, "checkpoint_best": [1.6, 1.6]},
     "not the \\(staged\\) last"),
    ("15_models_you_keep.ipynb", {"file_digest": "d"}, "weights of the best epoch"),  # the last epoch's file
    # a worker's ModelCheckpoint that ended with another best (its own val_loss, or an earlier epoch's)
    ("15_models_you_keep.ipynb", {"checkpoint_best": [1.7, 1.8]}, "checkpoint's best"),
    # worker 1's copy still on its own node (it says so), the chief's file gone, a second file in the
    # shared models/ directory (as worker 1 lists it), or a non-chief worker that wrote under the output
    # directory (one path for two writers)
    ("15_models_you_keep.ipynb", {"copies_left": [0, 1]}, "only the chief's file"),
    ("15_models_you_keep.ipynb", {"copies_left": []}, "only the chief's file"),
    ("15_models_you_keep.ipynb", {"models_listed_by": {"this kernel": ["15_best.keras"],
                                                       "worker 1": ["15_best.keras", "15_best_1.keras"]}},
     "only the chief's file"),
    ("15_models_you_keep.ipynb", {"shared_elsewhere": [1]}, "only the chief's file"),
    # N_ENGINES=3 with 3 CPU replicas here: "another replica count" would be false
    ("15_models_you_keep.ipynb", {"mirrored_replicas": 2}, "another replica count"),
    # the model compiled with jit_compile="auto" and the file storing it so
    ("15_models_you_keep.ipynb", {"stored_jit": "auto"}, "float32 without XLA"),
    ("15_models_you_keep.ipynb", {"stored_jit": True}, "float32 without XLA"),
    # a sync-on-read variable in the file (its read would all-reduce), or a check that sees none at all
    ("15_models_you_keep.ipynb", {"on_read": [{"in the file": [], "metrics": ["loss/total"]},
                                             {"in the file": ["bn/moving_mean"], "metrics": ["loss/total"]}]},
     "mirrored on write"),
    ("15_models_you_keep.ipynb", {"on_read": [{"in the file": [], "metrics": []}] * 2}, "mirrored on write"),
    # the serving program reporting Keras loaded, or failing (an `import helpers` in it: refused by the runner)
    ("15_models_you_keep.ipynb", {"served_loaded": ["keras"]}, "Keras and helpers unimportable"),
    ("15_models_you_keep.ipynb", {"served_status": 1, "served_loaded": "no report"}, "Keras and helpers unimportable"),
    # a serving process that reported, then died (a crash at exit: SIGSEGV): its answer is not to be trusted
    ("15_models_you_keep.ipynb", {"served_status": -11}, "Keras and helpers unimportable"),
    ("15_models_you_keep.ipynb", {"tf32_on": {"workers": True, "here": False}}, "float32 without XLA"),
    ("15_models_you_keep.ipynb", {"jit": {"no strategy": True, "OneDeviceStrategy": False}}, "float32 without XLA"),
    ("15_models_you_keep.ipynb", {"differences": {"no strategy": 0.0, "exported, served": 0.02}}, "predicts differently"),
    ("15_models_you_keep.ipynb", {"losses": {"no strategy": 1.7, "MirroredStrategy, 3 replicas": 1.75}},
     "best epoch's val_loss"),
    # the serving program without its enable_tensor_float_32_execution(False) line reports TF32 on
    # (tests/test_notebook_programs.py runs it so)
    ("15_models_you_keep.ipynb", {"tf32_on": {"workers": False, "here": False, "serving program": True}},
     "float32 without XLA"),
    # on CPUs the copies agree to float32 rounding (0.0 measured): 1e-5, which the old 1e-4 let through, fails
    ("15_models_you_keep.ipynb", {"differences": {"no strategy": 0.0, "MirroredStrategy, 3 replicas": 1e-5}},
     "predicts differently"),
    ("15_models_you_keep.ipynb", {"losses": {"no strategy": 1.7, "MirroredStrategy, 3 replicas": 1.7001}},
     "best epoch's val_loss"),
    # on CPUs bit for bit: one float32 rounding of a logit of 1 (6e-8) fails
    ("15_models_you_keep.ipynb", {"differences": {"no strategy": 0.0, "MirroredStrategy, 3 replicas": 6e-8}},
     "predicts differently"),
    # issue 54, thresholds: a copy 3e-5 off a loss of 1.7, where the bound allows 1.7 x 1.3e-5 = 2.2e-5 (0.0 measured):
    # inside the bound loosened 10x, and inside max(10.0, loss) for max(1.0, loss)
    ("15_models_you_keep.ipynb", {"losses": {"no strategy": 1.7, "MirroredStrategy, 3 replicas": 1.70003}},
     "best epoch's val_loss"),
    ("16_input_at_scale.ipynb", {"reports": {2: [{}], 3: [{}, {}, {}]}}, "not every worker reported"),
    ("16_input_at_scale.ipynb", {"files_of": {**_FILES, 2: [[0, 1, 2, 3], [4, 5, 6, 7]]}}, "FILE sharding should give"),
    ("16_input_at_scale.ipynb", {"covered": {2: True, 3: False}}, "disjoint and cover"),
    ("16_input_at_scale.ipynb", {"staged_everywhere": {2: False, 3: True}}, "complete node-local copy"),
    # workers whose file lists came in one order on both passes: nothing shows that they shuffled
    # (read_shards.py with sharded_dataset(..., shuffle=False) reports so)
    ("16_input_at_scale.ipynb", {"reshuffled": False}, "should be shuffled"),
    # a job that left the queue before the kernel saw STAGED: nothing was hidden while the workers read
    ("16_input_at_scale.ipynb", {"hidden_first": {2: True, 3: False}}, "hidden before any worker"),
    # a simulation that never reached the shared files: nothing else the proof says about them means anything
    ("16_input_at_scale.ipynb", {"read_from": {**_READS, "shared every epoch": {"shared": [0, 0, 0],
                                                                                "node-local": [64, 64, 64]}}},
     "every plain epoch should read the shared"),
    ("16_input_at_scale.ipynb", {"read_from": {**_READS, "cache(filename=...)": {"shared": [64, 64, 64],
                                                                                 "node-local": "not counted"}}},
     "first epoch only"),
    # a staging that read the timed epoch's batches (COURSE_MAX_STEPS cuts them), not every record
    ("16_input_at_scale.ipynb", {"read_from": {**_READS, "staged": {"shared": [64, 0, 0, 0],
                                                                    "node-local": [0, 64, 64, 64]}}},
     "every record"),
    ("16_input_at_scale.ipynb", {"read_from": {**_READS, "staged": {"shared": [128, 64, 0, 0],
                                                                    "node-local": [0, 0, 64, 64]}}},
     "staging should read"),
    # a staging that read nothing from the shared files (its timing then measures nothing)
    ("16_input_at_scale.ipynb", {"read_from": {**_READS, "staged": {"shared": [0, 0, 0, 0],
                                                                    "node-local": [0, 64, 64, 64]}}},
     "staging should read"),
    # batches are counted by where their files really are: a staged epoch that reached the shared files
    # (a link to them, say) counts there, not on node-local disk
    ("16_input_at_scale.ipynb", {"read_from": {**_READS, "staged": {"shared": [128, 0, 0, 64],
                                                                    "node-local": [0, 64, 64, 0]}}},
     "staging should read"),
    # staged epochs that read nothing at all (an empty copy, a pipeline cut short) are not "local reads"
    ("16_input_at_scale.ipynb", {"read_from": {**_READS, "staged": {"shared": [128, 0, 0, 0],
                                                                    "node-local": [0, 0, 0, 0]}}},
     "from the node-local copy"),
    # cache() in memory reads the shared file system once too, but leaves no file on node-local disk
    ("16_input_at_scale.ipynb", {"cache_files": []}, "cache file to node-local disk"),
    # a staged copy that misses files, or holds other bytes (the copy is not what the count saw)
    ("16_input_at_scale.ipynb", {"copy_complete": False}, "byte for byte"),
    ("16_input_at_scale.ipynb", {"epochs": {**OK["16_input_at_scale.ipynb"]["epochs"], "staged": [0.03, 0.97, 0.02]}},
     "staged copy should be faster"),
    ("16_input_at_scale.ipynb", {"epochs": {**OK["16_input_at_scale.ipynb"]["epochs"],
                                            "cache(filename=...)": [0.97, 0.99, 0.02]}}, "faster than the shared"),
    ("16_input_at_scale.ipynb", {"same_data": False}, "same data"),
    ("16_input_at_scale.ipynb", {"rate": {"map, then batch": 65000.0, "batch, then map": 32000.0}},
     "parsing batches should be faster"),
    ("17_software_stack.ipynb", {"loaded": False}, "should load the module"),
    # the module loaded, but the job's stack report never came
    ("17_software_stack.ipynb", {"ran_stack": False}, "should load the module"),
    # an OTHER line that names no package proves nothing about them
    ("17_software_stack.ipynb", {"other_python": {}}, "should not be handed"),
    ("17_software_stack.ipynb", {"outcomes": {"Keras 3": ["ValueError"], "Keras 3 + fix": ["ok"],
                                              "Keras 2 (tf_keras)": ["ValueError"]}}, "with the fix, and with tf_keras"),
    ("17_software_stack.ipynb", {"weights": {"Keras 3": [None], "Keras 3 + fix": ["a"], "Keras 2 (tf_keras)": ["b", "c"]}},
     "identical weights"),
    ("17_software_stack.ipynb", {"versions": {"Keras 3": ["keras 3.15.1"], "Keras 3 + fix": ["tf_keras 2.21.0"],
                                              "Keras 2 (tf_keras)": ["tf_keras 2.21.0"]}}, "tf_keras only when asked"),
    ("17_software_stack.ipynb", {"tf_from_module": False}, "from the module's environment"),
    ("17_software_stack.ipynb", {"extras_from_venv": False}, "venv on top of the module"),
    # a module on PYTHONPATH (EasyBuild's default): the module's einops shadowed the venv's own
    ("17_software_stack.ipynb", {"own_package_kept": False}, "own einops should win"),
    # a module with no einops of its own: the venv's einops shadowed nothing
    ("17_software_stack.ipynb", {"module_einops": None}, "own einops should win"),
    # the kernel's einops is the venv's stand-in: the module's was never looked at
    ("17_software_stack.ipynb", {"module_einops": "99.0"}, "own einops should win"),
    # TensorFlow from the module, Keras from somewhere else (the venv, a user site)
    ("17_software_stack.ipynb", {"keras_from_module": False}, "from the module's environment"),
    # ... and handed its packages to the system's Python too; no OTHER line at all proves nothing
    ("17_software_stack.ipynb", {"other_python": {"tensorflow": True, "keras": True, "einops": True}}, "should not be handed"),
    ("17_software_stack.ipynb", {"other_python": None}, "should not be handed"),
    # a venv that found the module through PYTHONPATH, or without --system-site-packages
    ("17_software_stack.ipynb", {"recommended_route": False}, "system-site-packages with the .pth reader"),
    # TensorFlow still found after module unload (a .pth that names the course's site-packages itself, say)
    ("17_software_stack.ipynb", {"needs_module": False}, "after module unload"),
    ("17_software_stack.ipynb", {"workers": {**dict.fromkeys(_VARIANTS, 2), "Keras 2 (tf_keras)": 1}}, "every variant"),
    ("17_software_stack.ipynb", {"outcomes": {"Keras 3": ["ok"], "Keras 3 + fix": ["ok"], "Keras 2 (tf_keras)": ["ok"]}},
     "fail without the fix"),
    ("17_software_stack.ipynb", {"outcomes": {"Keras 3": ["ValueError"], "Keras 3 + fix": ["ValueError"],
                                              "Keras 2 (tf_keras)": ["ok"]}}, "with the fix, and with tf_keras"),
    ("17_software_stack.ipynb", {"weights": {"Keras 3": [None], "Keras 3 + fix": ["a", "b"], "Keras 2 (tf_keras)": ["b"]}},
     "identical weights"),
    ("17_software_stack.ipynb", {"versions": {"Keras 3": ["keras 3.15.1"], "Keras 3 + fix": ["keras 3.15.1"],
                                              "Keras 2 (tf_keras)": ["keras 3.15.1"]}}, "tf_keras only when asked"),
    ("17_software_stack.ipynb", {"flagged": {**_FLAGGED, "CPU build, 4 GPUs allocated": []}}, "pre-flight should stop"),
    # tf.keras was tf_keras, but `from tensorflow.keras import` gave Keras 3 (the variable set after the import)
    ("17_software_stack.ipynb", {"imported": {"Keras 3": ["keras"], "Keras 3 + fix": ["keras"], "Keras 2 (tf_keras)": ["keras"]}},
     "from tensorflow.keras import should give tf_keras"),
    ("17_software_stack.ipynb", {"imported": {"Keras 3": ["keras"], "Keras 3 + fix": ["tf_keras"],
                                              "Keras 2 (tf_keras)": ["tf_keras"]}}, "from tensorflow.keras import should give tf_keras"),
    # a node that sees 2 of its 4 GPUs let through; a good node stopped
    ("17_software_stack.ipynb", {"flagged": {**_FLAGGED, "CUDA build, sees 2 of 4": []}}, "pre-flight should stop"),
    ("17_software_stack.ipynb", {"flagged": {**_FLAGGED, "CUDA build, sees 4 of 4": ["4 of 4"]}}, "pre-flight should stop"),
    # the log holds PerReplica (another worker's traceback, say) but a Keras 3 worker failed otherwise
    ("17_software_stack.ipynb", {"keras3_fits": ["ValueError: Attempt to convert a value (PerReplica:{...})",
                                                 "ValueError: Invalid reduction dimension 0"]}, "fail without the fix"),
    ("17_software_stack.ipynb", {"keras3_fits": []}, "fail without the fix"),
    ("14_predicting_scaling.ipynb", {"predicted_s": 0.2}, "compute plus all-reduce"),
    # a model with no all-reduce term (compute alone) adds up; 2.73x short of this real step
    ("14_predicting_scaling.ipynb", {"allreduce_s": 0.0, "predicted_s": 0.06, "ratio": 2.73}, "measure again"),
    # the same model where the real step cost less than twice its compute: within 2x of it all the same
    ("14_predicting_scaling.ipynb", {"allreduce_s": 0.0, "predicted_s": 0.06, "measured_s": 0.1, "ratio": 1.67,
                                     "compute_only": 1.67}, "over a quarter of that extra"),
    ("14_predicting_scaling.ipynb", {"times": {1_000_000: 0.03, 4_000_000: 0.02, 16_000_000: 0.064}}, "grow with size"),
    ("14_predicting_scaling.ipynb", {"ratio": 2.6}, "measure again"),
    ("14_predicting_scaling.ipynb", {"ratio": 0.3}, "measure again"),
    ("14_predicting_scaling.ipynb", {"overlap": 0.7}, "not the measured"),  # an assumed overlap, not the packs'
    ("14_predicting_scaling.ipynb", {"overlap": -0.08}, "not the measured"),  # a negative share taken as it is
    ("14_predicting_scaling.ipynb", {"projection": {(64, "a"): {1: 0.9, 2: 0.8}}}, "by definition"),
    ("14_predicting_scaling.ipynb", {"monotone": {(64, "a"): False}}, "must fall"),
    ("14_predicting_scaling.ipynb", {"ordered": {64: [0.28, 0.61, 0.74], 128: [0.85, 0.76, 0.44]}}, "slower link"),
    ("14_predicting_scaling.ipynb", {"references": [("DGX", 8, 0.995, 0.993)]}, "bounds the nodes"),
    ("14_predicting_scaling.ipynb", _levers(**{"batch 256 + float16 gradients + 70% overlap": 0.85}), "efficiency"),
    ("14_predicting_scaling.ipynb", _levers(**{"per-GPU batch 256 (4x the compute per step)": 0.95}), "efficiency"),
    ("14_predicting_scaling.ipynb", _levers(**{"TF32 instead of mixed precision (909 images/s: slower GPUs)": 0.2}),
     "efficiency"),
    # the distributed step left at jit_compile=None under TF_FUNCTION_JIT_COMPILE_DEFAULT=true: XLA there only
    ("14_predicting_scaling.ipynb", {"xla": {**_XLA, "engine 1, distributed, 0 bytes per pack": True}}, "without XLA"),
    # a step whose jit_compile was left at the default (its graph carries no _XlaMustCompile)
    ("14_predicting_scaling.ipynb", {"xla": {**_XLA, "alone": None}}, "without XLA"),
    # the all-reduce probe left at @tf.function under TF_FUNCTION_JIT_COMPILE_DEFAULT=true: compiled by XLA
    ("14_predicting_scaling.ipynb", {"xla": {**_XLA, "engine 0, all-reduce probe": True}}, "without XLA"),
    # every step reads jit_compile=False, but one engine ran with TF_XLA_FLAGS=--tf_xla_auto_jit=2: XLA compiled it anyway
    ("14_predicting_scaling.ipynb", {"clustering": {"kernel": "", "engine 0": "",
                                                    "engine 1": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"}},
     "auto-clustering"),
    # a ring formula that ignored N (message_bytes / bandwidth): equal at N=2, where it was fitted and measured
    ("14_predicting_scaling.ipynb", {"growth": 1.0}, "1.75x as much"),
    # a model whose all-reduce term is a fifth of what the step paid beyond its compute (a bandwidth 5x too high):
    # within 2x of the step (1.92x) all the same
    ("14_predicting_scaling.ipynb", {"allreduce_s": 0.018, "predicted_s": 0.078, "measured_s": 0.15, "ratio": 1.92,
                                     "compute_only": 2.5}, "over a quarter of that extra"),
    # a real step exactly as long as the compute alone
    ("14_predicting_scaling.ipynb", {"allreduce_s": 0.03, "predicted_s": 0.09, "measured_s": 0.06, "ratio": 0.667,
                                     "compute_only": 1.0}, "should cost more than its compute"),
    # a real step no slower than the compute alone (nothing all-reduced), a model whose term is small enough for 2x
    ("14_predicting_scaling.ipynb", {"allreduce_s": 0.03, "predicted_s": 0.09, "measured_s": 0.0588, "ratio": 0.653,
                                     "compute_only": 0.98}, "should cost more than its compute"),
    # a planted mistake the check did not name (NOT SEEN, or another check's line), before its fix
    ("18_your_own_script.ipynb", {"named": {**dict.fromkeys(_MISTAKES_18, True), "shuffle seeded per worker": False}},
     "name each planted mistake"),
    # a fix after which its check still failed, or was not looked at (NOT SEEN)
    ("18_your_own_script.ipynb", {"turned_pass": {**dict.fromkeys(_MISTAKES_18, True), "one checkpoint path for all": False}},
     "turn its FAIL line to PASS"),
    # the check passed a script that still had a mistake
    ("18_your_own_script.ipynb", {"codes": [1, 1, 0, 1, 0]}, "with a mistake left should fail"),
    # the fixed script: the command exited 1 (a FAIL the parser missed), a check missing, a line not PASS
    ("18_your_own_script.ipynb", {"codes": [1, 1, 1, 1, 1]}, "should pass every check"),
    ("18_your_own_script.ipynb", {"passed": sorted(_CHECKS_18)[1:]}, "should pass every check"),
    ("18_your_own_script.ipynb", {"not_passed": ["batch norm"]}, "should pass every check"),
    ("18_your_own_script.ipynb", {"on_two_workers": False}, "run 2 workers"),
    # the first check went on to a 2-worker run, or stopped otherwise than at mirrored_strategy.py's assert
    ("18_your_own_script.ipynb", {"stopped_alone": False}, "stopped at the one-worker run"),
    # the one worker's marks: a step of strategy.run began (or it ended otherwise) before it raised
    ("18_your_own_script.ipynb", {"no_step_ran": False}, "before any step of strategy.run began"),
    # with only the batch and the shuffle mistakes left, a run failed or a worker ended without its weights
    ("18_your_own_script.ipynb", {"to_the_end": {"checkpoint fixed": True, "batch fixed": False}}, "train to the end"),
    # run alone, the script printed a task_id (TF_CONFIG leaked into the run alone)
    ("18_your_own_script.ipynb", {"alone_task_none": False}, "task_id should be None"),
    # the fixed script run alone (task_id None) wrote no checkpoint: a chief test of task_id == 0
    ("18_your_own_script.ipynb", {"wrote_alone": False, "alone_files": []}, "run alone"),
    ("18_your_own_script.ipynb", {"take_home": False}, "import nothing from the course"),
]


@pytest.mark.parametrize("name", sorted(OK))
def test_proof_passes_on_a_correct_run(name):
    _run(name, {"math": math, **OK[name]})


@pytest.mark.parametrize("name,broken,match", BROKEN, ids=[f"{n[:2]}-{m[:24]}" for n, _, m in BROKEN])
def test_proof_raises_on_a_broken_claim(name, broken, match):
    with pytest.raises(AssertionError, match=match):
        _run(name, {**OK[name], **broken})


def test_every_notebook_has_a_proof_cell_and_broken_variants():
    names = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert names == sorted(OK), "a notebook without a correct-run namespace here"
    for name in names:
        assert "assert" in proof_source(name), name
        asserts = proof_source(name).count("assert ")
        variants = sum(1 for n, _, _ in BROKEN if n == name)
        assert variants >= min(asserts, 2), f"{name}: {asserts} asserts, only {variants} broken variants"


def _execute(code, name: str, namespace: dict) -> None:
    """Run a proof (its source or a compiled mutant) on `namespace`; the namespace's ENVIRON entry,
    if any, is set in os.environ for the run (13's proof reads the environment, so it is broken so)."""
    import os
    from unittest import mock

    namespace = dict(namespace)
    environ = namespace.pop(ENVIRON, {})
    with mock.patch.dict(os.environ, environ):
        exec(compile(code, name, "exec") if isinstance(code, str) else code, {"math": math, **namespace})


def _passes(code, name: str, namespace: dict) -> bool:
    try:
        _execute(code, name, namespace)
    except Exception:  # noqa: BLE001 - any failure still catches the broken case
        return False
    return True


def _links_dropped(compare) -> list:
    """A chained comparison with each of its links dropped in turn (the others kept, joined by `and`)."""
    import ast

    operands = [compare.left, *compare.comparators]
    pairs = [ast.Compare(operands[j], [op], [operands[j + 1]]) for j, op in enumerate(compare.ops)]
    out = []
    for i in range(len(pairs)):
        rest = pairs[:i] + pairs[i + 1:]
        out.append((f"link {i + 1} of {len(pairs)}", rest[0] if len(rest) == 1 else ast.BoolOp(ast.And(), rest)))
    return out


def _weakened(test) -> list:
    """One assert condition weakened by one piece: each operand of a top-level `and` dropped, each
    link of a chained comparison (the whole condition or one `and` operand) dropped."""
    import ast

    if isinstance(test, ast.Compare) and len(test.ops) >= 2:
        return [(f"{what} dropped", new) for what, new in _links_dropped(test)]
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
        return []
    out = []
    for i, value in enumerate(test.values):
        rest = test.values[:i] + test.values[i + 1:]
        out.append((f"and-operand {i + 1} of {len(test.values)} dropped",
                    rest[0] if len(rest) == 1 else ast.BoolOp(ast.And(), rest)))
        if isinstance(value, ast.Compare) and len(value.ops) >= 2:
            out += [(f"and-operand {i + 1}: {what} dropped",
                     ast.BoolOp(ast.And(), [*test.values[:i], new, *test.values[i + 1:]]))
                    for what, new in _links_dropped(value)]
    return out


def _mutants(source: str) -> list:
    """Every weakening of a proof by one piece, as (line, what, code): each assert removed, each of
    its conditions weakened (`_weakened`), each `raise` removed."""
    import ast
    import copy

    tree = ast.parse(source)

    def replaced(target: ast.stmt, build) -> object:
        mutant = copy.deepcopy(tree)
        for node in ast.walk(mutant):
            for value in ast.iter_fields(node):
                if isinstance(value[1], list):
                    body = value[1]
                    for k, child in enumerate(body):
                        if isinstance(child, ast.stmt) and (child.lineno, child.col_offset) == (target.lineno, target.col_offset):
                            body[k] = ast.copy_location(build(child), child)
        return compile(ast.fix_missing_locations(mutant), "mutant", "exec")

    mutants = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            mutants.append((node.lineno, "assert removed", replaced(node, lambda s: ast.Pass())))
            mutants += [(node.lineno, what, replaced(node, lambda s, t=test: ast.Assert(t, s.msg)))
                        for what, test in _weakened(node.test)]
        elif isinstance(node, ast.Raise):
            mutants.append((node.lineno, "raise removed", replaced(node, lambda s: ast.Pass())))
    return mutants


def _surviving(name: str) -> list[str]:
    """The mutants of `name`'s proof no broken variant catches: none of the variants that fail the
    proof passes the mutant, so the piece removed is one no test holds to account."""
    source = proof_source(name)
    variants = [{**OK[name], **broken} for n, broken, _ in BROKEN if n == name]
    failing = [v for v in variants if not _passes(source, name, v)]
    lines = source.splitlines()
    return [f"{name[:2]} line {line} ({what}): {lines[line - 1].strip()[:70]}" for line, what, code in _mutants(source)
            if not any(_passes(code, name, v) for v in failing)]


@pytest.mark.parametrize("name", sorted(OK))
def test_every_piece_of_every_proof_is_needed_by_some_broken_case(name):
    """Remove any one assert, any one operand of an assert's top-level `and`, any one link of a
    chained comparison, or any one `raise` from a proof cell: some broken variant (one the proof
    fails) must then pass unnoticed. A piece no variant needs is one no test holds to account."""
    assert _mutants(proof_source(name)), f"{name}: a proof with nothing to remove"
    surviving = _surviving(name)
    assert not surviving, f"{name}: no broken variant needs these pieces: {surviving}"


# Issue 54: the meta-test above removes pieces of a proof but cannot loosen a threshold. Each numeric threshold of
# lessons 05, 09, 13 and 15's proofs, loosened: by 10 (a bound 10x wider still passes a run whose claim is false;
# the correct runs measured lie 10x or more inside each bound but lesson 13's gradient, 1.5e-6 of 1e-5), lesson
# 13's also as the review loosened them, and a bound of exactly zero (or a count) to its nearest looser form. Some
# broken case the proof fails must then pass, or the threshold is not shown to matter.
LOOSENED = [
    ("01_mirrored_strategy.ipynb", "updated_gap == 0", "updated_gap < 1e-6"),
    ("01_mirrored_strategy.ipynb", "moved > 0", "moved >= 0"),
    ("01_mirrored_strategy.ipynb", "slot_size > 0", "slot_size >= 0"),
    ("01_mirrored_strategy.ipynb", "moving_gap > 0", "moving_gap >= 0"),
    ("01_mirrored_strategy.ipynb", "num_replicas_in_sync >= 2:", "num_replicas_in_sync >= 3:"),  # the if-guard
    ("05_sync_batch_norm.ipynb", 'gaps["synchronized vs global"] < 1e-4', 'gaps["synchronized vs global"] < 1e-3'),
    ("05_sync_batch_norm.ipynb", 'gaps["ordinary vs own"] < 1e-4', 'gaps["ordinary vs own"] < 1e-3'),
    ("05_sync_batch_norm.ipynb", 'gaps["ordinary vs global"] > 0.1', 'gaps["ordinary vs global"] > 0.01'),
    ("05_sync_batch_norm.ipynb", "moved_sync > 0", "moved_sync >= 0"),
    ("05_sync_batch_norm.ipynb", "spread_sync == 0", "spread_sync < 1e-6"),
    ("05_sync_batch_norm.ipynb", "spread_plain > 0", "spread_plain >= 0"),
    ("05_sync_batch_norm.ipynb", "num_replicas_in_sync > 1:", "num_replicas_in_sync > 2:"),  # the if-guard
    ("09_monitoring.ipynb", "loss_gap < 1e-6", "loss_gap < 1e-5"),
    ("09_monitoring.ipynb", "served_gap < 1e-6", "served_gap < 1e-5"),
    ("09_monitoring.ipynb", 'traced_reads["healthy"] == 0', 'traced_reads["healthy"] <= 1'),
    ("09_monitoring.ipynb", "PROFILED_STEPS * global_batch // 2", "PROFILED_STEPS * global_batch // 20"),
    ("09_monitoring.ipynb", 'shares["starved"] > 0.3', 'shares["starved"] > 0.03'),
    ("09_monitoring.ipynb", 'shares["starved"] / 4', 'shares["starved"] / 2'),  # the bound the proof once had
    ("13_from_horovod.ipynb", "n >= 2", "n >= 1"),
    ("13_from_horovod.ipynb", "gradient_gap < 1e-4 * gradient_size", "gradient_gap < 1e-3 * gradient_size"),
    ("13_from_horovod.ipynb", "gradient_gap < 1e-4 * gradient_size", "gradient_gap < 5e-2 * gradient_size"),  # the review's
    ("13_from_horovod.ipynb", "gradient_gap < 1e-4 * gradient_size", "gradient_gap < 1e-5"),  # the absolute bound it was
    ("13_from_horovod.ipynb", "update_gap < 1e-5", "update_gap < 1e-4"),
    ("13_from_horovod.ipynb", "< 1e-3 * BASE_LR * n", "< 1e-2 * BASE_LR * n"),
    ("13_from_horovod.ipynb", "< 1e-3 * BASE_LR * n", "< 0.4 * BASE_LR * n"),  # the review's
    ("13_from_horovod.ipynb", "max(horovod_gaps.values()) < 1e-4 * gradient_size", "max(horovod_gaps.values()) < 1e-3 * gradient_size"),
    ("13_from_horovod.ipynb", "max(horovod_gaps.values()) < 1e-4 * gradient_size", "max(horovod_gaps.values()) < 1e-1 * gradient_size"),  # the review's
    ("15_models_you_keep.ipynb", "best_epoch < len(val_loss) - 1", "best_epoch <= len(val_loss) - 1"),
    ("15_models_you_keep.ipynb", "<= prediction_tolerance", "<= prediction_tolerance + 1e-6"),  # 0.0 on CPUs
    ("15_models_you_keep.ipynb", "<= loss_tolerance * max(1.0", "<= 10 * loss_tolerance * max(1.0"),
    ("15_models_you_keep.ipynb", "max(1.0, val_loss[best_epoch])", "max(10.0, val_loss[best_epoch])"),
    # lessons 04, 10 and 14: each bound loosened 10x, or a count or a zero to its nearest looser form. Not loosened,
    # bounds of rounding, not of a claim: 04's abs(loss) < inf; 10's rel_tol=1e-6 on float32 schedules; 14's
    # 1e-12 (compute plus all-reduce, one GPU at 1.0) and 1e-9 (the ring's 1.75x), float64 sums of exact terms
    ("04_custom_training_loop.ipynb", "len(in_sync) >= 2", "len(in_sync) >= 1"),
    ("04_custom_training_loop.ipynb", "in_sync[0] >= len(in_sync)", "in_sync[0] >= 1"),
    ("04_custom_training_loop.ipynb", "min(len(s) for s in seen) > 0", "min(len(s) for s in seen) >= 0"),
    ("04_custom_training_loop.ipynb", "overlap == 0", "overlap <= 1"),
    ("04_custom_training_loop.ipynb", "right_gap < 1e-5", "right_gap < 1e-4"),
    ("04_custom_training_loop.ipynb", "num_replicas_in_sync >= 2:", "num_replicas_in_sync >= 3:"),  # the if-guard
    ("04_custom_training_loop.ipynb", "100 * max(right_gap", "10 * max(right_gap"),
    ("04_custom_training_loop.ipynb", "< 0.01 * extra", "< 0.1 * extra"),
    ("04_custom_training_loop.ipynb", 'underflow["float16"] == 0', 'underflow["float16"] <= 1e-8'),
    ("04_custom_training_loop.ipynb", 'scaled by 32768"] > 0', 'scaled by 32768"] >= 0'),
    ("04_custom_training_loop.ipynb", 'underflow["bfloat16"] > 0', 'underflow["bfloat16"] >= 0'),
    ("04_custom_training_loop.ipynb", '"loss scale"] == 32768', '"loss scale"] >= 16384'),
    ("04_custom_training_loop.ipynb", '"steps unscaled"] == 1', '"steps unscaled"] >= 0'),
    ("04_custom_training_loop.ipynb", '0.5 < p["moved', '0.05 < p["moved'),
    ("04_custom_training_loop.ipynb", "< 2 for p", "< 20 for p"),
    ("10_large_batches.ipynb", "max(last_rate.values()) < 1e-6", "max(last_rate.values()) < 1e-5"),
    ("10_large_batches.ipynb", "abs(h - 1) < 1e-4", "abs(h - 1) < 1e-3"),
    ("10_large_batches.ipynb", "left < gap / 2", "left < gap"),  # "most of the gap" to "any of it"
    ("14_predicting_scaling.ipynb", "0.5 < ratio", "0.05 < ratio"),
    ("14_predicting_scaling.ipynb", "ratio < 2.0", "ratio < 20.0"),
    ("14_predicting_scaling.ipynb", "(measured_s - compute_s) / 4", "(measured_s - compute_s) / 40"),
    ("14_predicting_scaling.ipynb", "/ 4 > 0", "/ 4 >= 0"),
    ("14_predicting_scaling.ipynb", ">= 0.9 > max(alone)", ">= 0.8 > max(alone)")]


def loosened_catchers(name: str, old: str, new: str) -> list[str]:
    """The broken cases of `name` its proof fails and passes with `old` loosened to `new` (their expected messages)."""
    source = proof_source(name)
    assert source.count(old) == 1, f"{old!r} is not once in {name}'s proof"
    loosened = compile(source.replace(old, new), f"{name}, loosened", "exec")
    failing = [(broken, match) for n, broken, match in BROKEN if n == name
               and not _passes(source, name, {**OK[name], **broken})]
    return [match for broken, match in failing if _passes(loosened, name, {**OK[name], **broken})]


@pytest.mark.parametrize("name,old,new", LOOSENED, ids=[f"{n[:2]}: {new}" for n, _, new in LOOSENED])
def test_a_loosened_threshold_lets_some_broken_case_through(name, old, new):
    assert loosened_catchers(name, old, new), f"{name}: with {new!r} for {old!r} every broken case still fails"


def test_lesson_11_proof_on_slurm_passes_without_exit_statuses_but_not_without_the_logged_stops():
    """On Slurm the notebook sees no task's exit status (srun returns the highest): the proof then holds
    on the logged stops and ends, and still fails when a worker did not log its stop."""
    name = "11_checkpoints_requeue.ipynb"
    on_slurm = {run: {**summary, "exit statuses": None} if "exit statuses" in summary else summary
                for run, summary in OK[name]["result"].items()}
    _run(name, {"result": on_slurm, "use_slurm": True})
    with pytest.raises(AssertionError, match="every worker should log its stop"):
        _run(name, {"result": {**on_slurm, "custom, warned": {**on_slurm["custom, warned"], "stopped ranks": [0]}},
                    "use_slurm": True})


def test_lesson_10_passes_where_linear_scaling_ends_below_the_small_batch():
    """Full mode at 50,000 images with COURSE_EPOCHS=2 (issue 42): linear scaling with warm-up ended
    below the small batch (0.0035 vs 0.0088; unscaled 0.28), as Goyal et al. allow (they report it
    matches): the old proof, 'between the small and the unscaled large batch', failed on it."""
    ended_below = {**OK["10_large_batches.ipynb"]["final"], "batch 32": 0.0088, "batch 512, same rate": 0.28,
                   "batch 512, linear + warm-up": 0.0035}
    _run("10_large_batches.ipynb", {"math": math, **OK["10_large_batches.ipynb"], "final": ended_below})


def _cell_defining(name: str, marker: str) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and marker in c.source)


def _event(event: str, t: float, rank: int = 0, **fields) -> dict:
    return {"event": event, "time": t, "rank": rank, **fields}


def test_lesson_11_summary_reads_a_requeued_fit_from_its_events():
    """The gathering cell itself, on planted job events: a fit of 2 epochs of 32 steps warned in
    epoch 1, stopped at its checkpoint 16 steps in (optimizer step 48), resumed at epoch 1 with the
    optimizer at step 48 (so 16 steps repeated: 80 in the end), both workers stopping and finishing together.
    Worker 1 logs its stop before the chief logs its save: the chief's save is still the one before the stop."""
    warned = [_event("start", 0, r, run=0, epoch=0, batch=0, weights="init", iterations=0) for r in (0, 1)]
    # worker 1 logs its save and its stop before the chief logs its save (as seen on Slurm)
    warned += [_event("saved", 1.8 if r == 0 else 1, r, epoch=1, batch=16, weights="s", iterations=48) for r in (0, 1)]
    warned += [_event("stopped", 2 if r == 0 else 1.5, r, warnings=["SIGUSR1"], weights="s", iterations=48) for r in (0, 1)]
    warned += [_event("start", 3, r, run=1, epoch=1, batch=0, weights="s", iterations=48) for r in (0, 1)]
    warned += [_event("finished", 4, r, warnings=[], weights="f", iterations=80) for r in (0, 1)]
    warned.sort(key=lambda e: e["time"])  # as the notebook orders them
    never = [_event("start", 0, r, run=0, epoch=0, batch=0, weights="init", iterations=0) for r in (0, 1)]
    never += [_event("finished", 4, r, warnings=[], weights="g", iterations=64) for r in (0, 1)]
    plan = {"epochs": 2, "steps_per_epoch": 32}
    namespace = {"events": {"fit, warned": warned, "fit, never warned": never}, "runs": {}, "print": lambda *a: None,
                 "statuses": {"fit, warned": [[3, 3], [0, 0]]},
                 "plans": {"fit, warned": plan, "fit, never warned": plan}}
    exec(compile(_cell_defining("11_checkpoints_requeue.ipynb", "def summary(name)"), "11", "exec"), namespace)
    got = namespace["summary"]("fit, warned")
    assert got["runs"] == [0, 1] and got["outcomes"] == ["stopped", "finished"], got
    assert got["stopped at"] == ["s"] and got["saved before stop"] == "s" and got["resumed from"] == ["s"], got
    assert got["stopped in"] == [1, 16] and got["resumed at epoch"] == [1] and got["final"] == ["f"], got
    assert got["iterations at start"] == [0, 48] and got["iterations at stop"] == 48 and got["iterations at end"] == [80], got
    reference = namespace["summary"]("fit, never warned")
    assert reference["outcomes"] == ["finished"] and reference["stopped in"] is None and reference["final"] == ["g"]
    # and the proof cell accepts exactly this
    custom = {**got, "final": ["u"], "stopped in": [None, None], "resumed at epoch": [None]}
    assert got["stop steps"] == [48] and got["stopped ranks"] == got["finished ranks"] == got["workers"] == [0, 1], got
    assert got["exit statuses"] == [[3, 3], [0, 0]] and reference["exit statuses"] is None, (got, reference)
    _run("11_checkpoints_requeue.ipynb", {"result": {
        "custom, warned": custom, "handler, warned": custom,
        "fit, warned": got, "custom, never warned": {**reference, "final": ["u"]}, "fit, never warned": reference},
        "use_slurm": False})


@pytest.mark.parametrize("change,match", [
    (None, None),
    # a callback that never stops fit: the default deletes the backup at the end and False keeps it, as after a
    # stop, so the backup alone cannot tell; the optimizer's 8 steps instead of 3 do
    (("self.model.stop_training = batch >= 2", "self.model.stop_training = False"), "^$"),  # its one bare assert
], ids=["as written", "never stopped"])
def test_lesson_11_solution_1_fails_when_fit_was_never_stopped(change, match):
    source = _solution("11_checkpoints_requeue.ipynb", 1)
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    _holds_unless(match, exec, compile(source, "11 solution 1", "exec"), {"print": lambda *a, **k: None})


@pytest.mark.parametrize("name,one_replica", [
    ("01_mirrored_strategy.ipynb", {"strategy": _strategy(1), "copies": {1}, "moving_gap": 0.0,
                                    "partial_splits": {1: [1], 2: [2]}, "expected_splits": {1: [1], 2: [2]}}),
    ("02_input_pipelines.ipynb", {"per_replica": [list(range(8))], "from_fn_per_replica": [list(range(8))],
                                  "last_split": [1], "gamma_nan": [False], "cnn_fit": "ran", "cnn_evaluate": "ran"}),
    ("04_custom_training_loop.ipynb", {"strategy": _strategy(1), "wrong_gap": 0.0}),
    ("12_strategy_tour.ipynb", {"replicas": 1, "central_bn_error": None, "central_mean": 2.0, "overflow_step": None,
                                "copies": {"OneDevice": 1, "Mirrored": 1, "CentralStorage": 1}}),
    ("05_sync_batch_norm.ipynb", {"strategy": _strategy(1), "spread_plain": 0.0, "all_reduces": 3,
                                  "gaps": {**OK["05_sync_batch_norm.ipynb"]["gaps"], "ordinary vs global": 1e-7}})])
def test_a_proof_on_one_replica_passes_and_says_what_it_could_not_compare(name, one_replica, capsys):
    _run(name, {"math": math, **OK[name], **one_replica})
    out = capsys.readouterr().out
    assert "one replica" in out
    if name in SAYS_NOT_CHECKED:  # the line tests/test_proofs_check_in_the_nbval_pass.py must not find there
        assert "NOT CHECKED (one replica)" in out, out


# lessons whose one-replica branch prints a line starting NOT CHECKED (the nbval pass, on 2 replicas, must not)
SAYS_NOT_CHECKED = {"01_mirrored_strategy.ipynb", "02_input_pipelines.ipynb", "04_custom_training_loop.ipynb",
                    "05_sync_batch_norm.ipynb"}


@pytest.mark.parametrize("require,match", [(None, None), ("1", "own run was not compared")], ids=["a laptop", "CI"])
def test_lesson_13_proof_without_horovod_says_it_did_not_compare_and_fails_where_ci_builds_it(
        require, match, monkeypatch, capsys):
    """Issue 54: with no Horovod run (not built, or refused on a login node) the proof cannot compare with
    Horovod's own step: it passes on what it could check and says so, and fails where COURSE_REQUIRE_HOROVOD=1
    (CI, which builds Horovod before the lessons run)."""
    if require:
        monkeypatch.setenv("COURSE_REQUIRE_HOROVOD", require)
    else:
        monkeypatch.delenv("COURSE_REQUIRE_HOROVOD", raising=False)
    _holds_unless(match, _run, "13_from_horovod.ipynb", {**OK["13_from_horovod.ipynb"], "horovod_gaps": None})
    out = capsys.readouterr().out
    assert ("NOT CHECKED (Horovod): Horovod's own run not compared" in out) == (match is None), out


class _PlantedEngines:
    """What lesson 14's engines return, planted: `view.pull(name)` gives one value per worker."""

    def __init__(self, pulled: dict):
        self.view = SimpleNamespace(pull=lambda name, block=True: pulled[name])

    def finish(self) -> str:
        return "stopped"


@pytest.mark.parametrize("saved_ms,overlap", [(6.0, 6.0 / 28.0), (-2.0, 0.0), (40.0, 1.0)],
                         ids=["packs hide some", "packs cost time", "more saved than the all-reduce"])
def test_lesson_14_model_cell_fits_the_link_and_takes_the_overlap_the_packs_got(saved_ms, overlap):
    """The computing cell itself, on planted engine results: all-reduce times of a known ring (1 GB/s,
    1 ms per hop, 2 workers), the slowest worker's numbers taken, and the overlap as the time the
    packs saved over the model's all-reduce, kept between none and all."""
    namespace = {"print": lambda *a: None}
    exec(compile(_cell_defining("14_predicting_scaling.ipynb", "def ring_allreduce_s"), "14", "exec"), namespace)
    link = namespace["Link"]("planted", 1e9, 1e-3)
    sizes = [1_000_000, 4_000_000, 16_000_000]
    times = {s: namespace["ring_allreduce_s"](s, 2, link) for s in sizes}
    gradient_bytes = 26_000_000  # all-reduce 2/2 x 26 MB / 1 GB/s + 2 ms = 28 ms
    one_pack = 0.05
    pulled = {"allreduce_times": [times, {s: t * 0.9 for s, t in times.items()}],
              "together_s": [0.02, 0.021],
              "step_times": [{0: one_pack, 4: one_pack - saved_ms / 1000}, {0: one_pack - 0.01, 4: 0.01}]}
    namespace.update(np=np, gradient_bytes=gradient_bytes, WORKERS=2, alone_s=0.015, engines=_PlantedEngines(pulled),
                     PACKINGS=(0, 4), RING_PACK_BYTES=4)
    exec(compile(_cell_defining("14_predicting_scaling.ipynb", "overlap_seen ="), "14", "exec"), namespace)
    assert namespace["link"].bandwidth == pytest.approx(1e9, rel=1e-6)
    assert namespace["link"].latency == pytest.approx(1e-3, rel=1e-6)
    assert namespace["compute_s"] == 0.021 and namespace["allreduce_s"] == pytest.approx(0.028)
    assert namespace["measured_s"] == one_pack and namespace["overlap"] == pytest.approx(overlap)
    assert namespace["predicted_packed_s"] == pytest.approx(0.021 + (1 - overlap) * 0.028)


@pytest.mark.parametrize("decorator,expected", [("@tf.function(jit_compile=False)", False),
                                                ("@tf.function", None), ("@tf.function(jit_compile=True)", True)])
def test_lesson_14_reads_jit_compile_from_the_traced_step(decorator, expected):
    """Lesson 14's `xla_of` on its own step written three ways: the step as the lesson writes it reads
    False, the decorator left at its default reads None, XLA reads True; the proof accepts only the first."""
    import keras
    import tensorflow as tf

    source = _cell_defining("14_predicting_scaling.ipynb", "def xla_of")
    namespace = {}
    exec(compile(source[source.index("def xla_of"):], "14 xla_of", "exec"), namespace)
    step_source = _cell_defining("14_predicting_scaling.ipynb", "def train_step")
    assert "@tf.function(jit_compile=False)\ndef train_step" in step_source
    step_source = step_source.replace("@tf.function(jit_compile=False)", decorator).split("\n\n\nalone_s")[0]
    step_ns = {"tf": tf, "keras": keras, "wide_cnn": lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])}
    exec(compile(step_source, "14 train_step", "exec"), step_ns)
    images, labels = tf.ones([2, 4]), tf.constant([0, 1])
    xla = {"alone": namespace["xla_of"](step_ns["train_step"], images, labels)}
    assert xla["alone"] is expected
    _holds_unless(None if expected is False else "without XLA", _run, "14_predicting_scaling.ipynb",
                  {**OK["14_predicting_scaling.ipynb"], "xla": {**_XLA, **xla}})


def _gather_and_prove(name: str, namespace: dict) -> None:
    """The notebook's gathering cell (the code cell before the proof) on `namespace`, then its proof."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    gather = code[code.index(proof_source(name)) - 1]
    namespace = {"math": math, "np": np, "print": lambda *a, **k: None, **namespace}
    exec(compile(gather, f"{name} gather", "exec"), namespace)
    exec(compile(proof_source(name), f"{name} proof", "exec"), namespace)


def _timed(label, replicas, inside=0.95):
    """A measured point as lesson 07's runs return it: the span, the share of it inside timed steps."""
    return {**_point(label, replicas), "span_s": 2.0, "in_steps_s": 2.0 * inside, "median_step_s": 0.18}


@pytest.mark.parametrize("inside,match", [(0.95, None), (0.5, "inside timed steps")])
def test_lesson_07_gathering_cell_computes_the_share_inside_timed_steps(inside, match):
    """From the runs' raw spans: a run whose timed steps cover half of its span (the rest: start-up,
    iterator teardown) must fail the proof through the gathering cell's arithmetic."""
    raw = {"points": [_timed("MirroredStrategy", 1), _timed("MirroredStrategy", 2, inside),
                      _timed("MultiWorkerMirroredStrategy", 2)], "per_replica": 32, "STEPS": 10}
    _holds_unless(match, _gather_and_prove, "07_scaling_performance.ipynb", raw)


@pytest.mark.parametrize("baseline_jit,auto_jit,match", [(False, "", None), (True, "", "without XLA"),
                                                         (False, "--tf_xla_auto_jit=2", "auto-clustering")])
def test_lesson_07_gathering_cell_reads_each_runs_jit_compile(baseline_jit, auto_jit, match):
    """From the runs' own results: a 1-replica baseline that Keras ran with XLA, or one whose process
    had XLA's auto-clustering on (jit_compile=False then compiles anyway), must fail the proof
    through the gathering cell."""
    raw = {"points": [{**_timed("MirroredStrategy", 1), "jit_compile": baseline_jit, "auto_jit": auto_jit},
                      _timed("MirroredStrategy", 2), _timed("MultiWorkerMirroredStrategy", 2)],
           "per_replica": 32, "STEPS": 10}
    _holds_unless(match, _gather_and_prove, "07_scaling_performance.ipynb", raw)


def _ps_raw(spans, losses) -> dict:
    """Lesson 12's raw results: step spans of the asynchronous workers and their losses, the synchronous logs."""
    ok = OK["12_strategy_tour.ipynb"]
    return {**{k: v for k, v in ok.items() if k not in ("overlapping", "first", "last", "sync_first", "sync_last",
                                                        "copies", "evaluated")},
            "async_spans": spans, "async_log": [(loss, 0, 1, 0.0, 0.1) for loss in losses],
            "sync_logs": [[(0, 0, 2.3 - 0.1 * i) for i in range(10)]] * 2,
            "one_process": {name: {"copies": copies, "evaluated": 0.5, "before": 2.34}
                            for name, copies in {"OneDevice": 1, "Mirrored": 2, "CentralStorage": 1}.items()}}


@pytest.mark.parametrize("spans,losses,match", [
    ([(i, i + 1.5) for i in range(40)], [2.3 - 0.03 * i for i in range(40)], None),
    ([(i, i + 0.9) for i in range(40)], [2.3 - 0.03 * i for i in range(40)], "did not train asynchronously"),
    ([(i, i + 1.5) for i in range(40)], [2.0 + 0.01 * i for i in range(40)], "did not lower its loss")],
    ids=["asynchronous and learning", "steps one after another", "loss rising"])
def test_lesson_12_gathering_cell_counts_overlaps_and_loss_from_the_raw_log(spans, losses, match):
    """From the raw step spans and losses: steps that never overlap, or a loss that rises over the
    run, must fail the proof through the gathering cell's counting and averaging."""
    raw = _ps_raw(spans, losses)
    _holds_unless(match, _gather_and_prove, "12_strategy_tour.ipynb", raw)


def _solution(name: str, number: int) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    return next(c.source for c in nb.cells if c.source.startswith(f"# Solution {number}"))


def _lesson_13_solution_1(count, sizes) -> None:
    """Lesson 13's solution 1 on this lesson's measured run (2 engines: their sizes `sizes`), with TensorFlow's
    count of MWMS's replicas, CollectiveAllReduceExtended._num_replicas_in_sync, replaced by `count` (None: as is)."""
    from unittest import mock

    import tensorflow as tf
    from tensorflow.python.distribute import collective_all_reduce_strategy as mwms

    namespace = {"tf": tf, "ranks": [0, 1], "sizes": sizes, "BASE_LR": 0.05, "print": lambda *a, **k: None}
    source = compile(_solution("13_from_horovod.ipynb", 1), "13 solution 1", "exec")
    if count is None:
        exec(source, namespace)
        return
    with mock.patch.object(mwms.CollectiveAllReduceExtended, "_num_replicas_in_sync", property(count)):
        exec(source, namespace)


@pytest.mark.parametrize("count,sizes,match", [
    (None, [2, 2], None),
    (lambda self: self._num_workers, [2, 2], "^\\(2, 2\\)$"),  # one replica per worker, as Horovod's size per process
    (lambda self: len(self.worker_devices), [2, 2], "TensorFlow's count"),  # the devices of one worker only
    (None, [4, 4], "TensorFlow's count")],  # engines that measured 4 replicas: the stand-in is not their job
    ids=["as TensorFlow counts", "workers only", "devices only", "other engines"])
def test_lesson_13_solution_1_takes_its_count_from_tensorflow(count, sizes, match):
    """Issue 54 (13 cell 53: the solution asserted its own arithmetic): the answer is TensorFlow's own count on
    the job's shape, checked first against the engines' measured size, so a count other than
    devices x workers fails it."""
    _holds_unless(match, _lesson_13_solution_1, count, sizes)


LESSON_13_SOLUTION_2 = """
import sys
import nbformat
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * int(sys.argv[1]))
import keras, numpy as np

cells = [c.source for c in nbformat.read("notebooks/13_from_horovod.ipynb", as_version=4).cells if c.cell_type == "code"]
ns = {"tf": tf, "keras": keras, "np": np, "print": print}
exec(next(c for c in cells if c.startswith("%%writefile {model_file}")).split("\\n", 1)[1], ns)  # make_model
rng = np.random.default_rng(0)
ns.update(images=rng.uniform(size=(32, 32, 32, 3)).astype("float32"), labels=rng.integers(0, 10, size=32).astype("int32"))
try:
    exec(next(c for c in cells if c.startswith("# Solution 2")), ns)
except AssertionError as exc:
    print("FAILED", exc)
else:
    print("PASSED")
"""


@pytest.mark.parametrize("devices,expected", [(2, "PASSED"), (1, "FAILED the check needs 2 replicas or more")],
                         ids=["two replicas", "one device"])
def test_lesson_13_solution_2_measures_the_step_on_two_replicas(devices, expected):
    """Issue 54 (13 cell 54): the solution once divided by len(x) * 2 whatever the replicas, so its ratio of 2 held
    by construction, on one device too. Now it measures the step apply_gradients takes with each loss and needs it
    num_replicas_in_sync times too large, on 2 replicas or more: on one device it must fail."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_13_SOLUTION_2, str(devices)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    verdict = [line for line in done.stdout.splitlines() if line.startswith(("PASSED", "FAILED"))]
    assert verdict and verdict[-1].startswith(expected), done.stdout[-2000:]
    if devices == 2:
        assert "the step is 2.000 times too large" in done.stdout, done.stdout[-2000:]


# rank 0 of lesson 13's two Slurm engines in a hub server job of the node layout (--ntasks=4 --gres=gpu:4): the
# step's variables as srun sets them, and the node's 4 GPUs; TensorFlow taken for a GPU build (the CPU wheel here)
LESSON_13_NODE_ENGINE = """
import json, os
os.environ.update({"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                   "SLURM_NODEID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "localhost",
                   "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_NTASKS": "4", "SLURM_GPUS_ON_NODE": "4",
                   "CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURMD_NODENAME": "localhost"})
import helpers.gpus, helpers.resolver
helpers.resolver.tensorflow_is_cpu_build = helpers.gpus.tensorflow_is_cpu_build = lambda: False
from helpers.engines import on_engine
os.environ["TF_CONFIG"] = json.dumps(on_engine.slurm_tf_config())  # what setup_multiworker writes there
import nbformat
import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy as mwms

cell = next(c.source for c in nbformat.read("notebooks/13_from_horovod.ipynb", as_version=4).cells
            if "# Horovod: hvd.init()" in c.source)
ns = {"tf": tf, "os": os, "cluster_resolver": helpers.resolver.cluster_resolver}  # whichever resolver the cell makes
exec(next(line for line in cell.splitlines() if line.startswith("resolver = ")), ns)
mwms.context.num_gpus = lambda: 1  # the one GPU the pinning cell leaves TensorFlow
devices, _ = mwms.CollectiveAllReduceExtended._initialize_local_devices(None, ns["resolver"], "/job:worker/task:0")
print("ENGINE", os.environ["CUDA_VISIBLE_DEVICES"], type(ns["resolver"]).__name__, json.dumps(list(devices)))
"""


def test_lesson_13_strategy_on_a_gpu_node_makes_one_replica_per_engine():
    """Issue 54 (13 cells 18-21): on Slurm engines in the node layout each engine holds 2 of the node's 4 GPUs,
    and the lesson pins TensorFlow to the first, one replica per worker as one Horovod process. The strategy
    then counts GPUs as its resolver says: the course's Slurm resolver names the engine's 2 (MWMS listed GPU:0
    and GPU:1, a replica on a GPU the pin hid), TFConfigClusterResolver makes MWMS count the GPUs TensorFlow sees.
    Simulated (no GPU here): rank 0 of two engines, TensorFlow taken for a GPU build that sees one GPU."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_13_NODE_ENGINE], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={k: v for k, v in os.environ.items()
                                         if not k.startswith(("SLURM", "TF_CONFIG", "CUDA_VISIBLE", "COURSE_CLASS_LAYOUT"))})
    assert done.returncode == 0, done.stderr[-3000:]
    visible, kind, devices = next(l for l in done.stdout.splitlines() if l.startswith("ENGINE ")).split(" ", 3)[1:]
    assert visible == "0,1", f"the engine's share of the node's GPUs: {visible}"  # the simulation's premise
    assert json.loads(devices) == ["/job:worker/task:0/device:GPU:0"], \
        f"one replica per engine expected, on the GPU the pin left; {kind} gave MWMS {devices}"


class _PlantedHorovod:
    """helpers.horovod_env as lesson 13's Horovod cell uses it: built, allowed by `refusal`, and `run` recorded."""

    def __init__(self):
        self.runs = []

    def site_dir(self):
        return Path("/built")

    def refusal(self, n):
        return None

    def run(self, *args, **kwargs):
        self.runs.append(args)
        raise RuntimeError("horovodrun started")


@pytest.mark.parametrize("layout,ran", [(None, True), ("node", True), ("gpu", False)])
def test_lesson_13_does_not_run_horovodrun_where_classmates_share_the_node(layout, ran, monkeypatch, capsys):
    """Issue 54 (13 cell 38): horovodrun's rendezvous listens on every interface and its Gloo ports on loopback,
    on ports no course firewall guards: in the GPU-per-learner layout (classmates' jobs on the node) the lesson
    says why it does not run it and compares with the recipe by hand; elsewhere, where allowed, it runs."""
    import sys

    nb = nbformat.read(NOTEBOOKS / "13_from_horovod.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if c.source.startswith("from helpers import horovod_env"))
    planted = _PlantedHorovod()
    monkeypatch.setitem(sys.modules, "helpers.horovod_env", planted)
    monkeypatch.setattr(__import__("helpers"), "horovod_env", planted, raising=False)
    if layout is None:
        monkeypatch.delenv("COURSE_CLASS_LAYOUT", raising=False)
    else:
        monkeypatch.setenv("COURSE_CLASS_LAYOUT", layout)
    namespace = {"N_ENGINES": 2, "work_dir": Path("/w"), "horovod_script": Path("/w/horovod_step.py"), "BASE_LR": 0.05}
    if ran:
        with pytest.raises(RuntimeError, match="horovodrun started"):
            exec(compile(cell, "13 Horovod cell", "exec"), namespace)
    else:
        exec(compile(cell, "13 Horovod cell", "exec"), namespace)
        assert namespace["horovod_result"] is None
        assert "not run here: COURSE_CLASS_LAYOUT=gpu" in capsys.readouterr().out
    assert len(planted.runs) == int(ran)


@pytest.mark.parametrize("change,match", [
    (None, None),
    (("save_best_only=True", "save_best_only=False"), "the file should score the best"),  # it keeps the last epoch
    (("0.05 * (-20 if epoch == 4 else 1)", "0.05"), "staged last epoch should be worse"),  # best = last proves nothing
], ids=["as written", "save_best_only=False", "no staged last epoch"])
def test_lesson_15_solution_1_fails_when_the_file_is_not_the_best_epoch(change, match):
    """Solution 1's check on a run where the best val_accuracy is not the last: a checkpoint that
    keeps every epoch (so the last) fails it, and so does a run with no worse last epoch."""
    import keras

    source = _solution("15_models_you_keep.ipynb", 1)
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    namespace = {"np": np, "keras": keras, "print": lambda *a, **k: None}
    _holds_unless(match, exec, compile(source, "15 solution 1", "exec"), namespace)


LESSON_07_SLEEPY = """
import json, sys, time
import nbformat
from helpers.data import ensure_data, load_split

nb = nbformat.read("notebooks/07_scaling_performance.ipynb", as_version=4)
program = next(c.source for c in nb.cells if c.source.startswith("%%writefile")).split("\\n", 1)[1]
ns = {"__name__": "measure_07"}
exec(compile(program, "07_measure", "exec"), ns)
import tensorflow as tf


class BetweenSteps(ns["StepTimes"]):  # the program's own timer, then work no timer sees
    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        time.sleep(float(sys.argv[1]))


ns["StepTimes"] = BetweenSteps
examples = load_split("train", ensure_data(True).data_dir, limit=512)
print("POINT " + json.dumps(ns["measure"](tf.distribute.get_strategy(), examples, "cnn", 32, 10)))
"""


@pytest.mark.parametrize("sleep,match", [(0.0, None), (0.3, "inside timed steps")])
def test_lesson_07_proof_fails_when_time_passes_between_timed_steps(sleep, match):
    """The real measurement with a callback that sleeps after each step's end: the timed steps no
    longer account for the span, and the proof must say so (without the sleep, it passes)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_07_SLEEPY, str(sleep)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**__import__("os").environ, "COURSE_MODE": "quick"})
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    measured = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("POINT "))[6:])
    points = [{**measured, "label": "MirroredStrategy"},
              _point("MirroredStrategy", 2), _point("MultiWorkerMirroredStrategy", 2)]
    for p in points[1:]:
        p.update(span_s=2.0, in_steps_s=1.9, median_step_s=0.18)
    raw = {"points": points, "per_replica": 32, "STEPS": 10}
    _holds_unless(match, _gather_and_prove, "07_scaling_performance.ipynb", raw)


LESSON_04_PRECISION = """
import json, sys
import nbformat
from helpers import environment
environment.local_replicas(2)
import keras, numpy as np, tensorflow as tf
from helpers.lesson import small_cnn

nb = nbformat.read("notebooks/04_custom_training_loop.ipynb", as_version=4)
code = [c.source for c in nb.cells if c.cell_type == "code"]
step = next(s for s in code if s.startswith("def make_train_step"))
if sys.argv[1] in ("unscaled", "through the inner optimizer"):
    step = step.replace("to_differentiate = optimizer.scale_loss(loss) if scaled else loss", "to_differentiate = loss")
if sys.argv[1] == "through the inner optimizer":  # nothing scaled, nothing divided back
    applied = "optimizer.apply_gradients(zip(gradients, model.trainable_variables))"
    assert applied in step
    step = step.replace(applied, "(optimizer.inner_optimizer if scaled else optimizer).apply_gradients("
                                 "zip(gradients, model.trainable_variables))")
ns = {"keras": keras, "np": np, "tf": tf, "small_cnn": small_cnn,
      "strategy": tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")]),
      "print": lambda *a, **k: None}
exec(step, ns)
exec(next(s for s in code if s.startswith("def correct_predictions")), ns)
rng = np.random.default_rng(0)
ns.update(images=rng.uniform(size=(16, 32, 32, 3)).astype("float32"), labels=rng.integers(0, 10, size=16).astype("int32"))
first = next(i for i, s in enumerate(code) if s.startswith("underflow = "))
last = next(i for i, s in enumerate(code) if s.startswith("precision = {}"))
for cell in code[first:last + 1]:  # the mixed-precision cells, in order
    exec(cell, ns)
sys.stdout.write("PRECISION " + json.dumps(ns["precision"]) + "\\n")
"""


@pytest.mark.parametrize("variant,match", [("as written", None), ("unscaled", "about as far"),
                                           ("through the inner optimizer", "unscaled one step")])
def test_lesson_04_proof_fails_when_the_float16_step_does_not_scale_its_loss(variant, match):
    """Notebook 04's own step and mixed-precision cells, run; then its proof on what they measured. The
    step with `to_differentiate = loss` (the loss not scaled, the gradients still divided) must fail, and
    so must the step that also applies through `optimizer.inner_optimizer` (nothing scaled, nothing divided
    back: its step is as long as float32's and the scale still reads 32768, but the optimizer unscaled nothing)."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_04_PRECISION, variant], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**__import__("os").environ})
    assert done.returncode == 0, done.stderr[-3000:]
    precision = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("PRECISION "))[10:])
    namespace = {**OK["04_custom_training_loop.ipynb"], "precision": precision}
    _holds_unless(match, _run, "04_custom_training_loop.ipynb", namespace)


def _assignment(name: str, target: str) -> str:
    """The statement of a notebook's code cell that assigns `target` (its gathering cells compute figures so)."""
    import ast

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.source.lstrip().startswith("%"):
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == target for t in node.targets):
                return ast.get_source_segment(cell.source, node)
    raise AssertionError(f"{name}: no cell assigns {target}")


@pytest.mark.parametrize("log,expected", [
    ('UNLOADED {"tensorflow": false, "EBPYTHONPREFIXES": ""}\n', True),
    ('UNLOADED {"tensorflow": true, "EBPYTHONPREFIXES": ""}\n', False),  # found without the module: not through it
    ("", False),  # the job never got that far
], ids=["not found", "found anyway", "no line"])
def test_lesson_17_needs_module_reads_the_unloaded_line(log, expected):
    """TensorFlow came through the module only if the venv finds none after `module unload`."""
    namespace = {"json": __import__("json"), "stack_log": log}
    for target in ("unloaded", "needs_module"):
        exec(_assignment("17_software_stack.ipynb", target), namespace)
    assert namespace["needs_module"] is expected


def test_lesson_17_loaded_needs_the_module_list_line_not_any_mention():
    """Lmod names a module it cannot find too: only `module list`'s `1) NAME` line proves it loaded."""
    line = _assignment("17_software_stack.ipynb", "loaded")
    listed = "\nCurrently Loaded Modules:\n  1) tf-hpc-course/2026.11\n\n"
    unknown = 'Lmod has detected the following error:  The following module(s) are unknown: "tf-hpc-course/2026.11"\n'
    assert eval(line.split("=", 1)[1], {"stack_log": listed}) is True
    assert eval(line.split("=", 1)[1], {"stack_log": unknown}) is False


_STACK_17 = {"pyvenv_cfg": "home = /usr/bin\ninclude-system-site-packages = true\n", "pythonpath": "",
             "sys_path": ["/usr/lib/python3.11", "/j/venv/lib/python3.11/site-packages", "/m/lib/python3.11/site-packages",
                          "/usr/lib/python3/dist-packages"]}


@pytest.mark.parametrize("change,match", [
    ({}, None),
    ({"pythonpath": "/m/lib/python3.11/site-packages",  # a module on PYTHONPATH: its packages ahead
      "sys_path": ["/m/lib/python3.11/site-packages", "/j/venv/lib/python3.11/site-packages", "/usr/lib/python3/dist-packages"]},
     "recommended"),
    ({"pyvenv_cfg": "home = /usr/bin\ninclude-system-site-packages = false\n"}, "recommended"),  # not the route 17:5 gives
    ({"sys_path": ["/j/venv/lib/python3.11/site-packages", "/usr/lib/python3/dist-packages"]}, "recommended"),  # no .pth reader
], ids=["as the job reports", "PYTHONPATH", "no --system-site-packages", "module not read"])
def test_lesson_17_recommended_route_needs_system_site_packages_the_pth_and_no_pythonpath(change, match):
    """The gathering of `recommended_route` on the job's report: the venv made with
    --system-site-packages, no PYTHONPATH, its own site-packages first and the module's right after."""
    nb = nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if "recommended_route = " in c.source and "assert" not in c.source)
    lines = cell.splitlines()
    first = next(i for i, l in enumerate(lines) if l.startswith("module_site = "))
    last = next(i for i, l in enumerate(lines) if l.startswith("recommended_route = "))
    source = "\n".join(lines[first:last + 2])
    namespace = {"sysconfig": SimpleNamespace(get_paths=lambda: {"purelib": "/m/lib/python3.11/site-packages"}),
                 "sys": SimpleNamespace(prefix="/m"), "Path": Path, "job_dir": Path("/j"), "stack": {**_STACK_17, **change}}
    exec(source, namespace)

    def prove():
        assert namespace["recommended_route"], "the venv should take the recommended route"

    _holds_unless(match, prove)


class _Ran:
    """subprocess for lesson 17's solution 1: each program's Keras, as `keras_of` runs it."""

    def __init__(self, from_import: str):
        self.from_import = from_import

    def run(self, command, **kwargs):
        program = command[-1]
        if "from tensorflow.keras import" in program:
            keras = self.from_import
        else:  # each attribute (tf.keras, tf.optimizers) follows the value at its own first use
            attribute = "tf.optimizers" if "tf.optimizers" in program else "tf.keras"
            keras = "keras" if program.index(attribute) < program.index("TF_USE_LEGACY_KERAS") else "tf_keras"
        return SimpleNamespace(stdout=f"{keras}.src.models.sequential\n", returncode=0)


@pytest.mark.parametrize("from_import,match", [("keras", None), ("tf_keras", "from tensorflow.keras import the import")],
                         ids=["import-time value", "follows the first use"])
def test_lesson_17_solution_1_sees_the_import_path(from_import, match):
    """Solution 1 checks `from tensorflow.keras import` apart from the attribute tf.keras: were the
    import to follow the value at first use (tf_keras), as the attribute does, it must fail."""
    source = next(c.source for c in nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
                  if c.source.startswith("# Solution 1"))
    namespace = {"subprocess": _Ran(from_import), "sys": SimpleNamespace(executable="python"),
                 "os": SimpleNamespace(environ={"TF_USE_LEGACY_KERAS": "1"}), "print": lambda *a, **k: None}
    _holds_unless(match, exec, compile(source, "17 solution 1", "exec"), namespace)


class _Shell:
    """subprocess for lesson 17's solution 2: PATH before, with and after the module; the venv's einops
    in a job after another Python module, without and with `module purge`."""

    def __init__(self, no_purge: str, purge: str):
        self.no_purge, self.purge = no_purge, purge

    def run(self, command, **kwargs):
        if "echo $PATH" in command[-1]:
            return SimpleNamespace(stdout="/usr/bin:/bin\n/m/bin:/usr/bin:/bin\n/usr/bin:/bin\n")
        return SimpleNamespace(stdout=(self.purge if "module purge" in command[-1] else self.no_purge) + "\n")


@pytest.mark.parametrize("no_purge,purge,match", [
    ("0.1-other", "99.0", None),
    ("99.0", "99.0", "without module purge"),  # the other module's PYTHONPATH never got ahead: nothing shown
    ("0.1-other", "0.1-other", "without module purge"),  # module purge did not help
], ids=["as run", "no shadowing shown", "purge did not help"])
def test_lesson_17_solution_2_shows_what_a_forgotten_purge_does(tmp_path, no_purge, purge, match):
    """Solution 2's answer to "what can go wrong": the venv takes another Python module's einops
    without `module purge`, and its own with it; both must be seen, or the solution fails."""
    source = next(c.source for c in nbformat.read(NOTEBOOKS / "17_software_stack.ipynb", as_version=4).cells
                  if c.source.startswith("# Solution 2"))
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    (tmp_path / "modulefiles").mkdir()
    namespace = {"subprocess": _Shell(no_purge, purge), "sys": SimpleNamespace(prefix="/m"), "os": os,
                 "lmod_here": True, "job_dir": tmp_path, "modulefiles": tmp_path / "modulefiles", "print": lambda *a, **k: None}
    _holds_unless(match, exec, compile(source, "17 solution 2", "exec"), namespace)


def test_lesson_16_same_data_fails_when_one_pipeline_is_shorter():
    """zip would stop at the shorter pipeline and call a truncated one the same data: it must raise."""
    line = _assignment("16_input_at_scale.ipynb", "same_data")
    batches = [(np.arange(4), np.arange(4)), (np.arange(4, 8), np.arange(4, 8))]
    same = {"np": np, "one_pass": None,
            "ways": {"map, then batch": lambda _: iter(batches), "batch, then map": lambda _: iter(batches)}}
    exec(line, same)
    assert same["same_data"] is True
    truncated = {"np": np, "one_pass": None,
                 "ways": {"map, then batch": lambda _: iter(batches), "batch, then map": lambda _: iter(batches[:1])}}
    with pytest.raises(ValueError, match="shorter|longer"):
        exec(line, truncated)


@pytest.mark.parametrize("change,match", [
    (None, None),
    # both workers with one seed: the claim (differently seeded shuffles clash) would not be shown
    (("files_of_worker(1, s + 1, True)", "files_of_worker(1, s, True)"), "should give some file to both"),
    # the "fix" with differently seeded shuffles still clashes
    (("files_of_worker(0, None, False) & files_of_worker(1, None, False)",
      "files_of_worker(0, 1, True) & files_of_worker(1, 2, True)"), "should give each file to one worker"),
    # "one seed everywhere" that is not one seed
    (("files_of_worker(0, 7, True) & files_of_worker(1, 7, True)",
      "files_of_worker(0, 7, True) & files_of_worker(1, 8, True)"), "one seed everywhere"),
], ids=["as written", "one seed for both", "no fix", "one seed, not one"])
def test_lesson_16_solution_2_fails_when_the_manual_shard_trap_is_not_shown(tmp_path, change, match):
    """Solution 2 lists 8 file names, shuffles them per worker and shards by hand: it must show
    two workers picking one file when their seeds differ, and none when the order is one."""
    import tensorflow as tf

    for k in range(8):
        (tmp_path / f"part-{k:05d}.tfrecord").write_bytes(b"")
    source = _solution("16_input_at_scale.ipynb", 2)
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    namespace = {"tf": tf, "shared": tmp_path, "print": lambda *a, **k: None}
    _holds_unless(match, exec, compile(source, "16 solution 2", "exec"), namespace)


def _function(name: str, function: str) -> str:
    """The source of a function a notebook's code cell defines."""
    import ast

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and not cell.source.lstrip().startswith("%"):
            for node in ast.parse(cell.source).body:
                if isinstance(node, ast.FunctionDef) and node.name == function:
                    return ast.get_source_segment(cell.source, node)
    raise AssertionError(f"{name}: no cell defines {function}")


@pytest.mark.parametrize("reads", ["its copy", "the shared directory"])
def test_lesson_16_a_worker_that_reads_the_shared_directory_fails_the_run(tmp_path, reads):
    """read_on hides the shared directory once the copy is made: a worker that reads it instead of
    its copy finds nothing and writes no report, and read_on raises (as it does for any worker that
    did not report: a cancelled job, say)."""
    import json
    import os
    import shutil
    import sys
    import time

    shared = tmp_path / "shared"
    shared.mkdir()
    for k in range(2):
        (shared / f"part-{k}.tfrecord").write_bytes(b"x")

    def run_local_workers(args, n, deadline_s):  # stand-in workers: report what they can list
        files, out = args[args.index("--files") + 1], Path(args[args.index("--out") + 1])
        where = str(shared) if reads == "the shared directory" else files
        outcomes = []
        for rank in range(n):
            if os.path.isdir(where) and os.listdir(where):
                out.mkdir(exist_ok=True)
                (out / f"worker-{rank}.json").write_text(json.dumps({"rank": rank, "read_from": where}))
            outcomes.append(SimpleNamespace(output=f"WORKER {rank} read {where}\n"))
        return outcomes

    namespace = {"use_slurm": False, "job_dir": tmp_path, "shared": shared, "hidden": tmp_path / "shared-hidden", "hidden_first": {},
                 "run_local_workers": run_local_workers, "shutil": shutil, "time": time, "json": json, "sys": sys}
    exec(_function("16_input_at_scale.ipynb", "read_on"), namespace)
    if reads == "its copy":
        assert [r["rank"] for r in namespace["read_on"](2)] == [0, 1]
        assert namespace["hidden_first"] == {2: True}
    else:
        with pytest.raises(RuntimeError, match="0 of 2 workers reported"):
            namespace["read_on"](2)
    assert sorted(p.name for p in shared.iterdir()) == ["part-0.tfrecord", "part-1.tfrecord"], "shared restored"


@pytest.mark.parametrize("seen", ["staged, no report yet", "gone before the kernel looked", "reports before STAGED"])
def test_lesson_16_run_job_notes_whether_it_hid_the_shared_directory_before_any_report(tmp_path, seen, monkeypatch):
    """On Slurm the kernel hides the shared directory when the job's log says STAGED: only a job seen
    in the queue with STAGED in its log and no worker report yet counts as hidden first; a job that
    left the queue before the kernel looked, or whose workers reported first, must not. The wait is
    the package's (`wait_for_job`), its squeue answered here."""
    import os
    import subprocess
    import sys
    import time

    from helpers.slurm import queue

    shared, out = tmp_path / "shared", tmp_path / "run-2"
    shared.mkdir()
    out.mkdir()
    log = tmp_path / "tf-shards-7.out"
    log.write_text("STAGED 2 nodes 5 ms\n")
    if seen == "reports before STAGED":
        (out / "worker-0.json").write_text("{}")
    polls = []

    def run(argv, **kwargs):  # sbatch answers job 7; squeue shows it once (or never), then it is gone
        if argv[0] == "squeue":
            polls.append(shared.exists())
            queued = seen != "gone before the kernel looked" and len(polls) == 1
            return SimpleNamespace(stdout="7\n" if queued else "", stderr="", returncode=0)
        return SimpleNamespace(stdout="7\n", stderr="", returncode=0)

    monkeypatch.setattr(queue, "subprocess", SimpleNamespace(run=run, TimeoutExpired=subprocess.TimeoutExpired))
    namespace = {"os": os, "sys": sys, "time": time, "subprocess": SimpleNamespace(run=run), "added": [], "NODES": 2,
                 "job_environment": lambda extra: {}, "job_dir": tmp_path, "shared": shared,
                 "hidden": tmp_path / "shared-hidden", "hidden_first": {2: False}, "course_setting": settings_value,
                 "wait_for_job": queue.wait_for_job}
    exec(_function("16_input_at_scale.ipynb", "run_job"), namespace)
    assert "STAGED" in namespace["run_job"](2, out)
    assert namespace["hidden_first"] == {2: seen == "staged, no report yet"}, (seen, namespace["hidden_first"])


@pytest.mark.parametrize("where,held", [("its copy", True), ("the shared directory", False),
                                        ("a link to it", False), ("a bind mount of it", False)])
def test_lesson_16_a_copy_is_told_from_the_shared_directory_by_path_and_by_inode(tmp_path, where, held):
    """staged_everywhere compares the resolved path and the device and inode a worker reports with
    the shared directory's: a link to it, or the same directory under another name (a bind mount,
    here a report with another path and the shared directory's inode), is not a copy."""
    import os

    shared, copy = tmp_path / "shared", tmp_path / "copy"
    shared.mkdir(), copy.mkdir()
    (tmp_path / "link").symlink_to(shared)
    path = {"its copy": copy, "the shared directory": shared, "a link to it": tmp_path / "link",
            "a bind mount of it": copy}[where]
    stat = os.stat(shared if where == "a bind mount of it" else path)
    report = {"read_from": os.path.realpath(path), "read_from_id": [stat.st_dev, stat.st_ino], "files_there": ["a"] * 8}
    namespace = {"os": os, "shared": shared, "SHARDS": 8, "reports": {2: [report]}}
    exec(_assignment("16_input_at_scale.ipynb", "shared_id"), namespace)
    exec(_assignment("16_input_at_scale.ipynb", "staged_everywhere"), namespace)
    assert namespace["staged_everywhere"] == {2: held}


def _lesson_16_shards(directory: Path, train_size: int, file_of) -> dict:
    """`train_size` records as lesson 16 writes them, example i into file file_of(i) of 8; shards.py's names."""
    import tensorflow as tf

    from tests.test_notebook_programs import written_programs

    directory.mkdir()
    writers = [tf.io.TFRecordWriter(str(directory / f"cifar10-train-{k:05d}-of-00008.tfrecord")) for k in range(8)]
    for i in range(train_size):
        ints = {"label": 0, "index": i, "shard": file_of(i)}
        feature = {name: tf.train.Feature(int64_list=tf.train.Int64List(value=[v])) for name, v in ints.items()}
        feature["image"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(32 * 32 * 3)]))
        writers[file_of(i)].write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    for writer in writers:
        writer.close()
    shards = {}
    exec(written_programs("16_input_at_scale.ipynb")['"shards.py"}'], shards)
    return shards


@pytest.mark.parametrize("layout,change,match", [
    ("round-robin", None, None),
    # the same counts per file (256 each), other examples: the count alone would not see it
    ("contiguous blocks", None, "should hold the examples"),
    # list_files' default shuffle: shard(3, 2) takes files of a random order
    ("round-robin", ("shuffle=False)", "shuffle=True, seed=1)"), "should read the files"),
], ids=["as written", "blocks", "shuffled list"])
def test_lesson_16_solution_1_reads_the_examples_in_the_files(tmp_path, layout, change, match):
    """Solution 1 names worker 2's files and reads the examples really in them: files written in
    contiguous blocks (each file 256 of 2,048, like round-robin) or a shuffled file list must fail it."""
    import tensorflow as tf

    file_of = (lambda i: i % 8) if layout == "round-robin" else (lambda i: i // 256)
    shards = _lesson_16_shards(tmp_path / "shared", 2048, file_of)
    source = _solution("16_input_at_scale.ipynb", 1)
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    namespace = {"tf": tf, "shared": tmp_path / "shared", "SHARDS": 8, "train_size": 2048,
                 "parse_batch": shards["parse_batch"], "print": lambda *a, **k: None}
    _holds_unless(match, exec, compile(source, "16 solution 1", "exec"), namespace)
    if match is None:
        assert len(namespace["indices"]) == 512


def test_the_mutants_drop_each_operand_each_link_and_each_raise():
    """The meta-test's own mutants, on a small proof: what each drops, and that each one still runs."""
    source = "assert a and 0 < b < c, 'm'\nif not a:\n    raise AssertionError('r')\n"
    got = {what: code for _, what, code in _mutants(source)}
    assert sorted(got) == ["and-operand 1 of 2 dropped", "and-operand 2 of 2 dropped", "and-operand 2: link 1 of 2 dropped",
                           "and-operand 2: link 2 of 2 dropped", "assert removed", "raise removed"]
    held = {what: _passes(code, "t", {"a": 1, "b": 0, "c": 1}) for what, code in got.items()}  # only 0 < b fails
    assert held == {"and-operand 1 of 2 dropped": False, "and-operand 2 of 2 dropped": True,
                    "and-operand 2: link 1 of 2 dropped": True, "and-operand 2: link 2 of 2 dropped": False,
                    "assert removed": True, "raise removed": False}
    (_, _, raise_removed), = _mutants("if not a:\n    raise AssertionError('r')\n")
    assert _passes(raise_removed, "t", {"a": 0}) and not _passes("if not a:\n    raise AssertionError('r')\n", "t", {"a": 0})


# The gathering cells of lessons 01, 04, 05, 08, 09 and 13 on planted raw data: what a run measures
# (variables' copies per replica, what engines return, files a job wrote), so that a broken raw
# figure must fail the proof through the gathering cell's own arithmetic, not a planted final value.

def _copies(*values) -> SimpleNamespace:
    """A variable as the gathering cells read it: its `path`, its `value` (the replicas' copies, each
    with `.numpy()` as a replica's tensor has)."""
    return SimpleNamespace(path="", value=[SimpleNamespace(numpy=lambda v=v: np.asarray(v, dtype="float32")) for v in values])


def _named(path: str, variable: SimpleNamespace, read: int = 0) -> SimpleNamespace:
    """A Keras variable: its path, its copies, and `numpy()` giving copy `read` (TensorFlow reads the first)."""
    return SimpleNamespace(path=path, value=variable.value, numpy=lambda: variable.value[read].numpy())


_ONE_REPLICA_EACH = SimpleNamespace(experimental_local_results=lambda copies: copies, num_replicas_in_sync=2)


class _SavedModels:
    """`model.save` and `keras.models.load_model` as lesson 01's gathering cell uses them: save keeps what
    each non-trainable variable's `numpy()` reads (outside a replica), load gives those values back."""

    def __init__(self):
        self.files = {}

    def saver(self, model):
        return lambda path: self.files.__setitem__(str(path), [(v.path, v.numpy()) for v in model.non_trainable_variables])

    def load_model(self, path):
        return SimpleNamespace(non_trainable_variables=[SimpleNamespace(path=p, numpy=lambda a=a: a)
                                                        for p, a in self.files[str(path)]])


@pytest.mark.parametrize("kernel,moving,read,slots,match", [
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.3]), 0, 1, None),
    (([1.0, 2.0], [1.0, 2.001]), ([0.1], [0.3]), 0, 1, "differ between replicas"),  # an all-reduce skipped
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.1]), 0, 1, "moving statistics should differ"),  # statistics synchronised
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.3]), 1, 1, "replica 0's copies"),  # save wrote replica 1's copy
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.3]), 0, 0, "one momentum slot per weight"),  # SGD without momentum
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.3]), 0, [2.0], "one momentum slot per weight"),  # a slot of another shape
    (([0.5, 2.0], [0.5, 2.0]), ([0.1], [0.3]), 0, 1, "should move every weight"),  # the kernel as it started
    (([1.0, 2.0], [1.0, 2.0]), ([0.1], [0.3]), 0, [0.0, 0.0], "should move every weight")],  # a slot left zero
    ids=["as trained", "weights apart", "statistics alike", "saved from replica 1", "no momentum slots",
         "slot of another shape", "weights never moved", "slot zero"])
def test_lesson_01_gathering_cell_measures_the_copies_of_each_variable(tmp_path, kernel, moving, read, slots, match):
    """`slots`: 1 (the slot's copies are the kernel's), 0 (no slot) or the value of both its copies."""
    saved = _SavedModels()
    slot = _copies(*kernel) if isinstance(slots, int) else _copies(slots, slots)
    model = SimpleNamespace(
        trainable_variables=[_named("dense/kernel", _copies(*kernel))],
        optimizer=SimpleNamespace(momentums=[_named("sgd/dense_kernel_momentum", slot)][:1 if slots else 0]),
        non_trainable_variables=[_named("bn/moving_mean", _copies(*moving), read)])
    model.save = saved.saver(model)
    ok = OK["01_mirrored_strategy.ipynb"]
    _holds_unless(match, _gather_and_prove, "01_mirrored_strategy.ipynb", {
        "strategy": _ONE_REPLICA_EACH, "model": model, "keras": SimpleNamespace(models=saved),
        "initial_weights": [np.asarray([0.5, 2.0], dtype="float32")],
        "environment": SimpleNamespace(output_dir=lambda: tmp_path),
        "partial_splits": ok["partial_splits"], "expected_splits": ok["expected_splits"]})
    assert list(saved.files) == [str(tmp_path / "01_small_cnn.keras")]


def _lesson_01_solution(number: int, change) -> None:
    """Lesson 01's solution `number` on a real MirroredStrategy of this process (one replica: a mirrored
    variable is one even then), with `change` (old, new) made to its source first."""
    import keras
    import tensorflow as tf

    nb = nbformat.read(NOTEBOOKS / "01_mirrored_strategy.ipynb", as_version=4)
    namespace = {"tf": tf, "keras": keras, "strategy": tf.distribute.MirroredStrategy(devices=["/cpu:0"]),
                 "print": lambda *a, **k: None}
    exec(next(c.source for c in nb.cells if c.source.startswith("from keras import layers")), namespace)  # small_cnn
    source = _solution("01_mirrored_strategy.ipynb", number)
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    exec(compile(source, f"01 solution {number}", "exec"), namespace)


@pytest.mark.parametrize("number,change,match", [
    (1, None, None),
    (1, ("    inside = tf.Variable(1.0)\noutside", "    inside = tf.Variable(1.0)\n    outside"), "outside the scope"),
    (1, ("with strategy.scope():\n    inside", "if True:\n    inside"), "inside the scope"),
    (2, None, None),
    (2, ("buggy = small_cnn()\nwith strategy.scope():  # the fix\n",
         "with strategy.scope():  # the fix\n    buggy = small_cnn()\n"), "the buggy model is mirrored"),
    (2, ("with strategy.scope():  # the fix", "if True:  # the fix"), "the fixed model is not mirrored"),
    # the buggy model compiled and fitted outside the scope: fit trains it (on one device), the claim's error is not shown
    (2, ("with strategy.scope():  # the buggy model compiled", "if True:  # the buggy model compiled"), "fit ran")],
    ids=["1 as written", "1 outside made inside", "1 inside made outside", "2 as written", "2 buggy built in the scope",
         "2 fix built outside", "2 buggy fitted outside"])
def test_lesson_01_solutions_fail_when_the_variables_are_not_where_they_claim(number, change, match):
    """Item E/F of the review: each solution's check fails when the variable or model it calls plain
    (or mirrored) is created on the other side of `strategy.scope()`."""
    _holds_unless(match, _lesson_01_solution, number, change)


_SPLIT_RUN = """
import json, sys
import tensorflow as tf
replicas = int(sys.argv[1])
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
measured = {}
for label, source in json.load(sys.stdin).items():
    namespace = {"tf": tf, "strategy": strategy, "global_batch": 32 * replicas, "print": lambda *a, **k: None}
    exec(compile(source, "01 cell", "exec"), namespace)
    measured[label] = {k: namespace[k] for k in ("partial_splits", "expected_splits", "told_apart")}
print("MEASURED " + json.dumps(measured))
"""
_EVEN_RULE = ("    share = math.ceil(partial / replicas)\n    return [min(share, max(0, partial - share * r)) for r in range(replicas)]",
              "    return [partial // replicas + (r < partial % replicas) for r in range(replicas)]")


@pytest.mark.parametrize("replicas", [3, 4])
def test_lesson_01_partial_batch_split_on_3_and_4_replicas(replicas):
    """Issue 54: on 2 replicas (the nbval pass) ceil(p / N) in turn and an even split agree for every p, so the
    lesson's split cell cannot tell them apart there. Here it runs on 3 and 4 logical CPUs in a fresh process:
    TensorFlow's splits must match the lesson's rule, the rule must differ from an even split for some p, and the
    cell with an even split for its rule (the claim false) must fail the proof."""
    import json
    import subprocess
    import sys

    cell = next(c for c in _code_cells("01_mirrored_strategy.ipynb") if "def last_split(" in c)
    assert _EVEN_RULE[0] in cell
    cells = {"as written": cell, "an even split claimed": cell.replace(*_EVEN_RULE)}
    done = subprocess.run([sys.executable, "-c", _SPLIT_RUN, str(replicas)], input=json.dumps(cells), capture_output=True,
                          text=True, timeout=300, cwd=NOTEBOOKS.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(next(l[9:] for l in done.stdout.splitlines() if l.startswith("MEASURED ")))
    name, ok = "01_mirrored_strategy.ipynb", OK["01_mirrored_strategy.ipynb"]
    for label, found in measured.items():
        splits = {key: {int(p): split for p, split in found[key].items()} for key in ("partial_splits", "expected_splits")}
        case = {**ok, "strategy": _strategy(replicas), "copies": {replicas}, **splits}
        _holds_unless(None if label == "as written" else "partial batch should go out", _run, name, case)
    assert measured["as written"]["told_apart"], f"on {replicas} replicas the rule should differ from an even split"


@pytest.mark.parametrize("seen,tested,match", [
    ([[0, 2, 4], [1, 3, 5]], [511, 511], None),
    ([[0, 2, 4], [4, 5, 6]], [511, 511], "shared examples"),  # example 4 on both workers
    ([[0, 2, 4], [1, 3, 5]], [511, 448], "evaluation counted")],  # a worker dropped its remainder
    ids=["disjoint", "one example shared", "remainder dropped"])
def test_lesson_04_gathering_cell_finds_shared_examples_in_what_the_engines_return(seen, tested, match):
    ok = OK["04_custom_training_loop.ipynb"]
    pulled = {"digest": ["d", "d"], "initial": ["i", "i"], "strategy.num_replicas_in_sync": [2, 2],
              "examples_seen": seen, "test_counted": tested}
    raw = {k: v for k, v in ok.items() if k not in ("digests", "initial", "in_sync", "seen", "overlap", "worker_test_counts")}
    _holds_unless(match, _gather_and_prove, "04_custom_training_loop.ipynb", {**raw, "engines": _PlantedEngines(pulled)})


@pytest.mark.parametrize("dropping,match", [(False, None), (True, "evaluation counted")],
                         ids=["padded", "remainder dropped"])
def test_lesson_04_evaluation_count_fails_when_the_remainder_is_dropped(dropping, match):
    """Lesson 04's data cell (its odd test split: 511 quick images) and evaluation loop, run in this
    process on one replica (global batch 32); an evaluation dataset that drops its last partial batch
    instead of padding it counts 480 images, and the proof must fail (review item 24: with 512 test
    images, whole batches, it passed all the same)."""
    import keras
    import tensorflow as tf

    from helpers import lesson
    from helpers.data import ensure_data, load_split
    from helpers.mode import mode_sizes

    def dropped(examples, global_batch, input_context=None):  # no padding: the remainder is dropped
        batch = input_context.get_per_replica_batch_size(global_batch) if input_context else global_batch
        return examples.map(lambda i, l: (*lesson.normalize(i, l), 1.0)).batch(batch, drop_remainder=True)

    strategy = tf.distribute.MirroredStrategy(devices=["/cpu:0"])
    ns = {"tf": tf, "keras": keras, "strategy": strategy, "sizes": mode_sizes("quick"), "ensure_data": ensure_data,
          "load_split": load_split, "training_dataset": lesson.training_dataset, "print": lambda *a, **k: None,
          "evaluation_dataset": dropped if dropping else lesson.evaluation_dataset}
    code = _code_cells("04_custom_training_loop.ipynb")
    for start in ("def correct_predictions", "def make_eval_step", "def train_epoch", "dataset = ensure_data"):
        exec(compile(next(c for c in code if c.startswith(start)), "04 cell", "exec"), ns)
    with strategy.scope():
        model = lesson.small_cnn()
    test = ns["evaluate"](ns["make_eval_step"](strategy, model), ns["test_dist"])
    measured = {"test": test, "test_images": int(ns["test_examples"].cardinality()), "global_batch": ns["global_batch"],
                "worker_test_counts": [test["examples"]] * 2}  # the workers run this same evaluate
    assert measured["test_images"] == 511
    _holds_unless(match, _run, "04_custom_training_loop.ipynb", {**OK["04_custom_training_loop.ipynb"], **measured})


class _BN:
    def __init__(self, *means):
        self.moving_mean = _copies(*means)


class _Model:
    def __init__(self, *layers):
        self.layers = layers

    def _flatten_layers(self, include_self=True):
        return iter(self.layers)


@pytest.mark.parametrize("plain,synced,calls,match", [
    (([0.1], [0.4]), ([0.2], [0.2]), 6, None),
    (([0.1], [0.4]), ([0.2], [0.21]), 6, "identical statistics"),  # the synchronized layer kept its own
    (([0.1], [0.1]), ([0.2], [0.2]), 6, "different statistics"),
    (([0.1], [0.4]), ([0.2], [0.2]), 2, "3 all-reduces"),  # one all-reduce on each replica
    (([0.1], [0.4]), ([0.2], [0.2]), 7, "3 all-reduces"),  # review P1: one extra call, 7 // 2 == 3
    (([0.1], [0.4]), ([0.0], [0.0]), 6, "never moved")],  # review P2: BN layers frozen (trainable=False)
    ids=["as trained", "sync spread", "plain alike", "one all-reduce", "seven calls", "sync frozen at zero"])
def test_lesson_05_gathering_cell_compares_the_moving_means_of_the_bn_layers(plain, synced, calls, match):
    ok = OK["05_sync_batch_norm.ipynb"]
    raw = {"strategy": _ONE_REPLICA_EACH, "gaps": ok["gaps"], "all_reduce_calls": list(range(calls)),
           "keras": SimpleNamespace(layers=SimpleNamespace(BatchNormalization=_BN)),
           "runs": {"ordinary BN": {"model": _Model(object(), _BN(*plain)), "start": "s"},
                    "synchronized BN": {"model": _Model(_BN(*synced), object()), "start": "s"}}}
    raw["np"] = np  # the gathering cell's helper is the cell before it, defined on the same planted names
    exec(next(c for c in _code_cells("05_sync_batch_norm.ipynb") if c.startswith("def replica_spread")), raw)
    _holds_unless(match, _gather_and_prove, "05_sync_batch_norm.ipynb", raw)


LESSON_05_SOLUTION_1 = """
import sys
import nbformat
from helpers import environment
environment.local_replicas(2)
import keras, numpy as np, tensorflow as tf

code = [c.source for c in nbformat.read("notebooks/05_sync_batch_norm.ipynb", as_version=4).cells if c.cell_type == "code"]
ns = {"keras": keras, "np": np, "tf": tf, "print": lambda *a, **k: None,
      "strategy": tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])}
for start in ("rng = np.random.default_rng", "counted = tf.distribute"):  # the slices, the counting wrapper
    exec(next(s for s in code if s.startswith(start)), ns)
solution = next(s for s in code if s.startswith("# Solution 1"))
if sys.argv[1] == "no input gradient":
    assert "            tape.watch(x)\\n" in solution
    solution = solution.replace("            tape.watch(x)\\n", "")
exec(solution, ns)
print("COUNTED", len(ns["all_reduce_calls"]), ns["strategy"].num_replicas_in_sync)
"""


@pytest.mark.parametrize("variant", ["as written", "no input gradient"])
def test_lesson_05_solution_1_counts_the_backward_all_reduces(variant):
    """Lesson 05's solution 1 on its own slices and counting wrapper, 2 replicas: 5 all-reduces per replica
    (3 forward, 2 backward). Without `tape.watch(x)` no gradient reaches the layer's input, the backward
    all-reduces are never traced, and its count (3 per replica) must fail it."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_05_SOLUTION_1, variant], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    if variant == "as written":
        assert done.returncode == 0 and "COUNTED 10 2" in done.stdout, (done.stdout, done.stderr[-2000:])
    else:
        # the solution's own assert, which prints the calls it counted: 6, the forward pass's only
        assert done.returncode != 0 and "AssertionError: ['ReduceOp.SUM'" in done.stderr, (done.stdout, done.stderr[-2000:])


@pytest.mark.multiprocess
@pytest.mark.parametrize("old,new,match", [
    ("        layer.synchronized = True\n", "        layer.synchronized = True\n        layer.trainable = False\n", "never moved"),
    ("    keras.utils.set_random_seed(7)", "    pass", "same weights")],  # review P3: no shared seed
    ids=["synced BN frozen", "no shared seed"])
def test_lesson_05_run_for_real_with_a_broken_claim_fails_the_proof(tmp_path, monkeypatch, old, new, match):
    """Lesson 05 run for real (up to its proof) with the synchronized model's BN layers frozen
    (`trainable = False`: Keras then runs them in inference mode, batch_normalization.py:363, and their
    moving means stay at their initial zeros; identical zeros used to pass "identical statistics",
    review P2), or without the shared seed (the two ResNet50s start from different weights, review P3)."""
    status, detail = _run_edited_to_its_proof("05_sync_batch_norm.ipynb", old, new, "never moved", tmp_path,
                                              monkeypatch, timeout=900)
    assert status == "FAILED" and match in detail, (status, detail)


def _run_edited_to_its_proof(notebook: str, old: str, new: str, proof_mark: str, tmp_path, monkeypatch,
                             timeout: float, where: str = "") -> tuple[str, str]:
    """(status, detail) of `notebook` run for real up to its proof cell (the last code cell holding
    `proof_mark`), with `old` replaced by `new` in the code cell holding both `old` and `where`."""
    from helpers.tools.course_run import run_notebook

    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and old in c.source and where in c.source)
    cell.source = cell.source.replace(old, new, 1)
    proof = max(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and proof_mark in c.source)
    nb.cells = nb.cells[:proof + 1]  # nothing after the proof
    for name in ("COURSE_OUTPUT_DIR", "COURSE_FIGURES_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    variant = tmp_path / "nb" / notebook
    variant.parent.mkdir()
    nbformat.write(nb, variant)
    (tmp_path / "out").mkdir()
    status, _, detail = run_notebook(variant, tmp_path / "out", timeout=timeout)
    return status, detail


def _job_08(tmp_path, *, hosts=("node1", "node2"), kept_by_1="node-local", weights=("w", "w"),
            script="import json\nimport keras\nimport tensorflow as tf\n", markers_seen=(), course_1=(),
            module=None) -> dict:
    """Lesson 08's raw results for a job of 2 tasks on `hosts`: the take-home script and the module beside it
    (mwms_slurm.py, or `module`'s text), the plans, each
    rank's report (rank 1's model kept on its own node's disk, outside the run's shared directory),
    the files the chief wrote, what the job saw of Slurm and of the kernel's markers."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (tmp_path / "script.py").write_text(script)
    module_file = copy_beside(tmp_path)
    if module is not None:
        module_file.write_text(module)
    (tmp_path / "job.sbatch").write_text("#!/bin/bash\n#SBATCH --exclusive=user\nsrun python script.py\n")
    kept = {"node-local": "/tmp/node2-scratch/model.keras", "run dir": str(run_dir / "worker-1" / "model.keras"), "none": None}
    reports = [{"rank": 0, "weights": weights[0], "kept": str(run_dir / "model.keras"), "course_modules": []},
               {"rank": 1, "weights": weights[1], "kept": kept[kept_by_1], "course_modules": list(course_1)}]
    markers = {"SLURM_COURSE_PARENT_MARKER": "1", "ROCR_VISIBLE_DEVICES": "course-parent-marker",
               "CUDA_VISIBLE_DEVICES": "course-parent-marker"}
    return {"script": tmp_path / "script.py", "module_file": module_file, "sbatch_file": tmp_path / "job.sbatch",
            "run_dir": run_dir, "NODES": 2,
            "use_slurm": True, "job_id": "7", "log": "", "job_seen": {"sharing": "USER", "gpus": 2},
            "added": ["--exclusive=user", "--gpus-per-task=1"], "saved_digest": "w", "reports": reports,
            "plans": [{"rank": r, "host": h, "address": f"{h}:{20000 + r}", "gpus": 1} for r, h in enumerate(hosts)],
            "written": ["model.keras", "result.json", "tensorboard/train/events.out.tfevents.1.node1"],
            "result": {"workers": 2, "replicas": 2, "loss": [2.3, 1.6], "steps_per_epoch": 32}, "markers": markers,
            "task_env": set(markers_seen) | {"SLURM_JOB_ID", "PATH"}}



@pytest.mark.parametrize("steps_run,loss,said", [
    (32, [2.3106], "only a finite loss is proven"),  # COURSE_EPOCHS=1 in quick mode: one epoch, no trend
    (32, [2.3122, 2.3106], "only a finite loss that fell is proven"),  # 4 workers in quick mode
    (64, [2.3122, 1.6], None)], ids=["one epoch of 32 steps", "two epochs of 16", "64 steps: checked"])
def test_lesson_08_proof_says_when_too_few_steps_ran_to_check_learning(steps_run, loss, said, capsys):
    """Review 11 and Q1: under 50 steps the learning check is skipped, so a loss at ln 10 (a model that
    learnt nothing) passes; the proof must say so, and hold a run of 50 steps or more to it."""
    _run("08_batch_job.ipynb", {**OK["08_batch_job.ipynb"], "steps_run": steps_run,
                                "result": {"workers": 2, "replicas": 2, "loss": loss}})
    out = capsys.readouterr().out
    assert (f"learning NOT checked: {steps_run} steps" in out and said in out) if said else "NOT checked" not in out, out
    if said is None:  # the same loss at ln 10 after 64 steps fails
        with pytest.raises(AssertionError, match="learnt nothing"):
            _run("08_batch_job.ipynb", {**OK["08_batch_job.ipynb"], "steps_run": 64,
                                        "result": {"workers": 2, "replicas": 2, "loss": [2.3122, 2.3106]}})

@pytest.mark.parametrize("changes,match", [
    ({}, None),
    ({"kept_by_1": "run dir"}, "only the chief's model"),  # rank 1 on node2 saved into the shared run directory
    ({"hosts": ("node1", "node1")}, "one worker on each"),  # both tasks placed on one node
    ({"weights": ("w", "v")}, "differ"),  # node2's worker ended elsewhere
    ({"script": "import helpers.lesson\nimport keras\n"}, "imports the course"),
    ({"module": "import os\n\n\ndef make_strategy():\n    from helpers.strategy import make_strategy\n"}, "imports the course"),
    ({"markers_seen": ("SLURM_COURSE_PARENT_MARKER",)}, "own Slurm settings"),
    ({"markers_seen": ("CUDA_VISIBLE_DEVICES=course-parent-marker",)}, "own Slurm settings"),  # the kernel's GPUs passed on
    ({"course_1": ("helpers", "helpers.keras_fix")}, "workers held")],  # rank 1 loaded the course by importlib
    ids=["two nodes", "rank 1 kept in the run dir", "one node", "weights apart", "imports helpers",
         "its module imports helpers", "kernel's Slurm env",
         "kernel's GPUs", "course loaded by importlib"])
def test_lesson_08_gathering_cell_on_a_job_across_two_nodes(tmp_path, monkeypatch, changes, match):
    """Rank 1 runs on node2 and keeps its model on node2's own disk: it counts as not kept in the run's
    directory; saved into the shared run directory instead, it must fail the proof."""
    monkeypatch.setenv("COURSE_JOB_GPUS_PER_TASK", "1")
    _holds_unless(match, _gather_and_prove, "08_batch_job.ipynb", _job_08(tmp_path, **changes))


def test_lesson_08_gathering_cell_refuses_a_job_never_seen_running(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_JOB_GPUS_PER_TASK", "1")
    with pytest.raises(RuntimeError, match="never seen RUNNING"):
        _gather_and_prove("08_batch_job.ipynb", {**_job_08(tmp_path), "job_seen": {}})


@pytest.mark.parametrize("healthy,match", [
    ({}, None),
    ({"step_s": 0.8}, "train faster"),  # 8 profiled steps in 0.8 s: 100 ms a step, slower than the starved 94
    ({"logged": [1.4, 0.7]}, "event files' epoch_loss differs"),  # the event file's last epoch_loss is not fit's
    ({"logged": [1.5, 0.5]}, "event files' epoch_loss differs"),  # the starved run's file read back for the healthy run
    ({"served": [1.5, 0.5]}, "serves an epoch_loss that differs"),  # TensorBoard serves the starved run's curve
    ({"reads": 5}, "healthy pipeline read from disk"),  # 5 PyFunc events in the healthy trace
    ({"window": (100.5, 101.5)}, "second epoch"),  # traced across the end of the first epoch (101.0)
    ({"window": (103.5, 104.5)}, "second epoch"),  # traced after the second epoch ended (103.0)
    ({"window": None}, "second epoch")],  # a trace without its Task Environment plane
    ids=["as profiled", "healthy slower", "logged loss off", "other run's file", "other run served", "reads traced",
         "across the first epoch's end", "after the second epoch", "no window"])
def test_lesson_09_gathering_cell_derives_step_times_gaps_and_reads_from_the_traces(healthy, match):
    ok = OK["09_monitoring.ipynb"]
    raw = {k: v for k, v in ok.items()
           if k not in ("loss_gap", "served_gap", "traced_reads", "in_second_epoch", "shares", "per_step_ms", "traces",
                        "logged", "served_loss")}
    raw.update(logged={"starved": {"epoch_loss": [1.5, 0.5]}, "healthy": {"epoch_loss": healthy.get("logged", [1.4, 0.6])}},
               served_loss={"starved": [1.5, 0.5], "healthy": healthy.get("served", [1.4, 0.6])},
               ended={"starved": [101.0, 103.0], "healthy": [101.0, 103.0]},  # seconds: the epochs' ends
               traces={"starved": {"input_share": 0.6612, "step_s": 0.752, "steps": 8, "reads": 128, "window": (101.5, 102.5)},
                       "healthy": {"input_share": 0.0204, "step_s": healthy.get("step_s", 0.192), "steps": 8,
                                   "reads": healthy.get("reads", 0), "window": healthy.get("window", (101.5, 102.5))}})
    _holds_unless(match, _gather_and_prove, "09_monitoring.ipynb", raw)


def _trace_09(logs: Path, run: str, *, step_ms: float, waits_ms: list, reads: int) -> None:
    """A trace as lesson 09's profiler writes it, cut to what its reading cell counts: 8 training steps of
    `step_ms`, one every 20 ms, the input waits (start, end in ms), `reads` PyFunc events, and the Task
    Environment plane (traced from 101.5 s to 102.5 s: inside the second epoch of the ends planted below)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    ms = 10**9  # picoseconds
    space = xplane_pb2.XSpace()
    host = space.planes.add(id=1, name="/host:CPU")
    for i, name in enumerate(["multi_step_on_iterator", "IteratorGetNextOp::DoCompute", "PyFunc:PyFunc"], 1):
        host.event_metadata[i].id, host.event_metadata[i].name = i, name
    python = host.lines.add(id=1, name="python3", timestamp_ns=1_000)
    for k in range(8):
        python.events.add(metadata_id=1, offset_ps=20 * k * ms, duration_ps=int(step_ms * ms))
    getting = host.lines.add(id=2, name="tf_data_iterator_get_next", timestamp_ns=1_000)
    for start, end in waits_ms:
        getting.events.add(metadata_id=2, offset_ps=int(start * ms), duration_ps=int((end - start) * ms))
    reading = host.lines.add(id=3, name="tf_data_private_threadpool", timestamp_ns=1_000)
    for k in range(reads):
        reading.events.add(metadata_id=3, offset_ps=k * ms // 100, duration_ps=ms // 100)
    environment = space.planes.add(id=2, name="Task Environment")
    for i, (stat, ns) in enumerate([("profile_start_time", 101_500_000_000), ("profile_stop_time", 102_500_000_000)], 1):
        environment.stat_metadata[i].id, environment.stat_metadata[i].name = i, stat
        environment.stats.add(metadata_id=i, uint64_value=ns)
    directory = logs / run / "train" / "plugins" / "profile" / "2026_11_29"
    directory.mkdir(parents=True)
    (directory / "node.xplane.pb").write_bytes(space.SerializeToString())


@pytest.mark.parametrize("starved_waits,match", [
    ([(20 * k, 20 * k + 9) for k in range(8)], None),  # 9 ms of each 12 ms step waiting for its batch
    # issue 54: every wait outside the traced steps (between them: batches no traced step took), the steps
    # themselves never waiting; the reading cell unioned every IteratorGetNext and gave 67 %
    ([(20 * k + 12, 20 * k + 20) for k in range(8)], "starved pipeline should spend")],
    ids=["waits inside the steps", "waits between the steps"])
def test_lesson_09_input_share_counts_the_waits_inside_the_traced_steps_only(tmp_path, starved_waits, match):
    """Lesson 09's trace-reading cell on planted traces, then its gathering cell and proof."""
    cell = next(s for s in _code_cells("09_monitoring.ipynb") if "def read_trace" in s)
    reader = {"logs": tmp_path}
    exec(compile(cell, "09 trace reader", "exec"), reader)
    _trace_09(tmp_path, "starved", step_ms=12, waits_ms=starved_waits, reads=128)
    _trace_09(tmp_path, "healthy", step_ms=3, waits_ms=[(20 * k, 20 * k + 0.1) for k in range(8)], reads=0)
    raw = {k: v for k, v in OK["09_monitoring.ipynb"].items()
           if k not in ("loss_gap", "served_gap", "traced_reads", "in_second_epoch", "shares", "per_step_ms", "traces")}
    raw.update(ended={"starved": [101.0, 103.0], "healthy": [101.0, 103.0]},
               traces={run: reader["read_trace"](run) for run in ("starved", "healthy")})
    _holds_unless(match, _gather_and_prove, "09_monitoring.ipynb", raw)


@pytest.mark.parametrize("ops,match", [
    ({"Conv2D": 0.4, "Conv2DBackpropInput": 0.3, "Conv2DBackpropFilter": 0.3, "Mul": 0.5}, None),  # Mul on top
    ({"Conv2D": 0.1, "Conv2DBackpropFilter": 0.1, "Mul": 0.5}, "convolutions should lead")],
    ids=["convolutions lead together", "Mul leads"])
def test_lesson_09_solution_1_counts_the_convolutions_together(ops, match):
    source = _solution("09_monitoring.ipynb", 1)
    namespace = {"traces": {"healthy": {"ops": collections.Counter(ops)}}, "print": lambda *a, **k: None}
    _holds_unless(match, exec, compile(source, "09 solution 1", "exec"), namespace)


@pytest.mark.parametrize("logged,match", [
    ([0.3, 0.5], None),
    ([0.3], "one value per epoch"),  # TensorBoard wrote one epoch of two: zip alone would have passed
    ([0.3, 0.6], "^$")],  # the last epoch off (its bare assert)
    ids=["as written", "an epoch missing", "a value off"])
def test_lesson_09_solution_2_compares_every_epoch(logged, match):
    source = _solution("09_monitoring.ipynb", 2)
    namespace = {"logged": {"healthy": {"epoch_accuracy": logged}}, "histories": {"healthy": {"accuracy": [0.3, 0.5]}},
                 "print": lambda *a, **k: None}
    _holds_unless(match, exec, compile(source, "09 solution 2", "exec"), namespace)


# no longer quiet: the proof counts the reads, so the variant fails whatever the load (it was timing alone,
# and the machine's load decided: make test of 2026-11-26)
@pytest.mark.multiprocess
@pytest.mark.parametrize("old,new,where", [
    (".cache().repeat().batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)",
     ".repeat().batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)", "def healthy"),
    ("first_profiled = steps_per_epoch + 2", "first_profiled = 2", "first_profiled")],
    ids=["no cache", "traced in the first epoch"])
def test_lesson_09_run_for_real_where_the_cache_did_not_serve_the_traced_steps_fails_the_proof(
        tmp_path, monkeypatch, old, new, where):
    """Lesson 09 run for real with `.cache()` taken out of the healthy pipeline (parallel reads and
    prefetch kept), or with the trace moved into the first epoch, before the cache is filled: either way
    the traced steps read their images from disk, and the proof's count of reads in the trace fails, before any
    timing is compared (with 16 reading threads, what a 16-core node gets, the timing alone passed:
    reviews of 2026-11-27). The pipeline as written runs in the lesson under nbval."""
    status, detail = _run_edited_to_its_proof("09_monitoring.ipynb", old, new, "wait far less", tmp_path, monkeypatch,
                                              timeout=600, where=where)
    # the trace in the first epoch fails first on where it lies (the profiler's own start and stop against
    # the epochs' ends, real figures), before its reads are counted
    expected = "second epoch" if where == "first_profiled" else "healthy pipeline read from disk"
    assert status == "FAILED" and expected in detail, (status, detail)


def _horovod_raw(tmp_path, *, start_off=0.0, gradient_off=0.0, checkpoint=("step-1.index",), rate=0.1,
                 reports=None) -> dict:
    """Lesson 13's raw results from 2 engines: the weights each started from, its averaged gradient
    and updated weights (a step at `rate`), next to the recipe computed by hand at the same rate, and
    each engine's checkpoint report (`reports`, else the chief's files kept and rank 1's deleted)."""
    start = [np.ones((2, 2), "float32"), np.zeros(2, "float32")]
    gradient = [np.full((2, 2), 0.5, "float32"), np.full(2, 0.25, "float32")]
    update = [w - rate * g for w, g in zip(start, gradient)]
    (tmp_path / "checkpoint").mkdir(exist_ok=True)
    for name in checkpoint:
        (tmp_path / "checkpoint" / name).write_bytes(b"")
    if reports is None:
        reports = [{"dir": str(tmp_path / "checkpoint"), "wrote": list(checkpoint), "left": True, "on_read": []},
                   {"dir": str(tmp_path / "t1"), "wrote": ["step-1.index"], "left": False, "on_read": []}]
    pulled = {"size": [2, 2], "rank": [0, 1], "initial_digest": ["i", "i"],
              "initial_weights": [start, [start[0] + start_off, start[1]]],
              "averaged": [gradient, [gradient[0], gradient[1] + gradient_off]], "updated_weights": [update, update],
              "learning_rate": [0.1, 0.1], "collective_results": [[[10.5], [10.0, 11.0], [11.0, -11.0]]] * 2,
              "checkpoint_report": reports}
    return {"engines": _PlantedEngines(pulled), "start": start, "horovod_gradient": gradient, "horovod_update": update,
            "work_dir": tmp_path, "horovod_result": None, "BASE_LR": 0.05}


@pytest.mark.parametrize("changes,match", [
    ({}, None),
    ({"start_off": 0.5}, "rank 0's weights"),  # rank 1 kept its own initial weights: no broadcast
    ({"gradient_off": 0.01}, "Horovod's average"),  # rank 1's gradient summed, not averaged, in one tensor
    ({"checkpoint": ()}, "every worker should write"),  # the chief saved nothing
    # the rate never scaled, in the engines and in the recipe by hand alike: the update gap is 0, the measured rate 0.05
    ({"rate": 0.05}, "scale with the workers")],
    ids=["as run", "no broadcast", "gradient off", "no checkpoint", "rate not scaled"])
def test_lesson_13_gathering_cell_compares_every_worker_with_the_recipe(tmp_path, monkeypatch, changes, match):
    monkeypatch.delenv("COURSE_REQUIRE_HOROVOD", raising=False)
    _holds_unless(match, _gather_and_prove, "13_from_horovod.ipynb", _horovod_raw(tmp_path, **changes))


def _lesson_13_checkpoints(tmp_path, monkeypatch, change, on_read=False) -> None:
    """Lesson 13's checkpoint cell as each of 2 engines runs it (rank 0, then rank 1; temporary
    directories under tmp_path), with `change` (old, new) made to its source, then the gathering
    cell and the proof on what the two reported and on the files left in the work directory. Each
    saves a small Keras model and its SGD optimizer; `on_read`: the model also holds a variable
    synchronised on read, as a metric's total."""
    import tempfile

    import keras
    import tensorflow as tf

    nb = nbformat.read(NOTEBOOKS / "13_from_horovod.ipynb", as_version=4)
    source = next(c.source for c in nb.cells if "# Horovod: if hvd.rank() == 0" in c.source)
    source = source.removeprefix("%%px\n")
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    reports = []
    for rank in (0, 1):
        model, optimizer = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]), keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
        if on_read:
            model.total = keras.Variable(0.0, synchronization="on_read", aggregation="sum", trainable=False, name="total")
        namespace = {"tf": tf, "WORK_DIR": str(work), "rank": rank, "model": model, "optimizer": optimizer,
                     "print": lambda *a, **k: None}
        exec(compile(source, f"13 checkpoint cell, rank {rank}", "exec"), namespace)
        reports.append(namespace["checkpoint_report"])
    _gather_and_prove("13_from_horovod.ipynb", _horovod_raw(work, checkpoint=(), reports=reports))


@pytest.mark.parametrize("change,match", [
    (None, None),
    (('Path(WORK_DIR) / "checkpoint" if chief else Path(tempfile.mkdtemp())', 'Path(WORK_DIR) / "checkpoint"'),
     "directory of its own"),  # every rank writes into the chief's directory (and rank 1 then deletes it)
    (("if not chief:\n    shutil.rmtree", "if False:\n    shutil.rmtree"), "chief alone"),  # rank 1 keeps its copy
    (("if not chief:\n    shutil.rmtree", "if True:\n    shutil.rmtree"), "chief alone"),  # the chief deletes its own
    (("tf.train.Checkpoint(", "checkpoint_dir.mkdir(exist_ok=True)\nif chief:\n    tf.train.Checkpoint("),
     "every worker should write")],  # Horovod's rank-0-only save
    ids=["as written", "one shared directory", "rank 1 keeps its copy", "the chief deletes too", "only the chief writes"])
def test_lesson_13_checkpoint_cell_keeps_the_chiefs_copy_alone(tmp_path, monkeypatch, change, match):
    """Review item Q1: the checkpoint claim is checked on what each engine reports of its own directory,
    so a cell that writes elsewhere, keeps a second copy or deletes the chief's fails the proof."""
    monkeypatch.delenv("COURSE_REQUIRE_HOROVOD", raising=False)
    _holds_unless(match, _lesson_13_checkpoints, tmp_path, monkeypatch, change)


@pytest.mark.parametrize("change,match", [
    (None, "synchronised on read"),
    (('if v.synchronization == "on_read"', 'if v.synchronization == "ON_READ"'), None)],  # never matches: lists none
    ids=["as written", "the list never matches"])
def test_lesson_13_checkpoint_cell_lists_a_variable_synchronised_on_read(tmp_path, monkeypatch, change, match):
    """Issue 54 (13 cells 34/35): the lesson says this model saves no variable through a collective, as a
    variable synchronised on read (a metric's total) would. A model holding one must fail the proof; a cell whose
    list can never name one would let it through (the second case passes: the proof then cannot see it)."""
    monkeypatch.delenv("COURSE_REQUIRE_HOROVOD", raising=False)
    _holds_unless(match, _lesson_13_checkpoints, tmp_path, monkeypatch, change, True)


class _Batches:
    """A tf.data pipeline as lesson 02's gathering cell uses it: 6 batches, take/cache/repeat, iterable."""

    def cardinality(self) -> int:
        return 6

    def take(self, n):
        return self

    def cache(self):
        return self

    def repeat(self):
        return self

    def __iter__(self):
        return iter(range(4))


def test_lesson_02_data_proof_follows_the_replicas_per_worker():
    """Two replicas per worker (a 4-GPU node): DATA deals a batch's four per-replica pieces round-robin
    (auto_shard.cc), worker 0 [0, 1], [4, 5], ...; the proof must hold there too, not only on one replica each."""
    seen = _seen({r: {"replicas in sync": 4, "DATA": [i for i in range(32) if i % 8 // 2 % 2 == r]} for r in (0, 1)})
    assert seen[0]["DATA"][:4] == [0, 1, 4, 5]
    _holds_unless(None, _run, "02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], "seen": seen})


@pytest.mark.parametrize("cached,steps_s,match", [
    ([5000.0, 4800.0, 5200.0], [2.0] + [0.025] * 9, None),
    ([200.0, 5000.0, 250.0], [2.0] + [0.025] * 9, "slower than training"),  # two of three cached passes slow
    ([5000.0, 4800.0, 5200.0], [0.2] + [0.001] * 9, "slower than training")],  # 8 images in 1 ms: 8000 images/s
    ids=["headroom", "cached passes slow", "training faster"])
def test_lesson_02_gathering_cell_takes_medians_of_the_passes_and_the_steps(monkeypatch, cached, steps_s, match):
    """The rates from raw timings: the median of 3 cached passes, the training rate from the median
    step after the first (tracing) one; the proof then compares them."""
    import sys
    from types import ModuleType

    from helpers import throughput

    fit_steps = []

    def fit(data, epochs, steps_per_epoch, callbacks, verbose):
        fit_steps.append(steps_per_epoch)
        callbacks[0].durations.extend(steps_s[:steps_per_epoch])

    timing = ModuleType("helpers.throughput")
    timing.StepTimer, timing.keras_callback = throughput.StepTimer, (lambda timer: timer)
    monkeypatch.setitem(sys.modules, "helpers.throughput", timing)
    models = ModuleType("helpers.lesson")  # the cell imports the CNN and its compile step
    models.small_cnn, models.compile_model = (lambda: "cnn"), (lambda model, lr: SimpleNamespace(fit=fit))
    monkeypatch.setitem(sys.modules, "helpers.lesson", models)
    ok = OK["02_input_pipelines.ipynb"]
    raw = {**{k: v for k, v in ok.items() if k not in ("cached_rate", "training_rate")},
           "sizes": SimpleNamespace(per_replica_batch=4, max_steps=None),
           "strategy": SimpleNamespace(num_replicas_in_sync=2, scope=__import__("contextlib").nullcontext),
           "train_examples": "examples", "training_dataset": lambda examples, batch: _Batches(),
           "pass_rates": lambda ready, passes: [900.0] if passes == 1 else list(cached)}
    _holds_unless(match, _gather_and_prove, "02_input_pipelines.ipynb", raw)
    assert fit_steps == [10], "at least 10 steps for a median, more than the 6 batches of one pass"


@pytest.mark.parametrize("change,match", [
    (None, None),
    ((".cache()\n", "\n"), "cache should serve")],  # training_dataset without its cache
    ids=["as written", "no cache"])
def test_lesson_02_cache_proof_counts_the_reads_of_the_real_pipeline(change, match):
    """Lesson 02's cells that define training_dataset and count the reads of three passes, run on
    the quick data in this process; with `.cache()` taken out of training_dataset every pass reads
    the files again, and the proof must fail (review item 18: a real broken pipeline, not a number)."""
    import keras
    import tensorflow as tf

    from helpers.data import ensure_data, load_split

    code = _code_cells("02_input_pipelines.ipynb")
    pipeline = next(c for c in code if c.startswith("def normalize("))
    if change is not None:
        assert change[0] in pipeline
        pipeline = pipeline.replace(*change)
    namespace = {"tf": tf, "keras": keras, "print": lambda *a, **k: None,
                 "train_examples": load_split("train", ensure_data(True).data_dir, limit=512)}
    for source in (pipeline, next(c for c in code if c.startswith("import time\n\ndef pass_rates")),
                   next(c for c in code if c.startswith("reads = tf.Variable"))):
        exec(compile(source, "02 cell", "exec"), namespace)
    measured = {k: namespace[k] for k in ("reads_in_3_passes", "examples_in_split")}
    _holds_unless(match, _run, "02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], **measured})


_EMPTY_BATCH_RUN = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np
namespace = {"tf": tf, "keras": keras, "np": np, "print": lambda *a, **k: None,
             "strategy": tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])}
for source in json.load(sys.stdin):
    exec(compile(source, "02 cell", "exec"), namespace)
keys = ("last_split", "empty_loss", "gamma_nan", "conv_shape", "cnn_evaluate", "cnn_fit", "cnn_gamma_nan", "cnn_control")
print("MEASURED " + json.dumps({k: namespace[k] for k in keys}, default=bool))
"""


@pytest.mark.parametrize("environ,change,match", [
    ({"TF_ENABLE_ONEDNN_OPTS": "0"}, None, None),
    ({}, ("keras.layers.BatchNormalization()", "keras.layers.BatchNormalization(synchronized=True)"),
     "gamma NaN on every replica")],
    ids=["without oneDNN", "synchronized batch norm"])
def test_lesson_02_empty_replica_batch_cells_on_two_replicas(environ, change, match):
    """Lesson 02's two empty-replica-batch cells, run for real on 2 logical CPUs in a fresh process: without
    oneDNN the convolution's shape is right, the CNN's evaluate runs and its fit goes on with NaN, and the
    proof holds there too (the nbval pass runs them with oneDNN, where both stop); with the small model's
    batch normalisation synchronized (it counts every replica's examples) gamma stays finite, and the proof
    must fail."""
    import json
    import subprocess
    import sys

    code = _code_cells("02_input_pipelines.ipynb")
    cells = [next(c for c in code if c.startswith("nine = ")), next(c for c in code if c.startswith("import re\n"))]
    if change is not None:
        assert change[0] in cells[0]
        cells[0] = cells[0].replace(*change)
    done = subprocess.run([sys.executable, "-c", _EMPTY_BATCH_RUN], input=json.dumps(cells), capture_output=True,
                          text=True, timeout=300, env={**os.environ, **environ}, cwd=NOTEBOOKS.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(next(l[9:] for l in done.stdout.splitlines() if l.startswith("MEASURED ")))
    assert measured["cnn_control"] == "ran", measured  # whole batches go through, oneDNN or not
    if environ:
        assert measured["conv_shape"] == [0, 32, 32, 32] and measured["cnn_evaluate"] == "ran", measured
        assert measured["cnn_fit"] == "ran" and measured["cnn_gamma_nan"], measured  # fit goes on, with NaN
    _holds_unless(match, _run, "02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], **measured})


@pytest.mark.multiprocess
def test_lesson_02_worker_program_without_cache_and_with_a_file_per_worker_fails_the_proof(tmp_path):
    """Lesson 02's worker program, run as 2 real workers with its `.cache()` taken out (the second
    pass maps every example again) and its one file listed twice (FILE sharding, and AUTO, then have
    a file per worker, so no worker raises): each of these measured reports must fail its line of the proof
    (review items 20 and 21; the program as written runs in the lesson itself, under nbval)."""
    import json

    from helpers.local_workers import run_local_workers

    program = next(c for c in _code_cells("02_input_pipelines.ipynb") if c.startswith("%%writefile")).split("\n", 1)[1]
    for old, new in ((".map(scale).cache()", ".map(scale)"), ("TFRecordDataset([one_file])", "TFRecordDataset([one_file] * 2)")):
        assert old in program
        program = program.replace(old, new)
    (tmp_path / "worker.py").write_text(program)
    outcomes = run_local_workers([str(tmp_path / "worker.py")], n=2, deadline_s=240)
    assert all(o.returncode == 0 for o in outcomes), [o.output[-2000:] for o in outcomes]
    seen = {o.rank: next(json.loads(l[7:]) for l in o.output.splitlines() if l.startswith("REPORT ")) for o in outcomes}
    assert all(seen[r][f"{policy}, 1 file"] == "no error" for r in seen for policy in ("FILE", "AUTO")), seen
    for key, match in (("mapped in 2 passes, DATA", "every example on every worker"),
                       ("mapped in 2 passes, dataset_fn", "only its half"), ("FILE, 1 file", "on worker 0 only"),
                       ("AUTO, 1 file", "AUTO with 1 file should raise")):
        broken = _seen({r: {key: seen[r][key]} for r in seen})
        with pytest.raises(AssertionError, match=match):
            _run("02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], "seen": broken})


@pytest.mark.parametrize("change,match", [
    (None, None),
    (("examples = examples.take(count - count % global_batch)", "pass"), "training: each of"),  # no cut
    (("take(-count % global_batch)", "take(-count % (global_batch // 2))"), "evaluation: each of 1 worker")],
    ids=["as written", "training without its cut", "evaluation padded to per-replica batches"])
def test_lesson_02_pipelines_give_every_worker_the_same_whole_steps(change, match):
    """Issue 54: lesson 02's two pipelines and its check cell, run in this process: as written every worker gets
    the same number of per-replica batches, two per step; training_dataset without its cut to whole global
    batches (95 examples: 6 and 5 batches on 2 workers), or the evaluation padded to whole per-replica batches
    only (13 on one worker of two replicas, the last step leaving one replica empty), must fail the proof."""
    import tensorflow as tf

    code = _code_cells("02_input_pipelines.ipynb")
    cells = [next(c for c in code if c.startswith(s)) for s in ("def normalize(", "def evaluation_dataset(", "numbered = ")]
    if change is not None:
        k = next(i for i, c in enumerate(cells) if change[0] in c)
        cells[k] = cells[k].replace(*change)
    namespace = {"tf": tf, "print": lambda *a, **k: None}
    for source in cells:
        exec(compile(source, "02 cell", "exec"), namespace)
    measured = {k: namespace[k] for k in ("counted_once", "batches_per_worker")}
    _holds_unless(match, _run, "02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], **measured})


def test_lesson_02_proof_on_one_replica_says_nothing_of_replicas(capsys):
    """Issue 54: with one replica the replicas' shares are the whole batch by construction: the proof must not
    say replicas get disjoint examples there (it did), only NOT CHECKED."""
    one = {"per_replica": [list(range(8))], "from_fn_per_replica": [list(range(8))], "last_split": [1]}
    _run("02_input_pipelines.ipynb", {**OK["02_input_pipelines.ipynb"], **one})
    out = capsys.readouterr().out
    assert "NOT CHECKED (one replica)" in out and "replicas and workers" not in out, out


@pytest.mark.parametrize("number,change,match", [
    (1, None, None), (2, None, None), (3, None, None),
    (1, (".shard(2, 0).batch(4).as_numpy_iterator()", ".batch(4).shard(2, 0).as_numpy_iterator()"), "^$"),
    (2, (".batch(8).shuffle(8, seed=1)", ".batch(8)"), "^$"),  # the buggy pipeline not shuffling at all
    (2, (".shuffle(64, seed=1).batch(8)", ".shuffle(8, seed=1).batch(8)"), "^$"),  # a fix with too small a buffer
    (3, ("seed=seeds[rank]", "seed=42"), "^$")],  # every worker the same seed: nothing seen twice to show
    ids=["1", "2", "3", "1 shard after batch", "2 buggy not shuffled", "2 small buffer", "3 one seed"])
def test_lesson_02_solutions_fail_when_their_answer_is_wrong(number, change, match):
    """Issue 54: each of lesson 02's solutions, as written and with its answer made wrong."""
    import tensorflow as tf

    source = _solution("02_input_pipelines.ipynb", number)
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    _holds_unless(match, exec, compile(source, f"02 solution {number}", "exec"), {"tf": tf, "print": lambda *a, **k: None})


# The gathering cells of lessons 15, 16 and 17 on planted raw data: what the engines, the workers'
# reports and the jobs return, so that a broken raw figure must fail the proof through the
# gathering cells' own arithmetic. Lesson 15 from the engines' answers on: a copy left on another
# node's disk is one this kernel cannot see, so only the worker's own answer can show it.

def _code_cells(name: str) -> list[str]:
    return [c.source for c in nbformat.read(NOTEBOOKS / name, as_version=4).cells if c.cell_type == "code"]


def _engines_15(tmp_path: Path, out: Path, *, worker_1_keeps: bool, worker_1_dir: Path, extra_model: str = "") -> dict:
    """Lesson 15's %%px cell that asks each worker what is left, run for the chief (its file in the
    shared models/) and for worker 1 (its copy in `worker_1_dir`, standing for its own node's disk)."""
    from helpers.environment import output_dir

    source = next(s for s in _code_cells("15_models_you_keep.ipynb") if s.startswith("%%px") and "left = " in s)
    (out / "models").mkdir(parents=True)
    (out / "models" / "15_best.keras").write_bytes(b"chief")
    if extra_model:
        (out / "models" / extra_model).write_bytes(b"another writer")
    worker_1_dir.mkdir(parents=True)
    paths = [out / "models" / "15_best.keras", worker_1_dir / "15_best.keras"]
    if worker_1_keeps:
        paths[1].write_bytes(b"worker 1")
    answers = {}
    for rank, best_path in enumerate(paths):
        engine = {"best_path": best_path, "chief": rank == 0, "output_dir": output_dir, "print": lambda *a, **k: None}
        exec(compile(source.split("\n", 1)[1], "15 engine", "exec"), engine)
        for name in ("left", "under_output", "models_listed"):
            answers.setdefault(name, []).append(engine[name])
    answers["str(best_path)"] = [str(p) for p in paths]
    return answers


class _Tensor:
    def __init__(self, value):
        self.value = np.asarray(value, dtype="float32")

    def numpy(self):
        return self.value


def _raw_15(answers: dict, *, file_weights=(1.0, 2.0), copy_gap=0.0, loss_gap=1e-7) -> dict:
    """What lesson 15's kernel holds before its gathering cell: the engines (planted answers), the
    copies reloaded here (a model with weights, predictions, losses), the serving program's answer."""
    import hashlib

    val_loss = [2.0, 1.8, 1.7, 3.5]
    best = [1.0, 2.0]
    digest = hashlib.sha256(np.asarray(best, "float32").tobytes()).hexdigest()[:16]  # helpers.lesson.weights_digest
    trained = np.array([[2.0, -1.0, 0.5]], "float32")
    pulled = {"history.history": [{"val_loss": val_loss}] * 2, "record.saved": [_SAVED] * 2,
              "record.digests": [["a", "b", digest, "d"]] * 2, "record.probe_logits": [[trained * 0, trained * 0, trained, -trained]] * 2,
              "validation_size": [384, 384], "train_size": [2048, 2048], "per_replica": [32, 32], "tf32": [False, False],
              "on_read": [{"in the file": [], "metrics": ["loss/total"]}] * 2, "keep_best.best": [1.7, 1.7],
              "strategy.num_replicas_in_sync": [2, 2], **answers}
    model = SimpleNamespace(weights=[_Tensor(file_weights)])
    reloaded = {name: {"val_loss": 1.7 + loss_gap * k, "probe": trained + copy_gap * k, "model": model, "jit_compile": False}
                for k, name in enumerate(("no strategy", "OneDeviceStrategy", "MirroredStrategy, 3 replicas"))}
    fake_tf = SimpleNamespace(config=SimpleNamespace(experimental=SimpleNamespace(tensor_float_32_execution_enabled=lambda: False),
                                                     list_logical_devices=lambda kind: []))
    return {"engines": _PlantedEngines(pulled), "reloaded": reloaded, "served": trained.copy(), "served_tf32": False,
            "served_status": 0, "served_loaded": [], "stored_jit": False, "mirrored_replicas": 3, "tf": fake_tf}


def _gather_15(namespace: dict) -> None:
    """Lesson 15 from the engines' answers: the cell that pulls them, then the gathering cell and the proof."""
    pull = next(s for s in _code_cells("15_models_you_keep.ipynb") if s.startswith("names = ("))
    namespace = {"np": np, "print": lambda *a, **k: None, **namespace}
    exec(compile(pull, "15 pull", "exec"), namespace)
    _gather_and_prove("15_models_you_keep.ipynb", namespace)


@pytest.mark.parametrize("case,match", [
    ("removed on its node", None),
    ("kept on its node only", "only the chief's file"),  # the old kernel-side exists() saw nothing there
    ("removed, the kernel's disk has that path", None),  # this kernel's disk is not worker 1's
    ("written under the output directory", "only the chief's file"),
    ("a second file in models/", "only the chief's file")])
def test_lesson_15_gathering_cell_asks_each_worker_what_its_own_node_holds(tmp_path, monkeypatch, case, match):
    """Worker 1 runs on node2, its copy in node2's own temporary directory. A copy it left there must
    fail the proof even though this kernel's disk has no such path (node2's directory is gone from
    here before the kernel gathers); a file at that path on this kernel's disk must not count."""
    out = tmp_path / "shared-output"
    monkeypatch.setenv("COURSE_OUTPUT_DIR", str(out))
    node2 = out / "models" / "worker-1" if case == "written under the output directory" else tmp_path / "node2-tmp" / "tmpq1"
    answers = _engines_15(tmp_path, out, worker_1_keeps=case == "kept on its node only", worker_1_dir=node2,
                          extra_model="15_best_1.keras" if case == "a second file in models/" else "")
    if case != "written under the output directory":
        import shutil

        shutil.rmtree(tmp_path / "node2-tmp")  # node2's disk: not this kernel's
    if case == "removed, the kernel's disk has that path":
        node2.mkdir(parents=True)
        (node2 / "15_best.keras").write_bytes(b"this kernel's own file, not worker 1's")
    _holds_unless(match, _gather_15, _raw_15(answers))


@pytest.mark.parametrize("changes,match", [
    ({}, None),
    ({"file_weights": (1.0, 2.5)}, "weights of the best epoch"),  # the file holds another epoch's weights
    ({"copy_gap": 1e-5}, "predicts differently"),  # a copy's logits 1e-5 off
    ({"copy_gap": 1e-7}, "predicts differently"),  # 1e-7 off: on CPUs the copies must predict bit for bit
    ({"loss_gap": 1e-4}, "best epoch's val_loss")])  # a copy scores 1.7001
def test_lesson_15_gathering_cell_digests_and_compares_the_copies(tmp_path, monkeypatch, changes, match):
    """The copies' figures from their raw predictions, losses and weights: the gathering cell's
    digest, differences and tolerances must turn each broken one into a failed proof."""
    out = tmp_path / "shared-output"
    monkeypatch.setenv("COURSE_OUTPUT_DIR", str(out))
    answers = _engines_15(tmp_path, out, worker_1_keeps=False, worker_1_dir=tmp_path / "node2-tmp")
    _holds_unless(match, _gather_15, _raw_15(answers, **changes))


def test_lesson_15_epoch_record_tells_a_rewritten_file_by_its_bytes_not_its_timestamp(tmp_path):
    """Lesson 15's EpochRecord notes whether ModelCheckpoint wrote the file this epoch. A file
    rewritten within one tick of a coarse clock (1 s on some NFS or Lustre mounts) keeps its
    mtime: the record must still see the write (a digest of the bytes), and see none when the
    file was left alone."""
    import hashlib
    import re

    cell = next(s for s in _code_cells("15_models_you_keep.ipynb") if "class EpochRecord" in s)
    source = re.search(r"^class EpochRecord.*?(?=^record = )", cell, re.S | re.M).group(0)
    best_path = tmp_path / "15_best.keras"
    namespace = {"keras": SimpleNamespace(callbacks=SimpleNamespace(Callback=object)), "hashlib": hashlib,
                 "best_path": best_path, "weights_digest": lambda model, trainable_only: "w", "probe": None}
    exec(compile(source, "15 EpochRecord", "exec"), namespace)
    record = namespace["EpochRecord"]()
    record.model = lambda images, training: _Tensor([0.0])
    record.on_epoch_end(0)  # no file yet (no epoch improved)
    best_path.write_bytes(b"epoch 1's weights")
    os.utime(best_path, ns=(10**18, 10**18))
    record.on_epoch_end(1)
    best_path.write_bytes(b"epoch 2's weights")
    os.utime(best_path, ns=(10**18, 10**18))  # the same timestamp: a coarse clock
    record.on_epoch_end(2)
    record.on_epoch_end(3)  # not written
    assert record.saved == [False, True, True, False], record.saved


def _reports_16(tmp_path: Path, workers: int, train_size: int, *, shards_of=None, repeat_first=False,
                same_order=False, bind_mounted=False, files_there=8) -> list[dict]:
    """Each worker's report as lesson 16's read_shards.py writes it, worker r of W on its own node:
    the files r, r + W, ... (FILE sharding of 8 files), their examples (i in file i % 8), the order
    of its files on two passes, the node-local copy it read (its path, device and inode)."""
    reports = []
    for rank in range(workers):
        mine = shards_of(rank) if shards_of else [k for k in range(8) if k % workers == rank]
        copy = tmp_path / f"node{rank + 1}-local" / f"shards-7.{workers}"
        copy.mkdir(parents=True)
        where = os.stat(tmp_path / "shared" if bind_mounted and rank == 0 else copy)  # a bind mount: the shared inode
        indices = [i for i in range(train_size) if i % 8 in mine]
        reports.append({"rank": rank, "host": f"node{rank + 1}", "shards": mine, "read_from": str(copy.resolve()),
                        "read_from_id": [where.st_dev, where.st_ino], "files_there": [f"f{k}" for k in range(files_there)],
                        "indices": indices + indices[:1] * (repeat_first and rank == 0),
                        "orders": [mine, mine if same_order else mine[::-1]]})
    return reports


@pytest.mark.parametrize("changes,match", [
    ({}, None),
    ({"workers_3": 2}, "not every worker reported"),  # a worker of the second run wrote no report
    # shuffled lists sharded by hand with two seeds: file 4 to both workers, file 1 to none
    ({"shards_of": lambda r: [[0, 2, 4, 6], [3, 4, 5, 7], [1]][r]}, "FILE sharding should give"),
    ({"repeat_first": True}, "disjoint and cover"),  # one example read twice, from the right files
    ({"same_order": True}, "should be shuffled"),  # every worker's files in one order on both passes
    ({"bind_mounted": True}, "complete node-local copy"),  # another path, the shared directory's inode
    ({"files_there": 7}, "complete node-local copy"),  # a copy that misses a file
    # the second staged epoch read half its batches from the shared files (counted per pass)
    ({"staged_reads": [(128, 0), (0, 64), (32, 32), (0, 64)]}, "staging should read the shared file system once"),
    # this kernel's staged copy: half the files copied, or a file whose bytes differ from the shared one's
    ({"copied": 4}, "byte for byte"), ({"altered": True}, "byte for byte")],
    ids=["as run", "a worker missing", "manual shard", "an example twice", "no reshuffle", "bind mount", "copy short",
         "staged epoch reads shared", "half copied", "copy altered"])
def test_lesson_16_gathering_cell_counts_files_and_examples_from_the_workers_reports(tmp_path, changes, match):
    """From the workers' raw reports (two runs, 2 and 3 workers, each worker on its own node) and
    the simulated reads' counts per pass: the files, the examples, the orders and the copies each
    worker read, and where each pass's batches came from, must fail the proof through the cells'
    own counting when one of them is broken."""
    (tmp_path / "shared").mkdir()
    changes = dict(changes)
    workers_3 = changes.pop("workers_3", 3)
    copied, altered = changes.pop("copied", 8), changes.pop("altered", False)
    staged = tmp_path / "node-local" / "staged"
    staged.mkdir(parents=True)
    for k in range(8):
        name = f"cifar10-train-{k:05d}-of-00008.tfrecord"
        (tmp_path / "shared" / name).write_bytes(bytes([k]) * 100)
        if k < copied:
            (staged / name).write_bytes(bytes([k]) * (99 if altered and k == 3 else 100))
    staged_reads = changes.pop("staged_reads", [(128, 0), (0, 64), (0, 64), (0, 64)])
    reports = {2: _reports_16(tmp_path, 2, 64, **changes), 3: _reports_16(tmp_path, 3, 64, **changes)[:workers_3]}
    ok = OK["16_input_at_scale.ipynb"]
    raw = {**{k: v for k, v in ok.items() if k not in ("files_of", "expected", "counts", "covered", "staged_everywhere",
                                                        "reshuffled", "read_from", "copy_complete", "staged_files",
                                                        "shared_files")},
           "reports": reports, "SHARDS": 8, "train_size": 64, "shared": tmp_path / "shared", "staged": staged, "os": os,
           "staging_s": 0.03, "print": lambda *a, **k: None,
           "reads": {name: [{"shared": shared, "node-local": local} for shared, local in passes] for name, passes in
                     {"shared every epoch": [(64, 0)] * 3, "cache(filename=...)": [(64, 0), (0, 0), (0, 0)],
                      "staged": staged_reads}.items()}}  # fs.timed_pass's counts, pass by pass
    exec(compile(_cell_defining("16_input_at_scale.ipynb", "read_from = {name:"), "16 read_from", "exec"), raw)
    _holds_unless(match, _gather_and_prove, "16_input_at_scale.ipynb", raw)


@pytest.mark.parametrize("shards", [8, 4, 16])
def test_lesson_16_workers_make_enough_passes_that_one_order_by_chance_stays_below_one_in_a_million(shards):
    """read_shards.py's passes: for every NODES the lesson allows (SHARDS >= NODES + 1), the chance that
    every worker's shuffled file list came in one order on all its passes, on both runs, is below 1e-6
    (7 workers on 8 files: one worker has two files, 21 passes, 2**-20); two passes, the old count, are
    not enough there."""
    import re

    from tests.test_notebook_programs import written_programs

    program = written_programs("16_input_at_scale.ipynb")['"read_shards.py"}']
    lines = [line.strip() for line in program.splitlines() if re.match(r"\s+(arrangements|passes) = ", line)]
    assert len(lines) == 2, lines

    def same_every_pass(workers: int) -> tuple[float, int]:
        spec = {"math": math, "files": shards, "workers": workers}
        exec("\n".join(line.split("  #")[0] for line in lines), spec)
        return 1 / spec["arrangements"] ** (spec["passes"] - 1), spec["passes"]

    for nodes in range(1, shards):
        (first, passes), (second, _) = same_every_pass(nodes), same_every_pass(nodes + 1)
        assert first * second < 1e-6, (nodes, first, second)
        k = [len(range(w, shards, nodes)) for w in range(nodes)]
        assert first * second == pytest.approx(math.prod(1 / math.factorial(n) ** (passes - 1) for n in k) * second)
    if shards == 8:
        assert same_every_pass(7) == (2.0**-20, 21)
        assert 1 / 2 ** (2 - 1) > 1e-6  # two passes at 7 workers on 8 files: one chance in 2


def _keras_runs_17(**changes) -> dict:
    """Lesson 17's KERAS report lines, by variant: 2 workers each; `changes` maps a variant to
    per-worker changes (a list of 2 dicts), or to None for a run whose workers never reported."""
    good = {"Keras 3": {"fit": "ValueError: Attempt to convert a value (PerReplica:{...})", "module": "keras",
                        "keras": "3.15.1", "imported": "keras"},
            "Keras 3 + fix": {"fit": "ok", "weights": "a1", "module": "keras", "keras": "3.15.1", "imported": "keras"},
            "Keras 2 (tf_keras)": {"fit": "ok", "weights": "b2", "module": "tf_keras", "keras": "2.21.0",
                                   "imported": "tf_keras"}}
    out = {}
    for name, report in good.items():
        per_worker = changes.get(name, [{}, {}])
        out[name] = [] if per_worker is None else [{"rank": r, **report, **c} for r, c in enumerate(per_worker)]
    return out


def _stack_17(job_dir: Path, *, pythonpath=False, einops_from_module=False, tensorflow_from="") -> dict:
    """The STACK line of lesson 17's job: the venv on top of the module (this Python is the module's)."""
    import sys
    import sysconfig

    module_site = sysconfig.get_paths()["purelib"]
    venv_site = str(job_dir / "venv" / Path(module_site).relative_to(sys.prefix))
    sites = [module_site, venv_site] if pythonpath else [venv_site, module_site]
    return {"python": f"{job_dir}/venv/bin/python", "prefix": str(job_dir / "venv"),
            "tensorflow": "2.21.0", "tensorflow_from": tensorflow_from or f"{module_site}/tensorflow/__init__.py",
            "keras": "3.15.1", "keras_from": f"{module_site}/keras/__init__.py",
            "myextras_from": f"{venv_site}/myextras/__init__.py",
            "einops": "0.8.2" if einops_from_module else "99.0",
            "einops_from": f"{module_site if einops_from_module else venv_site}/einops/__init__.py",
            "pythonpath": module_site if pythonpath else "", "pyvenv_cfg": "home = /usr/bin\ninclude-system-site-packages = true\n",
            "sys_path": ["/usr/lib/python311.zip", *sites, "/usr/lib/python3/dist-packages"]}


@pytest.mark.parametrize("changes,match", [
    ({}, None),
    ({"stack": None}, "should load the module"),  # the job's venv never reported
    ({"module_line": "Lmod has detected the following error: unknown module tf-hpc-course/2026.11"}, "should load the module"),
    ({"tensorflow_from": "/home/learner/.local/lib/python3.11/site-packages/tensorflow/__init__.py"},
     "from the module's environment"),  # a pip --user TensorFlow in the way
    ({"einops_from_module": True}, "own einops should win"),  # the venv's own einops shadowed
    ({"other": {"tensorflow": True, "keras": True, "einops": False}}, "should not be handed"),  # PYTHONPATH leaks
    ({"pythonpath": True}, "no PYTHONPATH"),  # the module on PYTHONPATH: its packages ahead of the venv's
    ({"unloaded": {"tensorflow": True, "EBPYTHONPREFIXES": ""}}, "after module unload"),  # not through the module
    ({"runs": {"Keras 3": [{}, {"fit": "ok", "weights": "c"}]}}, "should fail without the fix"),  # one worker fitted
    ({"runs": {"Keras 3 + fix": [{}, {"weights": "a2"}]}}, "identical weights"),
    ({"runs": {"Keras 2 (tf_keras)": [{}, {"imported": "keras"}]}}, "from tensorflow.keras import"),
    ({"runs": {"Keras 2 (tf_keras)": [{}]}}, "every variant")],  # one worker's report lost
    ids=["as run", "no stack", "module unknown", "user-site tensorflow", "einops shadowed", "other python handed",
         "pythonpath", "found after unload", "keras 3 fitted on one", "fix weights apart", "from-import keras 3", "worker missing"])
def test_lesson_17_gathering_cell_reads_the_jobs_stack_and_keras_reports(tmp_path, changes, match):
    """From the job's raw log (module list, STACK and OTHER lines) and the workers' KERAS reports:
    each broken raw line must fail the proof through the gathering cell."""
    import json

    job_dir = tmp_path / "software_stack"
    stack = _stack_17(job_dir, **{k: v for k, v in changes.items() if k in ("pythonpath", "einops_from_module",
                                                                             "tensorflow_from")})
    stack = changes.get("stack", stack)
    other = changes.get("other", {"tensorflow": False, "keras": False, "einops": False})
    unloaded = changes.get("unloaded", {"tensorflow": False, "EBPYTHONPREFIXES": ""})
    stack_log = (f"Currently Loaded Modules:\n  {changes.get('module_line', '1) tf-hpc-course/2026.11')}\n\n"
                 + (f"STACK {json.dumps(stack)}\n" if stack else "") + f"OTHER {json.dumps(other)}\n"
                 + f"UNLOADED {json.dumps(unloaded)}\n")
    lines = [f"KERAS {json.dumps({**r, 'asked': '2' if 'tf_keras' in name else '3', 'fix': 'fix' in name})}"
             for name, reports in _keras_runs_17(**changes.get("runs", {})).items() for r in reports]
    keras_log = "\n".join(["I0000 00:00 some TensorFlow start-up line", *lines, ""])  # the job's log, as written
    keras_runs = {"keras_log": keras_log, "json": json}
    for name in ("variants", "runs", "by_variant"):  # the KERAS lines parsed as lesson 17 parses them
        exec(_assignment("17_software_stack.ipynb", name), keras_runs)
    namespace = {"stack": stack, "stack_log": stack_log, "job_dir": job_dir, "by_variant": keras_runs["by_variant"],
                 "module_einops": "0.8.2", "build": {"is_cuda_build": False}, "gpus_slurm_gave": 0, "gpus_tf_sees": 0,
                 "where": "Slurm job 7", "lmod_here": True, "use_slurm": True, "NODES": 2,
                 **{m: __import__(m) for m in ("json", "sys", "sysconfig")}, "Path": Path}  # the lesson's first imports
    exec(_function("17_software_stack.ipynb", "preflight_problems"), namespace)
    _holds_unless(match, _gather_and_prove, "17_software_stack.ipynb", namespace)


def _check_18(*lines: str, workers: int = 2) -> str:
    """What `check-script` prints: its header, the runs, a section of PASS / FAIL / NOT SEEN lines."""
    runs = "1 worker: 7 s on vm" + (f"; {workers} workers: 12 s on vm" if workers > 1 else "")
    section = f"{workers} workers:" if workers > 1 else "1 worker (the reference):"
    failed = any(line.startswith("FAIL") for line in lines)
    return "\n".join(["check-script train.py: global batch 12, --batch-size (global), local processes; script options: "
                      "--data data.npz --out run", "  " + runs, section, *("  " + line for line in lines),
                      f"{'FAILED' if failed else 'passed'} in 20 s (what the command cannot see: docs/check-your-script.md)"])


_PASS_18 = {"strategy.scope()": "PASS     strategy.scope(): model(s) sequential built (and compiled) in the scope",
            "batch per replica": "PASS     batch per replica: each of the 2 workers' steps held 6 examples",
            "input sharding": "PASS     input sharding: in each of 8 steps the 2 workers read, together, exactly ...",
            "same weights as one worker": "PASS     same weights as one worker: after 8 steps ... 2.3e-07 of the update",
            "identical weights on every worker": "PASS     identical weights on every worker: equal bit for bit",
            "who writes": "PASS     who writes: no file is written by two workers; the chief wrote 1 path(s) (run/ckpt), "
                          "the others only paths of their own (run/workertemp_1/ckpt)"}
_FAIL_18 = {"batch per replica": "FAIL     batch per replica: each worker's batch is the global batch 12: the global "
                                  "batch of a step is 24, 2 times one worker's",
            "input sharding": "FAIL     input sharding: the workers' shards overlap: 7 examples were read by two ...",
            "who writes": "FAIL     who writes: workers 0, 1 all write /x/run/ckpt (tf.train.Checkpoint): they overwrite ..."}
_MARKS_18 = ("1795937582.700 script starting\n1795937583.112 distribute_datasets_from_function at train.py:51\n"
             "1795937583.988 script raised AssertionError\n1795937584.010 report written\n")  # as kept, the first check
_STEPS_18 = "".join(f"1795937600.{k} step {k} of strategy.run(step) in the script: 12 examples\n" for k in range(1, 9))
_FIX_18 = "           fix: what to change"


_RAISED_18 = "tensorflow/python/distribute/mirrored_strategy.py:806, in _update: assert isinstance(var, values.DistributedVariable)"


def _as_written_18(workers: int = 1, error: str = "AssertionError", raised: str = _RAISED_18) -> str:
    return _check_18("FAIL     strategy.scope(): model 'sequential' (made at train.py:31) was built outside "
                     "strategy.scope(): its variables are not mirrored", _FIX_18,
                     f"FAIL     the run with 1 worker: worker 0 failed at train.py:53 (loss = train_step(batch)): {error} "
                     f"(raised at {raised})", workers=workers)


def _checks_18(**changes) -> dict:
    """The five checks lesson 18 runs, as the command printed them (each key of `changes` replaces one)."""
    def report(failing: dict, seen: dict) -> str:
        return _check_18(*[failing.get(n) or seen.get(n) or _PASS_18[n] for n in _PASS_18], _FIX_18)

    not_seen = {"input sharding": "NOT SEEN input sharding: not checked: see batch per replica above",
                "same weights as one worker": "NOT SEEN same weights as one worker: not compared: ..."}
    checks = {
        "as written": (1, _as_written_18()),
        # both workers wrote run/ckpt, each in a working directory of its own (no race): every check ran
        "scope fixed": (1, report({"batch per replica": _FAIL_18["batch per replica"],
                                   "who writes": _FAIL_18["who writes"]}, not_seen)),
        "checkpoint fixed": (1, report({"batch per replica": _FAIL_18["batch per replica"]}, not_seen)),
        "batch fixed": (1, report({"input sharding": _FAIL_18["input sharding"]},
                                  {"same weights as one worker": not_seen["same weights as one worker"]})),
        "seed fixed": (0, report({}, {}))}
    return {**checks, **changes}


@pytest.mark.parametrize("changes,script,match", [
    ({}, "import tensorflow as tf\nimport keras\n", None),
    # the check called the planted shuffle NOT SEEN instead of naming it
    ({"batch fixed": (1, _check_18(*[_PASS_18[n] for n in _PASS_18 if n != "input sharding"],
                                   "NOT SEEN input sharding: the workers' steps held other examples"))},
     "import tensorflow as tf\n", "name each planted mistake"),
    # the scope line of the first check said compiled, not built, outside the scope: not the planted mistake
    ({"as written": (1, _check_18("FAIL     strategy.scope(): model 'sequential' was compiled outside strategy.scope()",
                                  workers=1))}, "import tensorflow as tf\n", "name each planted mistake"),
    # the fixed script: its six checks pass, but a batch-norm layer per replica fails
    ({"seed fixed": (1, _check_18(*_PASS_18.values(), "FAIL     batch norm: layers batch_normalization "
                                        "compute their statistics over each replica's batch alone"))},
     "import tensorflow as tf\n", "should pass every check"),
    # the fixed script: who writes not seen (no file observed) is no pass
    ({"seed fixed": (0, _check_18(*[_PASS_18[n] for n in _PASS_18 if n != "who writes"],
                                        "NOT SEEN who writes: the script wrote no file the command observes"))},
     "import tensorflow as tf\n", "should pass every check"),
    # the checkpoint fix: its next check did not look at the writes (NOT SEEN) and is no PASS
    ({"checkpoint fixed": (1, _check_18(_PASS_18["strategy.scope()"], _FAIL_18["batch per replica"],
                                        "NOT SEEN input sharding: not checked", "NOT SEEN same weights as one worker: ...",
                                        _PASS_18["identical weights on every worker"],
                                        "NOT SEEN who writes: not every worker wrote its report"))},
     "import tensorflow as tf\n", "turn its FAIL line to PASS"),
    # the fixed script passed, but its 2-worker run never ran (only the reference run's lines)
    ({"seed fixed": (0, _check_18(*_PASS_18.values(), workers=1))}, "import tensorflow as tf\n",
     "run 2 workers"),
    ({}, "import tensorflow as tf\nfrom helpers.lesson import build_model\n", "import nothing from the course"),
    # only a log file was shared before the checkpoint fix: not the planted checkpoint path
    ({"scope fixed": (1, _check_18(_PASS_18["strategy.scope()"], "FAIL     who writes: workers 0, 1 all write "
                                   "/x/run/log.txt (open): they overwrite each other's files", _FIX_18))},
     "import tensorflow as tf\n", "name each planted mistake"),
    # the script as written went on to a 2-worker run, or stopped with another error
    ({"as written": (1, _as_written_18(workers=2))}, "import tensorflow as tf\n", "stopped at the one-worker run"),
    ({"as written": (1, _as_written_18(error="TypeError: unsupported operand"))}, "import tensorflow as tf\n",
     "stopped at the one-worker run"),
    # run alone, the fixed script wrote no checkpoint (its chief test False without TF_CONFIG), or failed
    ({"alone files": []}, "import tensorflow as tf\n", "run alone"),
    ({"alone code": 1}, "import tensorflow as tf\n", "run alone"),
    # issue 54: cell 19 with `chief = ... task_id == 1`: worker 1 wrote run/ckpt, the chief a temporary path; and
    # the line as it was, base names only ("(ckpt)"), which could not tell the two apart
    ({"checkpoint fixed": (1, _check_18(_PASS_18["strategy.scope()"], _FAIL_18["batch per replica"],
                                        "NOT SEEN input sharding: not checked", "NOT SEEN same weights as one worker: ...",
                                        _PASS_18["identical weights on every worker"],
                                        "PASS     who writes: no file is written by two workers; the chief wrote 1 "
                                        "path(s) (run/workertemp_0/ckpt), the others only paths of their own (run/ckpt)",
                                        _FIX_18))}, "import tensorflow as tf\n", "turn its FAIL line to PASS"),
    ({"checkpoint fixed": (1, _check_18(_PASS_18["strategy.scope()"], _FAIL_18["batch per replica"],
                                        "NOT SEEN input sharding: not checked", "NOT SEEN same weights as one worker: ...",
                                        _PASS_18["identical weights on every worker"],
                                        "PASS     who writes: no file is written by two workers; the chief wrote 1 "
                                        "path(s) (ckpt), the others only paths of their own", _FIX_18))},
     "import tensorflow as tf\n", "turn its FAIL line to PASS"),
    # the first failure named by Keras's optimizer (TensorFlow's traceback filter on), not the assert that raised
    ({"as written": (1, _as_written_18(raised="keras/src/backend/tensorflow/optimizer.py:134, in "
                                              "_distributed_tf_update_step"))}, "import tensorflow as tf\n",
     "stopped at the one-worker run"),
    # the one worker ran its 8 steps before it raised (at the checkpoint, say)
    ({"marks": _MARKS_18.replace("1795937583.988 script raised", _STEPS_18 + "1795937583.988 script raised")},
     "import tensorflow as tf\n", "before any step of strategy.run began"),
    # with only the batch and the shuffle mistakes left: a worker ended without its weights, or a run failed
    ({"batch fixed": (1, _check_18(*[_PASS_18[n] for n in _PASS_18 if n not in ("input sharding", "identical weights "
                                                                                   "on every worker")],
                                   _FAIL_18["input sharding"], "NOT SEEN identical weights on every worker: not every "
                                   "worker wrote its weights"))}, "import tensorflow as tf\n", "train to the end"),
    ({"batch fixed": (1, _check_18(*[_PASS_18[n] for n in _PASS_18 if n != "input sharding"], _FAIL_18["input sharding"],
                                   "FAIL     the run with 2 workers: worker 1 failed at train.py:58"))},
     "import tensorflow as tf\n", "train to the end"),
    # the batch line said something else than the step of 24 the lesson reads from it
    ({"checkpoint fixed": (1, _check_18(_PASS_18["strategy.scope()"], "FAIL     batch per replica: each worker's batch "
                                        "is the global batch 12: ...", _PASS_18["who writes"]))},
     "import tensorflow as tf\n", "name each planted mistake"),
    # imports the old regex did not see: a second name on one line, importlib, __import__
    ({}, "import os, helpers\n", "import nothing from the course"),
    ({}, "import importlib\nlesson = importlib.import_module('helpers.lesson')\n", "import nothing from the course"),
    ({}, "lesson = __import__('helpers')\n", "import nothing from the course"),
    # run alone, it printed a task_id of 0 (a TF_CONFIG left in its environment)
    ({"alone stdout": "worker 0, epoch 0: loss 1.3427\n"}, "import tensorflow as tf\n", "task_id should be None")],
    ids=["as printed", "shuffle not seen", "compiled, not built", "batch norm fails", "writes not seen",
         "fix not checked", "no 2-worker run", "imports helpers", "only a log shared", "first went on",
         "first another error", "alone wrote nothing", "alone failed", "worker 1 the chief", "base names only",
         "named by keras", "a step ran first", "weights not kept", "a run failed", "no step of 24", "import os, helpers",
         "importlib", "__import__", "alone had a task"])
def test_lesson_18_gathering_cell_reads_what_the_checks_printed(tmp_path, changes, script, match):
    """The gathering cell parses the command's own lines: each planted mistake named by its check's FAIL
    line with the planted cause, that check PASS at the next run (the chief's checkpoint at run/ckpt),
    every check PASS at the end; the first stop from its line and the worker's kept marks; the script's
    imports with ast; the run alone's task_id from what it printed, its checkpoint from its directory."""
    import ast
    import re

    changes = dict(changes)
    files = changes.pop("alone files", ["ckpt.data-00000-of-00001", "ckpt.index"])
    alone_code = changes.pop("alone code", 0)
    alone_stdout = changes.pop("alone stdout", "worker None, epoch 0: loss 1.3427\nworker None, epoch 1: loss 1.0213\n")
    marks = changes.pop("marks", _MARKS_18)
    (tmp_path / "alone").mkdir()
    for name in files:
        (tmp_path / "alone" / name).write_text("")
    (tmp_path / "train.py").write_text(script)
    _holds_unless(match, _gather_and_prove, "18_your_own_script.ipynb",
                  {"re": re, "ast": ast, "work_dir": tmp_path, "checks": _checks_18(**changes), "first_marks": marks,
                   "alone": SimpleNamespace(returncode=alone_code, stdout=alone_stdout)})


def _solution_18(number: int, outputs: list[tuple[int, str]], tmp_path: Path) -> None:
    """Lesson 18's solution `number` with `check` answering `outputs` in turn (what the command printed)."""
    import re

    (tmp_path / "train.py").write_text("loss = tf.nn.compute_average_loss(per_example, global_batch_size=args.batch_size)\n"
                                       '    keras.layers.Dense(32, activation="relu"),\n')
    answers = iter(outputs)
    namespace = {"re": re, "work_dir": tmp_path, "check": lambda script="train.py": next(answers),
                 "fix": lambda *a, **k: None}
    exec(compile(_solution("18_your_own_script.ipynb", number), f"18 solution {number}", "exec"), namespace)


_MEAN_18 = ("FAIL     same weights as one worker: the 2 workers moved the weights {far} times as far as one worker over "
            "the same 8 steps: the loss is averaged over each replica's batch")


@pytest.mark.parametrize("far,match", [("1.70", None), ("2.05", "times as far"), ("1.20", "times as far")],
                         ids=["as measured", "2 or more", "not about twice"])
def test_lesson_18_solution_1_holds_the_ratio_under_two(tmp_path, far, match):
    """Solution 1's comment says the 2 workers move the weights less than twice as far over 8 steps."""
    out = _check_18(_MEAN_18.format(far=far))
    _holds_unless(match, _solution_18, 1, [(1, out)], tmp_path)


_BN_18 = ("NOT SEEN same weights as one worker: not exact: batch-norm layers batch_normalization normalise each "
          "replica's examples alone; difference {drift} of the update after 8 steps (tolerance 5.7e-04)")


_MOVING_18 = ("FAIL     identical weights on every worker: worker 1's non-trainable weights (e.g. batch norm's moving "
              "statistics) differ from worker 0's by up to 2.49e-02")


@pytest.mark.parametrize("drift,identical,match", [("4.4e-01", _MOVING_18, None),
                                                   ("1.0e-03", _MOVING_18, "NOT SEEN same weights"),
                                                   ("4.4e-01", _PASS_18["identical weights on every worker"],
                                                    "PASS     identical weights")],
                         ids=["as measured", "within float32 noise", "moving means alike"])
def test_lesson_18_solution_2_holds_the_drift_far_above_the_tolerance(tmp_path, drift, identical, match):
    """Solution 2: per-replica batch norm fails its own line, the weights' drift it causes is far
    (over 100x) above the check's tolerance, not a rounding difference, and the workers' moving
    statistics differ."""
    kept = [_PASS_18[n] for n in _PASS_18 if n != "identical weights on every worker"]
    plain = _check_18(*kept, identical, _BN_18.format(drift=drift), "FAIL     batch norm: layers batch_normalization "
                      "compute their statistics over each replica's batch alone")
    synced = _check_18(*_PASS_18.values(), "PASS     batch norm: 1 BatchNormalization layer(s), synchronized")
    _holds_unless(match, _solution_18, 2, [(1, plain), (0, synced)], tmp_path)


# The gathering cells of lessons 00, 03, 06 and 10 on planted raw data: the images tfds reads, what
# engines on other nodes return, the workers' own clocks, the losses Keras logs; a broken raw figure
# must fail the proof through the gathering cell's own arithmetic.

class _Split:
    """A tfds split as lesson 00's cell uses it: `take(n)` keeps the first n (image, label) pairs."""

    def __init__(self, labels):
        self.pairs = [(np.zeros((32, 32, 3), "uint8"), label) for label in labels]

    def take(self, count):
        taken = _Split([])
        taken.pairs = self.pairs[:count]
        return taken


@pytest.mark.parametrize("labels,match", [
    ([i % 10 for i in range(500)], None),
    ([i % 9 for i in range(400)] + [9] * 100, "all ten classes"),  # class 9 only after the first 400 images
    ([i % 9 for i in range(500)], "all ten classes")],
    ids=["ten classes", "one class after image 400", "nine classes"])
def test_lesson_00_gathering_cell_reads_the_classes_of_the_first_400_images(monkeypatch, tmp_path, labels, match):
    """The classes come from what `tfds.load` reads, never a download, and only from the first 400
    images the cell takes (the cell's own `take`, its own label list)."""
    import sys
    from types import ModuleType

    loads = []
    tfds = ModuleType("tensorflow_datasets")
    tfds.load = lambda name, **kwargs: loads.append((name, kwargs)) or _Split(labels)
    tfds.as_numpy = lambda split: iter(split.pairs)
    host = ModuleType("helpers.host")
    host.import_tensorflow = lambda: None  # the cell's planted data needs no TensorFlow
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", tfds)
    monkeypatch.setitem(sys.modules, "helpers.host", host)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    ok = OK["00_environment.ipynb"]
    raw = {**{k: v for k, v in ok.items() if k not in ("labels", "dataset")},
           "dataset": SimpleNamespace(**vars(ok["dataset"]), data_dir=tmp_path, label_names=[f"c{i}" for i in range(10)]),
           "plots": SimpleNamespace(save=lambda fig, name: None)}
    _holds_unless(match, _gather_and_prove, "00_environment.ipynb", raw)
    assert loads == [("cifar10", {"data_dir": str(tmp_path), "split": "train", "as_supervised": True, "download": False})]


def _engines_on_nodes(tmp_path, *, seen=(["a", "b"], ["c", "d"]), in_split=("a", "b", "c", "d"),
                      val_losses=([2.1, 1.9], [2.1, 1.9]), kept=(True, False), **by_rank_changes) -> dict:
    """Lesson 03's raw results from 2 engines on node1 and node2, in engine order (rank 1's engine
    first): the figures each computed on its own node, `kept` as each found its own model path, the
    examples each pass delivered and the split's own count of each (`in_split`). The kernel's host
    holds a file at rank 1's temporary path and nothing at the chief's: it must believe the engines,
    not its own disk."""
    chief_path, other_path = "/node1-only/models/03_multiworker.keras", tmp_path / "tmp-x" / "model.keras"
    other_path.parent.mkdir()
    other_path.write_bytes(b"a file on the kernel's host, not on node2")
    by_rank = {"in_sync": [2, 2], "local_replicas": [1, 1], "task_id": [0, 1], "moved": [0.5, 0.5], "digest": ["d", "d"],
               "examples_seen": [collections.Counter(s) for s in seen], "in_split": [collections.Counter(in_split)] * 2,
               "predicted_rows": [512, 512], "test_steps * global_batch": [512, 512], "prediction_digest": ["p", "p"],
               "found_at": [[0], [32]], "rows": [32, 32], "fit_shards": [[(0, 2)], [(1, 2)]],
               "pass_shards": [[(0, 2)], [(1, 2)]], "kept": list(kept), "path": [chief_path, str(other_path)],
               "initial_digest": ["a", "a"], "own_digest": ["a", "b"],
               "padding_check": OK["03_multiworker_ipyparallel.ipynb"]["padding_checks"],
               "replica_batches": [{32}, {32}], "step_examples": [{32}, {32}], "global_batch": [64, 64],
               "uneven_rows": [512, 512], **by_rank_changes}
    pulled = {name: values[::-1] for name, values in by_rank.items()}  # engine 0 runs rank 1
    assert not Path(chief_path).exists() and other_path.exists()
    return {"engines": _PlantedEngines(pulled), "sizes": _Sizes(epochs=2),
            "histories": [{"loss": [1.6, 0.6], "val_loss": list(v)} for v in val_losses[::-1]]}


@pytest.mark.parametrize("changes,match", [
    ({}, None),
    ({"seen": (["a", "b"], ["b", "c"])}, "shared examples"),  # example b reached both workers
    # the split holds b twice (the same image and label): each worker got one copy, as sharding gives it
    ({"seen": (["a", "b"], ["b", "c"]), "in_split": ("a", "b", "b", "c")}, None),
    ({"seen": (["a", "b", "b"], ["b", "c"]), "in_split": ("a", "b", "b", "c")}, "shared examples"),  # 3 copies of 2
    ({"val_losses": ([2.1, 1.9], [2.1, 1.8])}, "same all-reduced validation loss"),  # no all-reduce of the metric
    ({"kept": (True, True)}, "only the chief should keep"),  # rank 1's temporary copy left on node2
    ({"kept": (False, False)}, "only the chief should keep")],  # the chief's file missing on node1
    ids=["as run", "one example shared", "a duplicate split", "a duplicate delivered 3 times", "validation apart",
         "rank 1 kept a copy", "chief kept nothing"])
def test_lesson_03_gathering_cell_takes_what_the_engines_found_on_their_own_nodes(tmp_path, changes, match):
    """Engines on other nodes: the kernel cannot see their files (the chief's model is on node1,
    rank 1's temporary directory on node2) or their processes, only what they return. The cell
    counts the examples delivered beyond the split's own copies and reads the validation losses
    itself; whether a file was kept is what each engine found on its own disk, whatever this host
    holds at those paths."""
    _holds_unless(match, _gather_and_prove, "03_multiworker_ipyparallel.ipynb", _engines_on_nodes(tmp_path, **changes))


class _ImageBatch:
    """A batch of images (or labels) as a tf.Tensor answers `.numpy()` and `len()`."""

    def __init__(self, images):
        self.images = np.stack(images)

    def numpy(self):
        return self.images

    def __len__(self):
        return len(self.images)


class _PipelineBatches(list):
    """A finite dataset; `repeat()` here only marks it (fit's copy is never iterated)."""

    def repeat(self):
        return self


def _lesson_03_worker(rank: int, ignore_context: bool, monkeypatch) -> dict:
    """Lesson 03's pipeline cell and fingerprint pass, as written, on one of 2 stand-in workers:
    a strategy that hands the dataset function this worker's InputContext, and a `training_dataset`
    that shards by the context it gets (none: the whole split), batching 2 distinct examples; the
    split's last example is a copy of its first (image and label), which sharding gives to the other
    worker. `ignore_context` makes fit's `worker_pipeline` read the whole split (a context of 1
    pipeline): the pass must then see it too."""
    import sys
    from types import ModuleType

    def training_dataset(examples, global_batch, context=None):
        context = context or SimpleNamespace(input_pipeline_id=0, num_input_pipelines=1)
        mine = examples[context.input_pipeline_id::context.num_input_pipelines]
        return _PipelineBatches((_ImageBatch([image for image, _ in mine[i:i + 2]]),
                                 _ImageBatch([label for _, label in mine[i:i + 2]])) for i in range(0, len(mine), 2))

    lesson = ModuleType("helpers.lesson")
    lesson.training_dataset, lesson.evaluation_dataset = training_dataset, lambda *args: None
    monkeypatch.setitem(sys.modules, "helpers.lesson", lesson)
    context = SimpleNamespace(input_pipeline_id=rank, num_input_pipelines=2)
    strategy = SimpleNamespace(distribute_datasets_from_function=lambda fn: fn(context),
                               experimental_local_results=lambda value: [value])
    examples = [(np.full((2, 2), i % 7, np.uint8), np.int32(i % 7)) for i in range(8)]  # example 7 is example 0
    namespace = {"strategy": strategy, "train_examples": examples, "test_examples": None, "global_batch": 4,
                 "steps_per_epoch": 2, "resolver": SimpleNamespace(task_id=rank), "print": lambda *a, **k: None}
    pipeline = _cell_defining("03_multiworker_ipyparallel.ipynb", "def worker_pipeline").replace("%%px\n", "")
    if ignore_context:
        body = "return training_dataset(train_examples, global_batch, context)"
        assert body in pipeline
        pipeline = pipeline.replace(body, body.replace("context)", "SimpleNamespace(input_pipeline_id=0, "
                                                                   "num_input_pipelines=1))"))
        namespace["SimpleNamespace"] = SimpleNamespace
    fingerprint = _cell_defining("03_multiworker_ipyparallel.ipynb", "def fingerprint").replace("%%px\n", "")
    exec(compile(pipeline, "03 pipeline", "exec"), namespace)
    exec(compile(fingerprint, "03 fingerprint pass", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("ignore_context,match", [(False, None), (True, "shared examples")],
                         ids=["sharded", "fit's pipeline ignores the context"])
def test_lesson_03_fingerprint_pass_reads_the_pipeline_fit_reads(tmp_path, monkeypatch, ignore_context, match):
    """The pass goes through fit's own `worker_pipeline`: a pipeline that ignores its InputContext
    (every worker reads every example) fails the proof, through the pass's own fingerprints and the
    gathering cell; a split that holds one example twice, sharded, does not."""
    workers = [_lesson_03_worker(rank, ignore_context, monkeypatch) for rank in (0, 1)]
    assert all(w["fit_shards"] == w["pass_shards"] for w in workers)  # one function, one context, both times
    assert workers[0]["in_split"] == workers[1]["in_split"] and sorted(workers[0]["in_split"].values()) == [1] * 6 + [2]
    raw = _engines_on_nodes(tmp_path, seen=[w["examples_seen"] for w in workers], in_split=workers[0]["in_split"],
                            fit_shards=[w["fit_shards"] for w in workers], pass_shards=[w["pass_shards"] for w in workers],
                            replica_batches=[w["replica_batches"] for w in workers],
                            step_examples=[w["step_examples"] for w in workers])
    _holds_unless(match, _gather_and_prove, "03_multiworker_ipyparallel.ipynb", raw)


def _lesson_03_solution_1(tmp_path, per_replica_batch=None, **changes) -> None:
    """Lesson 03's solution 1 after its gathering cell, on 2 engines' raw figures (one replica each, global
    batch 64); `per_replica_batch` replaces TensorFlow's InputContext.get_per_replica_batch_size."""
    from unittest import mock

    import tensorflow as tf

    namespace = {"math": math, "np": np, "print": lambda *a, **k: None, **_engines_on_nodes(tmp_path, **changes)}
    nb = nbformat.read(NOTEBOOKS / "03_multiworker_ipyparallel.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    exec(compile(code[code.index(proof_source("03_multiworker_ipyparallel.ipynb")) - 1], "03 gather", "exec"), namespace)
    solution = compile(_solution("03_multiworker_ipyparallel.ipynb", 1), "03 solution 1", "exec")
    if per_replica_batch is None:
        exec(solution, namespace)
        return
    with mock.patch.object(tf.distribute.InputContext, "get_per_replica_batch_size", per_replica_batch):
        exec(solution, namespace)


@pytest.mark.parametrize("changes,match", [
    ({}, None),
    # a dataset_fn that batched by the global batch: every replica got all 64
    ({"replica_batches": [{64}, {64}], "step_examples": [{64}, {64}]}, "global batch over the replicas"),
    ({"step_examples": [{64}, {64}]}, "global batch over the replicas"),  # two batches a step for one replica
    ({"per_replica_batch": lambda self, global_batch: global_batch}, "^192$")],  # TensorFlow's answer not 32
    ids=["as run", "replicas got the global batch", "two batches per replica", "another per-replica rule"])
def test_lesson_03_solution_1_holds_the_rule_to_the_run(tmp_path, changes, match):
    """Issue 54 (03, solution 1 asserted `3 * (2 * per_replica) == 192`, arithmetic on a constant): the
    answer is TensorFlow's, and the rule is checked against each replica's batch the engines measured."""
    _holds_unless(match, lambda: _lesson_03_solution_1(tmp_path, **changes))


@pytest.mark.parametrize("replacement,match", [
    (None, None),
    ("", "disjoint shards that cover all 12"),  # the exercise's own dataset_fn: both workers get all 12 numbers
    (".shard(3, context.input_pipeline_id)\n            ", "disjoint shards that cover all 12")],  # 2, 5, 8, 11 lost
    ids=["sharded", "the exercise's dataset_fn", "disjoint but incomplete"])
def test_lesson_03_solution_2_fails_for_the_exercises_unsharded_dataset_fn(replacement, match):
    """Solution 2's check fed the exercise's own dataset_fn (no shard) fails on overlap; fed shards of 3
    (disjoint, but a third of the numbers reach no worker) it fails on coverage, its second operand."""
    import tensorflow as tf

    source = _solution("03_multiworker_ipyparallel.ipynb", 2)
    shard = ".shard(context.num_input_pipelines, context.input_pipeline_id)\n            "
    assert source.count(shard) == 1
    if replacement is not None:
        source = source.replace(shard, replacement)
    _holds_unless(match, exec, compile(source, "03 solution 2", "exec"), {"tf": tf, "print": lambda *a, **k: None})


class _SavingModel:
    """The trained model as lesson 03's saving cell uses it; `saves` False: a chief whose save writes nothing."""

    def __init__(self, saves: bool):
        self.saves, self.trainable_weights = saves, [SimpleNamespace(numpy=lambda: np.zeros(2, np.float32))]

    def evaluate(self, *args, **kwargs) -> dict:
        return {"accuracy": 0.5}

    def save(self, path) -> None:
        if self.saves:
            Path(path).write_bytes(b"model")


@pytest.mark.parametrize("saves,kept", [(True, True), (False, False)], ids=["the chief saves", "the chief saves nothing"])
def test_lesson_03_saving_cell_does_not_take_an_earlier_runs_file_for_this_runs(tmp_path, monkeypatch, saves, kept):
    """Issue 54 (03, second review): `kept = path.exists()` held on a re-run whose chief saved nothing,
    because the first run's file was still there: the cell removes it before saving."""
    import hashlib

    monkeypatch.setenv("COURSE_OUTPUT_DIR", str(tmp_path))
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "03_multiworker.keras").write_bytes(b"an earlier run's model")
    namespace = {"model": _SavingModel(saves), "test_ds": None, "test_steps": 1, "hashlib": hashlib,
                 "resolver": SimpleNamespace(task_id=0), "print": lambda *a, **k: None}
    cell = _cell_defining("03_multiworker_ipyparallel.ipynb", "kept = path.exists()").replace("%%px\n", "")
    exec(compile(cell, "03 saving cell", "exec"), namespace)
    assert namespace["kept"] is kept


def _hung(error="DeadlineExceededError", failed=103.1, late_error=None, late_ended=213.1) -> dict:
    """Lesson 06's raw reports of its two runs, in engine order (rank 1 first), wall clocks of the
    workers: beside a peer that never joins (both entering at 100.0), rank 0's error and when it came;
    beside a peer 13 s late with no timeout (both entering at 200.0), what rank 0 got and when."""
    ok = OK["06_fault_tolerance.ipynb"]
    late = {"error": late_error, "value": None if late_error else 2.0}
    return {**{k: v for k, v in ok.items() if k not in ("timeout_error", "waited_s", "late_results", "late_waited_s")},
            "hung_runs": [{"rank": 1, "entered": 100.0, "error": None, "value": None, "ended": 106.0},
                          {"rank": 0, "entered": 100.0, "error": error, "value": None, "ended": failed}],
            "late_runs": [{"rank": 1, "entered": 200.0, "error": None, "value": 2.0, "ended": 213.1},
                          {"rank": 0, "entered": 200.0, **late, "ended": late_ended}]}


@pytest.mark.parametrize("changes,match", [
    ({}, None),
    ({"error": "UnavailableError"}, "should time out"),  # the heartbeats' error: the peer counted as dead
    ({"failed": 100.4}, "after about 3 s"),  # an error before the timeout could fire
    ({"failed": 109.0}, "after about 3 s"),  # 9 s: not the timeout's doing
    ({"late_error": "UnavailableError", "late_ended": 210.0}, "past the heartbeat timeout"),  # asleep = dead
    ({"late_ended": 205.0}, "past the heartbeat timeout")],  # rank 0 done before the heartbeats could matter
    ids=["timed out", "heartbeat error", "too soon", "too late", "late peer counted dead", "late peer not late"])
def test_lesson_06_gathering_cell_times_the_wait_beside_a_hung_peer(changes, match):
    """From the workers' reports: each wait is rank 0's own clock from entering the all-reduce to
    its end (the engines' order does not matter); beside the late peer, what every worker got."""
    _holds_unless(match, _gather_and_prove, "06_fault_tolerance.ipynb", _hung(**changes))


def _running(steps: list, per_epoch: int) -> list:
    """What Keras logs after every step: each epoch's running mean of the step losses so far."""
    epochs = [steps[i:i + per_epoch] for i in range(0, len(steps), per_epoch)]
    return [[sum(epoch[:k + 1]) / (k + 1) for k in range(len(epoch))] for epoch in epochs]


_WARM = [3.2, 2.4, 2.0, 1.8, 1.6, 1.5] + [1.0] * 6  # the warm-up's 4 steps and the next: mean 2.2
_NO_WARM = [3.2, 2.0, 3.5, 1.8, 1.6, 1.3] + [1.0] * 6  # step 3 above the start, the running mean never; mean 2.42


@pytest.mark.parametrize("no_warm,warm,match", [
    (_NO_WARM, _WARM, None),
    ([3.2, 2.0, 1.5, 1.4, 1.3, 1.2] + [1.0] * 6, _WARM, "rise above its start"),
    # a rise in epoch 2, after the warm-up's 4 steps and the next: not warm-up's absence
    ([3.2, 3.1, 3.0, 2.9, 2.8, 2.7, 1.0, 1.0, 3.9, 1.0, 1.0, 1.0], _WARM, "rise above its start"),
    (_NO_WARM, [3.2, 2.4, 3.3, 1.8, 1.6, 1.5] + [1.0] * 6, "with warm-up no step"),
    ([3.2, 1.0, 3.5, 1.0, 1.0, 1.0] + [1.0] * 6, _WARM, "warm-up's steps should be worse")],
    ids=["as trained", "no rise", "rise after the window", "warm-up rises", "warm-up worse"])
def test_lesson_10_gathering_cell_derives_each_steps_loss_from_the_running_means(no_warm, warm, match):
    """From the running means Keras logs (reset every epoch of 6 steps): each step's own loss,
    which rises above the start where the logged mean does not, the warm-up's mean loss, and each
    run's final loss, the mean of its last quarter of steps (the small batch's 0.7, the unscaled 1.5)."""
    ok = OK["10_large_batches.ipynb"]
    others = {name: _running([3.2, 2.5, 2.2] + [1.5] * 9, 6) for name in _RUNS}
    others["batch 32"] = _running([3.2, 2.5, 2.2] + [1.5] * 6 + [0.7] * 3, 6)
    raw = {**{k: v for k, v in ok.items() if k not in ("step_loss", "during_warmup")}, "warmup_steps": 4,
           "running": {**others, "batch 512, linear, no warm-up": _running(no_warm, 6),
                       "batch 512, linear + warm-up": _running(warm, 6)}}
    assert max(m for epoch in raw["running"]["batch 512, linear, no warm-up"] for m in epoch) <= 3.2 or match
    _holds_unless(match, _gather_and_prove, "10_large_batches.ipynb", raw)


@pytest.mark.parametrize("decay_steps,match", [("steps - warmup_steps", None),
                                               ("(steps - warmup_steps) * 12 // 20", "not before"),
                                               ("steps - warmup_steps - 1", "not before")],
                         ids=["to the run's end", "0 at 12 of 20", "0 a step early"])
def test_lesson_10_proof_fails_when_a_schedule_reaches_0_before_its_run_ends(decay_steps, match):
    """Lesson 10's own schedules, stepped as its optimizers step them (quick mode's 6 epochs: 384 and 24
    updates), then its rates cell and its proof. A cosine that reaches 0 before the run's last update
    (CosineDecay clamps the step at decay_steps, so the rate then stays 0) reads 0 after the last update
    all the same: the rate halfway through the decay must tell it."""
    import keras

    source = _cell_defining("10_large_batches.ipynb", "def run_steps")
    assert "decay_steps=steps - warmup_steps," in source
    namespace = {"keras": keras, "SMALL": 32, "FACTOR": 16, "epochs": 6, "per_epoch": 2048, "base_lr": 0.025,
                 "large": 512, "sizes": SimpleNamespace(warmup_fraction=0.25), "print": lambda *a, **k: None}
    exec(compile(source.replace("decay_steps=steps - warmup_steps,", f"decay_steps={decay_steps},"), "10", "exec"),
         namespace)
    rate_log, last_rate, iterations = {}, {}, {}
    for name, (batch, rule, warmup) in namespace["runs"].items():
        schedule, steps = namespace["schedule"](batch, rule, warmup), namespace["run_steps"](batch)
        rate_log[name] = [float(schedule(step)) for step in range(steps)]  # what the optimizer takes before each step
        last_rate[name], iterations[name] = float(schedule(steps)), steps
    assert max(last_rate.values()) < 1e-6  # every variant ends at 0
    namespace.update(rate_log=rate_log, last_rate=last_rate, iterations=iterations)
    exec(compile(_cell_defining("10_large_batches.ipynb", "halfway = {}"), "10 rates", "exec"), namespace)
    measured = {k: namespace[k] for k in ("rates", "halfway", "last_rate", "iterations", "warmup_steps")}
    _holds_unless(match, _run, "10_large_batches.ipynb", {**OK["10_large_batches.ipynb"], **measured})


LESSON_12_REAL = """
import json, os, sys
variant = sys.argv[1]
if variant == "alone":  # lesson 12's MWMS line on an engine whose TF_CONFIG was never written
    os.environ.pop("TF_CONFIG", None)
    import tensorflow as tf
    print("RESULT " + json.dumps(tf.distribute.MultiWorkerMirroredStrategy().num_replicas_in_sync))
    sys.exit()
from helpers import environment
environment.local_replicas(2)
import time, keras, numpy as np, tensorflow as tf
from keras import layers
from types import SimpleNamespace
from helpers.data import ensure_data, load_split
from helpers.lesson import normalize
from tests.test_proof_cells import _cell_defining, _solution
name = "12_strategy_tour.ipynb"
devices = [d.name for d in tf.config.list_logical_devices("CPU")]
ns = {"tf": tf, "keras": keras, "layers": layers, "np": np, "time": time, "load_split": load_split,
      "normalize": normalize, "devices": devices, "print": lambda *a, **k: None}
if variant.startswith("solution 1"):
    parameter = {} if variant == "solution 1" else {"parameter_device": devices[-1]}
    ns["central"] = tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices, **parameter)
    try:
        exec(_solution(name, 1), ns)
        print("RESULT " + json.dumps(None))
    except AssertionError as exc:
        print("RESULT " + json.dumps(str(exc)))
    sys.exit()
rate = 0.0 if variant == "rate 0" else 0.05
ns.update(dataset=ensure_data(True), sizes=SimpleNamespace(train_examples=2048), STEPS=40, BATCH=64,
          LEARNING_RATE=rate)
exec(_cell_defining(name, "def plain_cnn"), ns)
exec(_cell_defining(name, "def fit_under"), ns)
if variant.startswith("solution 2"):  # the statistics' aggregation set, or the line that sets it deleted
    ns.update(math=__import__("math"), central=tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices))
    source = _solution(name, 2)
    if variant != "solution 2":
        source = source.replace('kwargs["aggregation"] = "mean"', 'pass')
    try:
        exec(source, ns)
        print("RESULT " + json.dumps(None))
    except (AssertionError, ValueError) as exc:
        print("RESULT " + json.dumps(type(exc).__name__ + ": " + str(exc)[:300]))
    sys.exit()
run = ns["fit_under"](tf.distribute.OneDeviceStrategy(devices[0]))
print("RESULT " + json.dumps({"before": run["before"], "evaluated": run["evaluated"]}))
"""


def _lesson_12_real(variant: str):
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_12_REAL, variant], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))[7:])


def test_lesson_12_proof_fails_when_each_synchronous_worker_trains_alone():
    """The MWMS line of lesson 12, run with no TF_CONFIG (the engines' variable removed): each worker is a
    cluster of one replica. Same seeds and data still give equal digests and a falling loss; the proof must
    fail on the replicas each strategy counted."""
    alone = _lesson_12_real("alone")
    assert alone == 1
    with pytest.raises(AssertionError, match="did not form one cluster"):
        _run("12_strategy_tour.ipynb", {**OK["12_strategy_tour.ipynb"], "sync_in_sync": [alone, alone]})


@pytest.mark.parametrize("variant,match", [("trains", None), ("rate 0", "did not train")])
def test_lesson_12_proof_fails_when_a_one_process_run_does_not_train(variant, match):
    """Lesson 12's own `fit_under` under OneDeviceStrategy, 40 steps: with learning rate 0 (nothing learnt)
    the loss after equals the loss before, and the proof must fail; as written it must pass. With nothing learnt
    the two losses are equal to the last bit: `evaluate` saw the same batches before and after."""
    run = _lesson_12_real(variant)
    if variant == "rate 0":
        assert run["before"] == run["evaluated"], f"evaluated on other batches after training: {run}"
    ok = OK["12_strategy_tour.ipynb"]
    namespace = {**ok, "before": {**ok["before"], "OneDevice": run["before"]},
                 "evaluated": {**ok["evaluated"], "OneDevice": run["evaluated"]}}
    _holds_unless(match, _run, "12_strategy_tour.ipynb", namespace)


@pytest.mark.parametrize("variant,match", [("solution 1", None), ("solution 1, last device", "should be on")])
def test_lesson_12_solution_1_checks_the_device_of_the_single_copy(variant, match):
    """Solution 1 with the lesson's CentralStorageStrategy (default parameter device) passes; with the
    copy placed on the last logical device instead, it must fail on the device."""
    failure = _lesson_12_real(variant)
    if match is None:
        assert failure is None
    else:
        assert failure and match in failure


LESSON_12_ASYNC = """
import json, sys
import time, keras, numpy as np, tensorflow as tf
from keras import layers
import socket
from helpers.data import ensure_data
from tests.test_proof_cells import _cell_defining
name, variant = "12_strategy_tour.ipynb", sys.argv[1]
ports = []
for _ in range(3):  # free ports, held open until all are picked so that they differ
    s = socket.socket(); s.bind(("localhost", 0)); ports.append(s)
addresses = [f"localhost:{s.getsockname()[1]}" for s in ports]
[s.close() for s in ports]
spec = tf.train.ClusterSpec({"worker": addresses[:2], "ps": addresses[2:]})
config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=4)  # fewer threads than workers + 1 can hang
servers = [tf.distribute.Server(spec, job_name=job, task_index=i, protocol="grpc", config=config, start=True)
           for job, i in (("worker", 0), ("worker", 1), ("ps", 0))]  # in this process, as the lesson's engines run them
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
ns = {"tf": tf, "keras": keras, "layers": layers, "resolver": resolver, "LEARNING_RATE": 0.05, "LIMIT": 2048,
      "DATA_DIR": str(ensure_data(True).data_dir), "BATCH": 64, "STEPS": 40, "PS_WORKERS": 2, "print": lambda *a, **k: None}
body = lambda marker: _cell_defining(name, marker).split(chr(10), 1)[1]  # without its %%px_chief line
exec(_cell_defining(name, "def plain_cnn"), ns)
exec(body("ParameterServerStrategy(resolver)"), ns)
exec(body("def dataset_fn():"), ns)
step = body("def async_step")
apply = "        optimizer.apply_gradients(zip(grads, model.trainable_variables))" + chr(10)
assert step.count(apply) == 1
if variant == "no update":
    step = step.replace(apply, "")
if variant == "every other":  # every other step (by a ticket of its own) applies nothing: each variable's update under a tf.cond
    step = step.replace(apply, "        SKIP.append(TICKETS.assign_add(1) % 2 == 0)" + chr(10) + apply)  # (around apply_gradients: merge_call refuses)
    optimizer, update_step = ns["optimizer"], ns["optimizer"].update_step
    with ns["strategy"].scope():
        ns["SKIP"], ns["TICKETS"] = [], tf.Variable(0, dtype=tf.int64)
    optimizer.update_step = lambda g, v, lr: tf.cond(ns["SKIP"][-1], lambda: tf.no_op(), lambda: update_step(g, v, lr) or tf.no_op())
if variant == "forward unordered":  # as the step was: only the timestamp waits for the counter's read
    step = step.replace("            started = tf.timestamp()" + chr(10), "            started = tf.timestamp()" + chr(10) + "        if True:" + chr(10))
exec(step, ns)
exec(body("coordinator.join()  # waits for every scheduled step"), ns)
graph = ns["async_step"]._list_all_concrete_functions()[0].graph  # the traced step: do the weight reads wait?
inside = {e.ref(): i.name for e, i in graph.captures}
reads = [o for o in graph.get_operations() if o.type == "ReadVariableOp"]
counter_read = next(o for o in reads if o.inputs[0].name == inside[ns["updates"].handle.ref()])  # the step's first op on it
weights = {inside[v.value.handle.ref()] for v in ns["model"].trainable_variables}
def ancestors(op):  # the names of every op `op` waits for, by data or by control
    seen, todo = set(), [op]
    while todo:
        o = todo.pop()
        for x in [*o.control_inputs, *(t.op for t in o.inputs)]:
            if x.name not in seen:
                seen.add(x.name)
                todo.append(x)
    return seen
forward = [o for o in reads if o.inputs[0].name in weights and o.name.startswith("plain_cnn")]  # the model's call
ns["forward_after_counter"] = bool(forward) and all(counter_read.name in ancestors(o) for o in forward)
keys = ("async_log", "staleness", "applied_updates", "moved_updates", "optimizer_count", "forward_after_counter")
print("RESULT " + json.dumps({k: ns[k] for k in keys}))
"""


def _lesson_12_async(variant: str) -> dict:
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_12_ASYNC, variant], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))[7:])


@pytest.mark.parametrize("variant,ordered", [("as written", True), ("forward unordered", False)])
def test_lesson_12_async_step_reads_the_weights_after_the_counter(variant, ordered):
    """In the traced `async_step` every weight read of the forward pass waits for the step's read of the
    counter (tf.control_dependencies; auto_control_deps orders only the ops on one variable): as written it
    does; with only the timestamp under the control dependency, as the step once was, it does not."""
    assert _lesson_12_async(variant)["forward_after_counter"] is ordered


@pytest.mark.parametrize("variant,match", [("as written", None), ("no update", "not one update per step"),
                                           ("every other", "not one update per step")])
def test_lesson_12_proof_fails_when_the_scheduled_steps_apply_no_update(variant, match):
    """Lesson 12's chief cells (strategy, dataset_fn, async_step, the scheduling loop) on an in-process
    cluster of 2 workers and 1 parameter server. With `apply_gradients` deleted from `async_step`, or skipped
    under a `tf.cond` in every other step, the step counter still counts every step; the proof must fail on
    the steps whose apply moved the weights, and (no update at all), with that count and the optimizer's
    taken from a correct run, on the loss, which no longer falls."""
    ran = _lesson_12_async(variant)
    spans = [(start, end) for *_, start, end in ran["async_log"]]
    losses = [loss for loss, *_ in ran["async_log"]]
    namespace = {**OK["12_strategy_tour.ipynb"], **ran, "first": np.mean(losses[:5]), "last": np.mean(losses[-5:]),
                 "overlapping": sum(1 for i, (s, e) in enumerate(spans) for s2, e2 in spans[i + 1:] if s2 < e and s < e2)}
    assert ran["applied_updates"] == len(losses) + 2  # the counter counts either way
    print(variant, {k: ran[k] for k in ("applied_updates", "moved_updates", "optimizer_count")})
    _holds_unless(match, _run, "12_strategy_tour.ipynb", namespace)
    if variant == "no update":
        correct = {k: OK["12_strategy_tour.ipynb"][k] for k in ("optimizer_count", "moved_updates")}
        _holds_unless("did not lower its loss", _run, "12_strategy_tour.ipynb", {**namespace, **correct})


@pytest.mark.parametrize("in_sync,local,match", [([4, 4], [2, 2], None), ([2, 2], [2, 2], "did not form one cluster"),
                                                 ([2, 2], [1, 1], None), ([1, 1], [1, 1], "did not form one cluster")],
                         ids=["2 GPUs each, one cluster", "2 GPUs each, each alone", "CPU, one cluster", "CPU, each alone"])
def test_lesson_12_mwms_cluster_counts_every_device_of_every_worker(in_sync, local, match):
    """MWMS with TF_CONFIG counts each worker's GPUs times the workers (collective_all_reduce_strategy.py,
    _initialize_local_devices and _num_replicas_in_sync): on a 4-GPU node, two local engines with 2 GPUs each
    count 4 replicas. The proof must pass there, and fail where each worker counted only its own devices."""
    _holds_unless(match, _run, "12_strategy_tour.ipynb", {**OK["12_strategy_tour.ipynb"], "sync_in_sync": in_sync,
                                                          "sync_locals": local})


@pytest.mark.parametrize("variant,match", [("solution 2", None), ("solution 2, no aggregation", "aggregation")])
def test_lesson_12_solution_2_fails_without_the_statistics_aggregation(variant, match):
    """Solution 2 on 2 logical CPUs passes; with the line giving the moving statistics an aggregation
    deleted, batch norm must fail under CentralStorageStrategy again, and the solution with it."""
    failure = _lesson_12_real(variant)
    if match is None:
        assert failure is None
    else:
        assert failure and match in failure
