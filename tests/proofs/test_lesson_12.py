"""Lesson 12's proof cell (notebooks/12_strategy_tour.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

import os

import pytest

from tests.support.proof_cases import OK
from tests.support.proof_cells import cell_defining, gather_and_prove, holds_unless, run_proof


def _ps_raw(spans, losses, weighted: bool = True) -> dict:
    """Lesson 12's raw results: step spans of the asynchronous workers and their losses, the synchronous logs."""
    ok = OK["12_strategy_tour.ipynb"]
    return {**{k: v for k, v in ok.items() if k not in ("overlapping", "first", "last", "sync_first", "sync_last",
                                                        "copies", "evaluated", "fit_loss", "pause_floor", "evenly",
                                                        "first_straggler", "async_se", "sync_se", "loss_se")},
            "async_spans": spans, "async_log": [(loss, 0, 1, 0.0, 0.1) for loss in losses],
            "sync_logs": [[(0, 0, 2.3 - 0.1 * i) for i in range(10)]] * 2,
            "one_process": {name: {"copies": copies, "places": places, "evaluated": 0.5, "fit_loss": fit_loss, "replicas": replicas,
                                   "loss_se": 0.01,
                                   **_evaluated_before(name, replicas, weighted)}
                            for name, copies, places, fit_loss, replicas in (("OneDevice", 1, ["c0"], 0.78, 1),
                                                                             ("Mirrored", 2, ["c0", "c1"], 0.78, 2),
                                                                             ("CentralStorage", 1, ["c0"], 2.33, 2))}}


def _evaluated_before(name: str, replicas: int, weighted: bool, losses: tuple = (2.30, 2.32, 2.34, 2.36, 2.38)) -> dict:
    """Five batches' losses and evaluate's figure on them: under CentralStorageStrategy batch j weighted
    R^(5-j) (what Keras does: 16/31 the first batch at 2 replicas), or evenly if `weighted` is False."""
    weights = [replicas ** (4 - j) if name == "CentralStorage" and weighted else 1 for j in range(5)]
    return {"batch_losses": list(losses), "before": sum(w * loss for w, loss in zip(weights, losses)) / sum(weights)}


_BUSY = [(0.05 * i, 0.05 * i + 0.12) for i in range(40)]  # 2 or 3 steps at once, but for the first 0.05 s
_LULL = _BUSY[:20] + [(s + 0.3, e + 0.3) for s, e in _BUSY[20:]]  # 0.3 s with one step or none running, midway


@pytest.mark.parametrize("spans,losses,match", [
    (_BUSY, [2.3 - 0.03 * i for i in range(40)], None),
    ([(i, i + 0.9) for i in range(40)], [2.3 - 0.03 * i for i in range(40)], "did not train asynchronously"),
    (_LULL, [2.3 - 0.03 * i for i in range(40)], None),
    (_BUSY, [2.0 + 0.01 * i for i in range(40)], "did not lower its loss")],
    ids=["asynchronous and learning", "steps one after another", "a worker idle 0.3 s", "loss rising"])
def test_lesson_12_gathering_cell_counts_overlaps_and_loss_from_the_raw_log(spans, losses, match):
    """From the raw step spans and losses: steps that never overlap, or a loss that rises over the run, must fail
    the proof through the gathering cell's counting and averaging. A stretch of 0.3 s in which fewer steps than
    workers ran must not: correct runs on a loaded machine measured 0.26 to 2.2 s (the proof once failed them),
    so no idle stretch is checked (the lesson's `longest_idle`, printed and never checked, is gone)."""
    raw = _ps_raw(spans, losses)
    holds_unless(match, gather_and_prove, "12_strategy_tour.ipynb", raw)


@pytest.mark.parametrize("scheduling_s,match", [(0.212, None), (1.71, "waited for the steps while scheduling"),
                                                (2.123, "waited for the steps while scheduling")],
                         ids=["correct, loaded machine", "just over the pauses' floor", "a join every 14 steps"])
def test_lesson_12_gathering_cell_holds_the_schedule_loop_to_the_pauses_floor(scheduling_s, match):
    """The chief's schedule loop against the gathering cell's floor, the stragglers' pauses over the workers (3.4 s
    over 2: 1.7 s, the first step's 0.8 s included): a loop that joins after its groups of steps waits for every step
    and takes at least that (2.1 to 4.9 s in runs here); a correct loop took 0.01 to 0.06 s, up to 0.29 s on a loaded
    machine (load 12 to 30)."""
    raw = {**_ps_raw(_BUSY, [2.3 - 0.03 * i for i in range(40)]), "scheduling_s": scheduling_s}
    holds_unless(match, gather_and_prove, "12_strategy_tour.ipynb", raw)


@pytest.mark.parametrize("losses,shown", [((2.30, 2.32, 2.34, 2.36, 2.38), True), ((2.3400, 2.3405, 2.3410, 2.3415, 2.3420), False)],
                         ids=["batches 0.02 apart", "batches 0.0005 apart"])
def test_lesson_12_proof_says_when_evaluate_s_weighting_is_not_shown(losses, shown):
    """evaluate's figure weighted R^(5-j) under CentralStorageStrategy is told from the plain mean only if the two
    differ by 10 x the check's 1e-4 or more: 2.3168 against 2.34 (0.023 apart) on batches 0.02 apart is evidence; on
    batches 0.0005 apart (2.34042 against 2.341, 0.0006 apart: under 10 x 1e-4) the check tells too little, and the
    proof must say NOT shown."""
    printed = []
    raw = _ps_raw(_BUSY, [2.3 - 0.03 * i for i in range(40)])
    raw["one_process"] = {name: {**run, **_evaluated_before(name, run["replicas"], True, losses)}
                          for name, run in raw["one_process"].items()}
    gather_and_prove("12_strategy_tour.ipynb", {**raw, "print": lambda *a, **k: printed.append(" ".join(map(str, a)))})
    assert any(line.startswith("NOT shown: evaluate's weighting") for line in printed) is not shown, printed


@pytest.mark.parametrize("weighted,match", [(True, None), (False, "evaluate's loss is not")])
def test_lesson_12_gathering_cell_weighs_evaluate_s_batches(weighted, match):
    """From each one-process run's 5 batch losses (2.30 to 2.38) and evaluate's figure: the proof passes when
    evaluate weighted batch j by R^(5-j) under CentralStorageStrategy (2.3258 at 2 replicas), and fails through
    the gathering cell's own weighting when it took their plain mean (2.34), as a right Keras would."""
    holds_unless(match, gather_and_prove, "12_strategy_tour.ipynb", _ps_raw(_BUSY, [2.3 - 0.03 * i for i in range(40)], weighted))


LESSON_12_REAL = """
import json, os, sys
variant = sys.argv[1]
if variant == "alone":  # lesson 12's MWMS line on an engine whose TF_CONFIG was never written
    os.environ.pop("TF_CONFIG", None)
    import tensorflow as tf
    print("RESULT " + json.dumps(tf.distribute.MultiWorkerMirroredStrategy().num_replicas_in_sync))
    sys.exit()
from helpers import environment
environment.local_replicas(int(variant.split()[1]) if variant.startswith("replicas ") else 2)
import time, keras, numpy as np, tensorflow as tf
from keras import layers
from types import SimpleNamespace
from helpers.data import ensure_data, load_split
from helpers.lesson import normalize
from tests.support.proof_cells import cell_defining, solution_source
name = "12_strategy_tour.ipynb"
devices = [d.name for d in tf.config.list_logical_devices("CPU")]
ns = {"tf": tf, "keras": keras, "layers": layers, "np": np, "time": time, "load_split": load_split,
      "normalize": normalize, "devices": devices, "print": lambda *a, **k: None}
if variant == "solution 1, first device":  # a CentralStorageStrategy whose default parameter device is the first compute device
    class FirstDevice(tf.distribute.experimental.CentralStorageStrategy):
        def __init__(self, compute_devices=None, parameter_device=None):
            super().__init__(compute_devices, parameter_device or compute_devices[0])
    tf.distribute.experimental.CentralStorageStrategy = FirstDevice
if variant.startswith("solution 1"):
    parameter = {"parameter_device": devices[-1]} if variant == "solution 1, last device" else {}
    ns["central"] = tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices, **parameter)
    try:
        exec(solution_source(name, 1), ns)
        print("RESULT " + json.dumps(None))
    except AssertionError as exc:
        print("RESULT " + json.dumps(str(exc)))
    sys.exit()
rate = 0.0 if variant == "rate 0" else 0.005 if variant.endswith("rate 0.005") else 0.05
ns.update(dataset=ensure_data(True), sizes=SimpleNamespace(train_examples=2048), BATCH=64,
          STEPS=15 if variant.startswith("replicas ") else 40,  # 7 or 8 replicas on 2 cores: fewer steps
          LEARNING_RATE=rate)
exec(cell_defining(name, "def plain_cnn"), ns)
exec(cell_defining(name, "def fit_under"), ns)
if variant.startswith("solution 2"):  # the statistics' aggregation as written, deleted, or another one
    ns.update(central=tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices))
    source, aggregation = solution_source(name, 2), 'kwargs["aggregation"] = "mean"'
    assert source.count(aggregation) == 1
    source = source.replace(aggregation, {"solution 2": aggregation, "solution 2, no aggregation": "pass",
                                          "solution 2, first replica": aggregation.replace("mean", "only_first_replica"),
                                          "solution 2, sum": aggregation.replace("mean", "sum"),
                                          "solution 2, first replica for the variance": aggregation.replace(
                                              '"mean"', '"mean" if kwargs.get("name") == "moving_mean" else "only_first_replica"')}[variant])
    try:
        exec(source, ns)
        print("RESULT " + json.dumps(None))
    except (AssertionError, ValueError) as exc:
        print("RESULT " + json.dumps(type(exc).__name__ + ": " + str(exc)[:300]))
    sys.exit()
if variant.startswith("central"):  # CentralStorageStrategy, fit's loss tracker as Keras makes it or aggregated by mean
    figures = ("before", "evaluated", "fit_loss")
    mirrored = ns["fit_under"](tf.distribute.MirroredStrategy(devices))  # the history the proof compares with, same rate
    class MeanByMean(keras.metrics.Mean):
        def add_variable(self, shape, initializer, dtype=None, aggregation="sum", name=None):
            return super().add_variable(shape, initializer, dtype=dtype, aggregation="mean", name=name)
    if variant.startswith("central, mean tracker"):  # the Mean compile makes its loss tracker of (trainer.py, compile)
        from keras.src import metrics as metrics_module
        metrics_module.Mean = MeanByMean
    run = ns["fit_under"](tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices))
    aggregations = [str(v.aggregation) for v in run["model"]._loss_tracker.variables]
    print("RESULT " + json.dumps({k: run[k] for k in figures} | {"aggregations": aggregations,
                                                                    "mirrored": {k: mirrored[k] for k in figures}}))
    sys.exit()
if variant == "a copy per replica, central":  # one variable handed out per weight, a copy per replica kept behind it
    import contextlib
    class CopyPerReplica(tf.distribute.experimental.CentralStorageStrategy):
        @contextlib.contextmanager
        def scope(self):
            def copies(next_creator, **kwargs):
                return [next_creator(**kwargs) for _ in range(self.num_replicas_in_sync)][0]
            with super().scope(), tf.variable_creator_scope(copies):
                yield
    run = ns["fit_under"](CopyPerReplica(compute_devices=devices))
    print("RESULT " + json.dumps({"copies": run["copies"], "places": run.get("places"),
                                  "kind": type(run["model"].weights[0].value).__name__}))
    sys.exit()
if variant.startswith("replicas "):  # MirroredStrategy and CentralStorageStrategy on the replicas asked for, quick data
    runs = {"Mirrored": ns["fit_under"](tf.distribute.MirroredStrategy(devices)),
            "CentralStorage": ns["fit_under"](tf.distribute.experimental.CentralStorageStrategy(compute_devices=devices))}
    print("RESULT " + json.dumps({name: {k: run[k] for k in ("before", "batch_losses", "loss_se", "evaluated", "fit_loss", "copies",
                                                             "places", "replicas")} for name, run in runs.items()}))
    sys.exit()
if variant == "slow teardown":  # fit's History callback sleeps 8 s at the end of the timed fit's epoch, after its last batch
    history_end = keras.callbacks.History.on_epoch_end
    def slow_end(self, epoch, logs=None):
        if self.params.get("steps") == ns["STEPS"]:
            time.sleep(8)
        return history_end(self, epoch, logs)
    keras.callbacks.History.on_epoch_end = slow_end
run = ns["fit_under"](tf.distribute.OneDeviceStrategy(devices[0]))
print("RESULT " + json.dumps({"before": run["before"], "evaluated": run["evaluated"], "loss_se": run["loss_se"],
                              "step_ms": run["step_ms"]}))
"""


def _lesson_12_real(variant: str, timeout: int = 300):
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_12_REAL, variant], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))[7:])


def test_lesson_12_proof_fails_when_each_synchronous_worker_trains_alone():
    """The MWMS line of lesson 12, run with no TF_CONFIG (the engines' variable removed): each worker is a
    cluster of one replica. Same seeds and data still give equal digests and a falling loss; the proof must
    fail on the replicas each strategy counted."""
    alone = _lesson_12_real("alone")
    assert alone == 1
    with pytest.raises(AssertionError, match="did not form one cluster"):
        run_proof("12_strategy_tour.ipynb", {**OK["12_strategy_tour.ipynb"], "sync_in_sync": [alone, alone]})


LESSON_12_SYNC = """
import json, os, sys
rank, ports, variant = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                                      "task": {"type": "worker", "index": rank}})  # what setup_multiworker writes
from helpers.data import ensure_data
from tests.support.proof_cells import cell_defining
name = "12_strategy_tour.ipynb"
ns = {"DATA_DIR": str(ensure_data(True).data_dir), "LIMIT": 2048, "STEPS": 40, "BATCH": 64, "LEARNING_RATE": 0.05,
      "print": lambda *a, **k: None}
body = lambda marker: cell_defining(name, marker).split(chr(10), 1)[1]  # without its %%px line
exec(cell_defining(name, "def plain_cnn"), ns)
exec(body("strategy = tf.distribute.MultiWorkerMirroredStrategy("), ns)
step = body("def sync_step")
apply = "        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # after the all-reduce" + chr(10)
assert step.count(apply) == 1
if variant == "own gradients":  # each replica subtracts its own gradient from its own copy (aggregation "none"): no all-reduce
    step = step.replace(apply, "        [v.assign_sub(LEARNING_RATE * g) for v, g in zip(model.trainable_variables, grads)]" + chr(10))
exec(step, ns)
exec(body("sync_step(*next(batches))  # traces the step"), ns)
print("RESULT " + json.dumps({k: ns[k] for k in ("digest", "in_sync", "local_replicas", "sync_log")}), flush=True)
"""


@pytest.mark.multiprocess
@pytest.mark.parametrize("variant,match", [("as written", None), ("own gradients", "different weights")])
def test_lesson_12_proof_fails_when_the_synchronous_workers_apply_their_own_gradients(variant, match):
    """Lesson 12's MWMS cells (the strategy, the model, dataset_fn, sync_step, the logged steps) on 2 worker processes
    with TF_CONFIG, one cluster of 2 replicas. As written the gradients are all-reduced and the digests agree. With each
    replica subtracting its own gradient (`assign_sub`; the weights' aggregation is "none", so each worker updates its own
    copy), the workers still form one cluster (2 in sync each), but on their own shards the weights part: the proof must fail on the digests. Workers alone (test_lesson_12_proof_fails_when_each_synchronous_worker_trains_alone)
    agree whatever the step does: same seed, same data; this run shows that the agreement in the cluster comes from the
    all-reduce (ninth review, finding 2: 2c95ea37c3f981b8 against 4b441c8298700465 here, the loss 2.408 -> 1.842 in
    40 steps)."""
    import json
    import socket
    import subprocess
    import sys

    from tests.conftest import ROOT

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("localhost", 0))
            ports.append(str(s.getsockname()[1]))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    workers = [subprocess.Popen([sys.executable, "-c", LESSON_12_SYNC, str(rank), ",".join(ports), variant], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    ran = []
    try:
        for worker in workers:
            out, err = worker.communicate(timeout=300)
            assert worker.returncode == 0, err[-3000:]
            ran.append(json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:]))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    print(variant, [(r["digest"], r["in_sync"], round(r["sync_log"][0][2], 3), round(r["sync_log"][-1][2], 3)) for r in ran])
    assert [r["in_sync"] for r in ran] == [2, 2] and [r["local_replicas"] for r in ran] == [1, 1], ran  # one cluster of 2
    namespace = {**OK["12_strategy_tour.ipynb"], "sync_digests": [r["digest"] for r in ran],
                 "sync_in_sync": [r["in_sync"] for r in ran], "sync_locals": [r["local_replicas"] for r in ran]}
    holds_unless(match, run_proof, "12_strategy_tour.ipynb", namespace)


@pytest.mark.parametrize("change,match", [
    ({}, None),
    ({"first": 2.31, "last": 2.12, "async_se": 0.04}, None),  # slower learning (harder data): 0.19 > 3 x 0.04
    ({"sync_first": 2.31, "sync_last": 2.10, "sync_se": 0.03}, None),
    ({"before": {"OneDevice": 2.34, "Mirrored": 2.35, "CentralStorage": 2.35},
      "evaluated": {"OneDevice": 2.12, "Mirrored": 2.10, "CentralStorage": 2.15}}, None),
    ({"first": 2.31, "last": 2.25, "async_se": 0.04}, "did not lower its loss"),  # within 3 standard errors
    ({"evaluated": {"OneDevice": 2.30, "Mirrored": 0.5, "CentralStorage": 0.5}}, "did not train")],
    ids=["as planted", "async slower", "sync slower", "one-process slower", "async within noise", "one-process within noise"])
def test_lesson_12_proof_asks_a_fall_beyond_noise_not_a_fifth(change, match):
    """20th review, finding 1: the proof once asked every loss to fall by a fifth, which synthetic data (learnt to
    about 0 in 40 steps) always gave, while real CIFAR-10 after 40 steps likely ends near 2.0-2.1. It now asks a fall of
    more than 3 standard errors of the run's own losses: a slower fall passes, one within the noise fails."""
    holds_unless(match, run_proof, "12_strategy_tour.ipynb", {**OK["12_strategy_tour.ipynb"], **change})


@pytest.mark.parametrize("variant,match", [("trains", None), ("rate 0", "did not train")])
def test_lesson_12_proof_fails_when_a_one_process_run_does_not_train(variant, match):
    """Lesson 12's own `fit_under` under OneDeviceStrategy, 40 steps: with learning rate 0 (nothing learnt)
    the loss after equals the loss before, and the proof must fail; as written it must pass. With nothing learnt
    the two losses are equal to the last bit: `evaluate` saw the same batches before and after. The proof holds the
    fall to 3 standard errors of the evaluation before training (per example), measured in the same run."""
    run = _lesson_12_real(variant)
    print(variant, run)
    if variant == "rate 0":
        assert run["before"] == run["evaluated"], f"evaluated on other batches after training: {run}"
    ok = OK["12_strategy_tour.ipynb"]
    namespace = {**ok, "before": {**ok["before"], "OneDevice": run["before"]},
                 "evaluated": {**ok["evaluated"], "OneDevice": run["evaluated"]},
                 "loss_se": {**ok["loss_se"], "OneDevice": run["loss_se"]}}
    holds_unless(match, run_proof, "12_strategy_tour.ipynb", namespace)


@pytest.mark.parametrize("variant,match", [("central, mean tracker", "should not show the fall"),
                                           ("central, mean tracker, rate 0.005", "should not show the fall"),
                                           ("central, rate 0.005", None)])
def test_lesson_12_proof_fails_when_fit_s_history_is_right_under_central_storage(variant, match):
    """Lesson 12's own `fit_under` under MirroredStrategy and then CentralStorageStrategy on 2 logical CPUs,
    40 steps, with fit's loss tracker's variables aggregated by their mean (a Keras that did it right): the
    history then shows the fall `evaluate` measured (0.785 against 2.374 here), and the proof must fail on
    fit's history, not elsewhere. At a tenth of the rate a right history falls less (2.374 to 1.900 in the
    review, not the fifth the proof once asked for), as Mirrored's does beside it: the proof must fail there
    too, and pass as written (the tracker sums what the replicas assign: its history stays near the loss
    before training). At the lesson's rate as written the nbval pass runs it."""
    run = _lesson_12_real(variant)
    print(variant, run)
    assert run["evaluated"] < 0.8 * run["before"], run  # trained either way: only fit's figure differs
    assert run["aggregations"] == ["mean" if "mean" in variant else "sum"] * 2, run  # total and count, as asked
    ok = OK["12_strategy_tour.ipynb"]
    mirrored = run["mirrored"] if "rate" in variant else {k: ok[k]["Mirrored"] for k in ("before", "evaluated", "fit_loss")}
    namespace = {**ok, **{k: {**ok[k], "CentralStorage": round(run[k], 3), "Mirrored": round(mirrored[k], 3)}
                          for k in ("before", "evaluated", "fit_loss")}}
    holds_unless(match, run_proof, "12_strategy_tour.ipynb", namespace)


@pytest.mark.parametrize("variant,match", [("solution 1", None), ("solution 1, last device", "should be on"),
                                           ("solution 1, first device", "should be on")])
def test_lesson_12_solution_1_checks_the_device_of_the_single_copy(variant, match):
    """Solution 1 with the lesson's CentralStorageStrategy (default parameter device) passes; with the
    copy placed on the last logical device instead, it must fail on the device. On CPUs the first compute
    device is CPU:0, the default parameter device too (review r4: the solution passed whichever of the two
    TensorFlow chose): with a CentralStorageStrategy whose default is the first compute device, the solution
    must fail (its strategy over the devices reversed puts the copy on CPU:1)."""
    failure = _lesson_12_real(variant)
    if match is None:
        assert failure is None
    else:
        assert failure and match in failure


@pytest.mark.parametrize("replicas", [7, 8])
def test_lesson_12_evaluates_whole_batches_at_7_and_8_replicas(replicas):
    """Lesson 12's own `fit_under` under MirroredStrategy and CentralStorageStrategy on 7 and 8 logical CPUs, quick
    mode's data (2,048 training examples), 15 steps (40 took over 300 s at 8 replicas under load); then the gathering
    cell and the proof on those two runs. Five global batches of 64 x R need 2,240 examples at 7 replicas and 2,560 at
    8: reading the split's first 5 x 64 x R
    examples gave 4 whole batches and a 5th of 256 at 7 (evaluate weights batches by their examples, the gathering
    cell evenly: a correct MirroredStrategy run failed the proof, weighting 0.0020 against 1e-4) and 4 batches at 8
    (the gathering cell's np.average of 4 losses by 5 weights raised TypeError). A kernel on an 8-GPU node has 8."""
    runs = _lesson_12_real(f"replicas {replicas}", timeout=900)
    print(replicas, runs)
    assert [run["replicas"] for run in runs.values()] == [replicas] * 2, runs
    raw = _ps_raw(_BUSY, [2.3 - 0.03 * i for i in range(40)])
    largest = (2 - 2**-23) * 2**127  # float32's largest value: the overflow step the proof expects at these replicas
    overflow = next(k for k in range(1, 401) if replicas * 64 * 2.3 * (replicas**k - 1) / (replicas - 1) > largest)
    gather_and_prove("12_strategy_tour.ipynb", {**raw, "one_process": {"OneDevice": raw["one_process"]["OneDevice"], **runs},
                                                "replicas": replicas, "central_mean": (replicas + 3) / (replicas + 1),
                                                "overflow_step": overflow})
    assert [len(run["batch_losses"]) for run in runs.values()] == [5, 5], runs  # 5 whole batches each


def test_lesson_12_one_copy_is_counted_in_the_variables_made():
    """Lesson 12's `fit_under` under a CentralStorageStrategy that hands out one variable per weight but keeps a
    copy per replica behind it (2 logical CPUs): the weight is still one AggregatingVariable, so the copies
    `experimental_local_results` lists (the old measure) are 1; the variables TensorFlow made are 2 per weight,
    and the proof must fail on them."""
    run = _lesson_12_real("a copy per replica, central")
    print(run)
    assert run["kind"] == "AggregatingVariable", run  # not mirrored: what the old measure saw
    ok = OK["12_strategy_tour.ipynb"]
    namespace = {**ok, "copies": {**ok["copies"], "CentralStorage": run["copies"]},
                 "places": {**ok["places"], "CentralStorage": len(run["places"] or ["one"])}}
    holds_unless("copies per strategy", run_proof, "12_strategy_tour.ipynb", namespace)


def test_lesson_12_step_time_stops_at_the_last_batch():
    """Lesson 12's `fit_under` under OneDeviceStrategy, 40 steps, with fit's History callback sleeping 8 s at the
    timed epoch's end, after the last batch (review r4: fit's return counted in step_ms, 65/5/8 ms for identical
    work): the 39 steps timed must not hold those 8 s."""
    run = _lesson_12_real("slow teardown")
    print(run)
    assert run["step_ms"] * 39 < 8000, f"step_ms counts the epoch's end after the last batch: {run['step_ms']:.0f} ms"


LESSON_12_ASYNC = """
import json, sys
import time, keras, numpy as np, tensorflow as tf
from keras import layers
import atexit, socket, subprocess
from helpers.data import ensure_data
from tests.support.proof_cells import cell_defining
name, variant = "12_strategy_tour.ipynb", sys.argv[1]
WORKERS = int(sys.argv[2])  # PS_WORKERS
SERVE = chr(10).join([  # one role's server in a process of its own, as on the lesson's engines; it ends with its parent
    "import json, os, sys, time", "import tensorflow as tf", "parent = os.getppid()",
    "tf.distribute.Server(tf.train.ClusterSpec(json.loads(sys.argv[1])), job_name=sys.argv[2], task_index=int(sys.argv[3]),"
    " protocol='grpc', start=True)", "print('serving', flush=True)", "while os.getppid() == parent:", "    time.sleep(0.5)"])
servers = []
atexit.register(lambda: [(server.kill(), server.wait()) for server in servers])
for attempt in range(3):  # a port picked free can be taken by another program before its server binds it: new ports
    ports = []
    for _ in range(WORKERS + 1):  # free ports, held open until all are picked so that they differ
        s = socket.socket(); s.bind(("localhost", 0)); ports.append(s)
    addresses = [f"localhost:{s.getsockname()[1]}" for s in ports]
    [s.close() for s in ports]
    jobs = {"worker": addresses[:WORKERS], "ps": addresses[WORKERS:]}
    servers[:] = [subprocess.Popen([sys.executable, "-c", SERVE, json.dumps(jobs), job, str(i)], stdout=subprocess.PIPE, text=True)
                  for job, i in [("worker", w) for w in range(WORKERS)] + [("ps", 0)]]
    if [server.stdout.readline().strip() for server in servers] == ["serving"] * (WORKERS + 1):
        break
    [(server.kill(), server.wait()) for server in servers]
else:
    raise AssertionError("the servers did not start in 3 attempts")
spec = tf.train.ClusterSpec(jobs)
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
ns = {"tf": tf, "keras": keras, "layers": layers, "resolver": resolver, "LEARNING_RATE": 0.05, "LIMIT": 2048,
      "DATA_DIR": str(ensure_data(True).data_dir), "BATCH": 64, "STEPS": 40, "PS_WORKERS": WORKERS, "print": lambda *a, **k: None}
body = lambda marker: cell_defining(name, marker).split(chr(10), 1)[1]  # without its %%px_chief line
exec(cell_defining(name, "def plain_cnn"), ns)
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
loop = body("coordinator.join()  # waits for every scheduled step")
schedule = "scheduled = [coordinator.schedule(async_step, args=(per_worker_batches, p)) for p in pauses]" + chr(10)
assert loop.count(schedule) == 1
if variant.startswith("barrier"):  # a join after every PS_WORKERS steps (or 8, 11, 13): each worker then waits for the others' steps
    size = variant.split()[1] if variant != "barrier" else "PS_WORKERS"
    loop = loop.replace(schedule, "scheduled = []" + chr(10) + f"for group in range(0, STEPS, {size}):" + chr(10)
                        + f"    scheduled += [coordinator.schedule(async_step, args=(per_worker_batches, p)) for p in pauses[group:group + {size}]]"
                        + chr(10) + "    coordinator.join()" + chr(10))
if variant.startswith("in-loop"):  # a learner's form: a join inside the loop after every N steps (none after the last partial group)
    size = variant.split()[1]
    loop = loop.replace(schedule, "scheduled = []" + chr(10) + "for i, p in enumerate(pauses):" + chr(10)
                        + "    scheduled.append(coordinator.schedule(async_step, args=(per_worker_batches, p)))" + chr(10)
                        + f"    if (i + 1) % {size} == 0:" + chr(10) + "        coordinator.join()" + chr(10))
if variant.startswith("join after"):  # one join in the loop, after its first N scheduled steps (a learner's "let them start")
    size = variant.split()[2]
    loop = loop.replace(schedule, "scheduled = []" + chr(10) + "for i, p in enumerate(pauses):" + chr(10)
                        + "    scheduled.append(coordinator.schedule(async_step, args=(per_worker_batches, p)))" + chr(10)
                        + f"    if i + 1 == {size}:" + chr(10) + "        coordinator.join()" + chr(10))
if variant == "iterations, atomic":  # Keras's assign_add made TensorFlow's atomic one on this chief only, before the trace
    keras.Variable.assign_add = lambda self, value: self.value.assign_add(value)
exec(loop, ns)
exec(body("step_traces = len(traces)"), ns)  # the lesson's cell: the ops that write each variable in the traced step
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
keys = ("async_log", "staleness", "straggles", "applied_updates", "moved_updates", "optimizer_count", "forward_after_counter",
        "scheduling_s", "released_seen", "update_ops", "step_traces")
print("RESULT " + json.dumps({k: ns[k] for k in keys}))
"""


def _lesson_12_async(variant: str, workers: int = 2) -> dict:
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-c", LESSON_12_ASYNC, variant, str(workers)], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))[7:])


def _async_raw(ran: dict) -> dict:
    """What the lesson's gathering cell reads, from a run of the chief's cells: its step log, spans (as the timeline cell
    makes them), counts and pauses, beside a correct run's raw figures for the rest."""
    spans = [(start, end) for *_, start, end in ran["async_log"]]
    return {**_ps_raw(spans, [loss for loss, *_ in ran["async_log"]]), **ran}


def test_lesson_12_proof_holds_at_3_workers():
    """PS_WORKERS = 3, which the lesson offers: lesson 12's chief cells on 3 workers and a parameter server, each a
    process of its own, then its gathering cell and proof on the run. The loss check (the last 5 losses more than 3
    standard errors below the first 5) must hold for a correct run there too (22nd review, finding 1): in 8 runs here
    at 3 workers the first 5 averaged 2.52 to 2.92, the last 5 0.58 to 0.98, a fall of 8.0 to 20.9 standard errors in
    the 7 whose error was kept (docs/measured.md)."""
    ran = _lesson_12_async("as written", workers=3)
    losses = [loss for loss, *_ in ran["async_log"]]
    print("3 workers: first 5", round(sum(losses[:5]) / 5, 3), "last 5", round(sum(losses[-5:]) / 5, 3),
          "largest staleness", max(ran["staleness"]))
    cluster = {"chief": ["h:1"], "worker": ["h:2", "h:3", "h:5"], "ps": ["h:4"]}
    roles = [("chief", 0, "h", 11, None)] + [("worker", i, "h", 12 + i, "grpc://" + address)
                                             for i, address in enumerate(cluster["worker"])] + [("ps", 0, "h", 20, "grpc://h:4")]
    gather_and_prove("12_strategy_tour.ipynb", {**_async_raw(ran), "PS_WORKERS": 3, "cluster": cluster, "roles": roles})


def test_lesson_12_proof_fails_when_the_workers_wait_at_a_barrier():
    """Lesson 12's chief cells on the cluster of processes, with a `coordinator.join()` after every PS_WORKERS
    scheduled steps: each worker then waits for the others' steps. Steps still overlap (each group's) and some
    are stale, which the proof's first check passed (review r3: 20 overlapping pairs, staleness 1 at most); with
    every fourth step a straggler, no step can count more than PS_WORKERS - 1 others' updates, and the proof
    must fail on it. As written it passes (test_lesson_12_proof_fails_when_the_scheduled_steps_apply_no_update)."""
    ran = _lesson_12_async("barrier")
    print("barrier", {"staleness": ran["staleness"]})
    assert max(ran["staleness"]) <= 1, ran["staleness"]  # the barrier's bound
    holds_unless("did not train asynchronously", gather_and_prove, "12_strategy_tour.ipynb", _async_raw(ran))


@pytest.mark.parametrize("variant", ["barrier 8", "barrier 11", "barrier 14", "barrier 20", "in-loop 14"])
def test_lesson_12_proof_fails_when_the_workers_join_every_few_steps(variant):
    """Lesson 12's chief cells on the cluster of processes, with a `coordinator.join()` after every 8, 11, 14 or 20
    scheduled steps ("barrier": after every group, the last partial one too, so the loop waits for all 40 steps), or
    a learner's `if (i + 1) % 14 == 0: coordinator.join()` inside the loop ("in-loop 14": it waits for 28 of 40).
    While a group's straggler pauses, the other worker takes the group's next steps, so a step counts 2 or more
    others' updates and the proof's staleness check passes. The proof must fail on `released`: the first
    straggler's step ended before the chief set it after its loop. The in-loop join passed the proof's clock check
    as it was at the seventh review (loop 1.357 to 1.389 s, under a fixed 1.5 s; the check is now `pause_floor`, the
    stragglers' pauses shared over the workers); the barriers fail that check too."""
    ran = _lesson_12_async(variant)
    raw = _async_raw(ran)
    print(variant, {"largest staleness": max(ran["staleness"]), "schedule loop, s": round(ran["scheduling_s"], 3),
                    "steps that found every step scheduled": sum(ran["released_seen"])})
    assert max(ran["staleness"]) >= 2, ran["staleness"]  # what the staleness check asks for: it passes
    holds_unless("before the chief had scheduled every step", gather_and_prove, "12_strategy_tour.ipynb", raw)
    if variant.startswith("barrier"):  # the loop waited for every step: the chief's clock tells it too
        holds_unless("waited for the steps while scheduling", gather_and_prove, "12_strategy_tour.ipynb",
                     {**raw, "released_seen": [True] * len(ran["released_seen"])})


@pytest.mark.parametrize("variant", ["join after 1", "join after 2", "join after 3"])
def test_lesson_12_proof_fails_when_the_chief_joins_after_the_loop_s_first_steps(variant):
    """Lesson 12's chief cells on the cluster of processes, with one `coordinator.join()` in the schedule loop after its
    first 1, 2 or 3 scheduled steps. The chief then waits for those steps while scheduling, and the proof must fail
    on `released`: that wait is a join. With the first straggler at step 3 (the eighth review) these joins waited for
    fast steps only, the first straggler's step still found the flag set, and the proof passed (the lesson said so);
    with the first scheduled step a straggler, a join at any step of the loop waits for its pause."""
    ran = _lesson_12_async(variant)
    raw = _async_raw(ran)
    print(variant, {"stragglers": [i for i, p in enumerate(ran["straggles"]) if p][:3], "schedule loop, s": round(ran["scheduling_s"], 3),
                    "steps that ended before the flag": [i for i, seen in enumerate(ran["released_seen"]) if not seen]})
    holds_unless("before the chief had scheduled every step", gather_and_prove, "12_strategy_tour.ipynb", raw)


@pytest.mark.parametrize("variant,ordered", [("as written", True), ("forward unordered", False)])
def test_lesson_12_async_step_reads_the_weights_after_the_counter(variant, ordered):
    """In the traced `async_step` every weight read of the forward pass waits for the step's read of the
    counter (tf.control_dependencies; auto_control_deps orders only the ops on one variable): as written it
    does; with only the timestamp under the control dependency, as the step once was, it does not. Either way the
    lesson's cell finds the step traced once, writing optimizer.iterations and the weights by the ops the proof asks."""
    ran = _lesson_12_async(variant)
    assert ran["forward_after_counter"] is ordered
    assert ran["step_traces"] == 1 and ran["update_ops"] == OK["12_strategy_tour.ipynb"]["update_ops"], ran["update_ops"]


@pytest.mark.parametrize("variant,match", [("as written", None), ("iterations, atomic", "read then a write")])
def test_lesson_12_proof_fails_when_the_optimizer_counts_atomically(variant, match):
    """Lesson 12's chief cells on the cluster of processes, and its cell that reads the ops of the traced async_step: as
    written (Keras 3 writes optimizer.iterations by AssignVariableOp, assign(self + value), and a weight by
    AssignAddVariableOp), and with Keras's Variable.assign_add made TensorFlow's atomic assign_add on the chief: the
    count could then not fall short, the proof's bound 0 < count <= updates still passes (eleventh review, finding 1),
    and the proof must fail on the ops. The proof once read them from one apply_gradients traced in the kernel, whose
    Keras the chief's change does not touch: it passed this variant (22nd review, finding 2)."""
    ran = _lesson_12_async(variant)
    print(variant, ran["update_ops"], ran["step_traces"], "optimizer count", ran["optimizer_count"], "of", ran["applied_updates"])
    holds_unless(match, gather_and_prove, "12_strategy_tour.ipynb", _async_raw(ran))


@pytest.mark.parametrize("steps,history,match", [(121, 2.335, None), (122, 2.335, "should read nan"),
                                                 (122, float("nan"), None), (200, float("nan"), None)])
def test_lesson_12_proof_holds_fit_s_history_to_nan_past_the_overflow(steps, history, match):
    """With 2 replicas the loss tracker overflows at step 120: a run of 2 steps or more past it (workshop's 200) must
    show a history that is not finite (nan in the review's workshop run), and a finite one must fail (eleventh review,
    finding 2: never asserted); within the 2 steps' margin (121) the proof asks nothing of it."""
    ok = OK["12_strategy_tour.ipynb"]
    holds_unless(match, run_proof, "12_strategy_tour.ipynb",
                 {**ok, "STEPS": steps, "fit_loss": {**ok["fit_loss"], "CentralStorage": history}})


@pytest.mark.parametrize("replicas,steps,said", [(2, 40, False), (2, 120, True), (2, 121, True), (2, 122, False),
                                                 (9, 40, True), (10, 40, False)])
def test_lesson_12_proof_says_when_fit_s_nan_is_not_checked(replicas, steps, said):
    """fit's history under CentralStorageStrategy reads nan past the overflow step (120 at 2 replicas, 39 at 9, 37 at
    10), and the proof asks it 2 steps past it. A run that reaches that step within the margin (quick mode's 40 steps
    at 9 replicas, or 120 and 121 at 2) is not checked and the proof must say so (22nd review, finding 3: it skipped
    the check silently); a run that stops before the step (40 at 2) has no nan to check, one past the margin is checked."""
    ok = OK["12_strategy_tour.ipynb"]
    largest = (2 - 2**-23) * 2**127
    overflow = next(k for k in range(1, 401) if replicas * 64 * 2.3 * (replicas**k - 1) / (replicas - 1) > largest)
    printed = []
    run_proof("12_strategy_tour.ipynb", {**ok, "replicas": replicas, "STEPS": steps, "overflow_step": overflow,
                                         "central_mean": (replicas + 3) / (replicas + 1),
                                         "copies": {**ok["copies"], "Mirrored": replicas}, "places": {**ok["places"], "Mirrored": replicas},
                                         "fit_loss": {**ok["fit_loss"], "CentralStorage": float("nan") if steps >= overflow + 2 else 2.335},
                                         "print": lambda *a, **k: printed.append(" ".join(map(str, a)))})
    assert any(line.startswith("NOT CHECKED: fit's history") for line in printed) is said, (overflow, printed)


def test_lesson_12_the_step_it_runs_is_the_bare_step_it_shows_with_records():
    """The lesson shows a bare scheduled step (`bare_step`, defined and never scheduled) before the one it runs: every
    line of the bare step's work (the forward pass and its loss, the gradients, the apply, strategy.run on the worker's
    next batch) must be in `async_step` too, comments aside, so the step that runs is the one shown with records added."""
    def lines(source):
        return [line.split("  # ")[0].strip() for line in source.splitlines()[1:] if line.strip()]  # without %%px_chief
    bare, step = (lines(cell_defining("12_strategy_tour.ipynb", marker)) for marker in ("def bare_step", "def async_step"))
    work = [line for line in bare if not line.startswith(("@tf.function", "def bare_step", "return loss"))]
    assert len(work) == 7, work
    assert [line for line in work if line not in step] == []


@pytest.mark.parametrize("variant,match", [("as written", None), ("no update", "not one update per step"),
                                           ("every other", "not one update per step")])
def test_lesson_12_proof_fails_when_the_scheduled_steps_apply_no_update(variant, match):
    """Lesson 12's chief cells (strategy, dataset_fn, async_step, the scheduling loop) on a cluster of
    2 workers and 1 parameter server, each a process of its own, as on the lesson's engines. With `apply_gradients` deleted from `async_step`, or skipped
    under a `tf.cond` in every other step, the step counter still counts every step; the proof must fail on
    the steps whose apply moved the weights, and (no update at all), with that count, the optimizer's and the
    staleness taken from a correct run, on the loss, which no longer falls. (Without an apply nothing waits for a
    straggler's pause before its count: its staleness falls to 1, and the first step, a straggler, ends before the
    chief sets its flag; the proof fails on those first, so a correct run's `released_seen` is taken too, and the
    ops the traced step writes with: none, with no apply.)"""
    ran = _lesson_12_async(variant)
    raw = _async_raw(ran)
    assert ran["applied_updates"] == len(ran["async_log"]) + 2  # the counter counts either way
    print(variant, {k: ran[k] for k in ("applied_updates", "moved_updates", "optimizer_count", "scheduling_s")}, "largest staleness",
          max(ran["staleness"]),
          "stragglers' durations, s", [round(e - s, 2) for (s, e), p in zip(raw["async_spans"], ran["straggles"]) if p])
    holds_unless(match, gather_and_prove, "12_strategy_tour.ipynb", raw)
    if variant == "no update":  # with a correct run's counts, staleness and step spans: the loss alone
        correct = {k: OK["12_strategy_tour.ipynb"][k] for k in ("optimizer_count", "moved_updates", "staleness", "released_seen",
                                                                "update_ops", "step_traces")}
        spans = _BUSY[:len(ran["async_log"])]
        holds_unless("did not lower its loss", gather_and_prove, "12_strategy_tour.ipynb", {**raw, **correct, "async_spans": spans})


def test_lesson_12_starts_its_parameter_server_engines_with_one_gpu_at_most():
    """The cell that starts the parameter-server engines, on engines planted: it must start them with one GPU at
    most each (tests/test_engine_gpu_cap.py: what that does on a node of 8 GPUs; tests/test_engines.py: the start-up
    line says it), and set them up with TF_CONFIG, not the Slurm resolver, keeping that cap (no other given)."""
    from types import SimpleNamespace

    asked, started = [], []
    planted = SimpleNamespace(setup_multiworker=lambda **kw: asked.append(kw) or
                              [{"address": f"h:{i}", "engine": i, "gpus": ""} for i in range(4)])
    ns = {"start_engines": lambda n, **kw: started.append((n, kw)) or planted, "SLURM": None, "PS_WORKERS": 2}
    exec(cell_defining("12_strategy_tour.ipynb", "ranked = engines.setup_multiworker"), ns)
    assert started == [(4, {"slurm": None, "most_gpus": 1})], started
    assert asked == [{"use_slurm_resolver": False}], asked
    assert ns["cluster"] == {"chief": ["h:0"], "worker": ["h:1", "h:2"], "ps": ["h:3"]}


@pytest.mark.parametrize("in_sync,local,match", [([4, 4], [2, 2], None), ([2, 2], [2, 2], "did not form one cluster"),
                                                 ([2, 2], [1, 1], None), ([1, 1], [1, 1], "did not form one cluster")],
                         ids=["2 GPUs each, one cluster", "2 GPUs each, each alone", "CPU, one cluster", "CPU, each alone"])
def test_lesson_12_mwms_cluster_counts_every_device_of_every_worker(in_sync, local, match):
    """MWMS with TF_CONFIG counts each worker's GPUs times the workers (collective_all_reduce_strategy.py,
    _initialize_local_devices and _num_replicas_in_sync): on a 4-GPU node, two local engines with 2 GPUs each
    count 4 replicas. The proof must pass there, and fail where each worker counted only its own devices."""
    holds_unless(match, run_proof, "12_strategy_tour.ipynb", {**OK["12_strategy_tour.ipynb"], "sync_in_sync": in_sync,
                                                          "sync_locals": local})


@pytest.mark.parametrize("variant,match", [("solution 2", None), ("solution 2, no aggregation", "aggregation"),
                                           ("solution 2, first replica", "not the mean of the replicas"),
                                           ("solution 2, sum", "AssertionError"),
                                           ("solution 2, first replica for the variance", "moving variance is not the mean")])
def test_lesson_12_solution_2_fails_without_the_statistics_aggregation(variant, match):
    """Solution 2 on 2 logical CPUs passes; with the line giving the moving statistics an aggregation
    deleted, batch norm must fail under CentralStorageStrategy again, and the solution with it. With the
    statistics aggregated from the first replica only, the model still trains: the solution must fail on
    its moving mean, which is then replica 0's, not the replicas' mean; with "sum", it fails (either check). With
    the mean for the moving mean but the first replica's for the moving variance, it must fail on the variance."""
    failure = _lesson_12_real(variant)
    if match is None:
        assert failure is None
    else:
        assert failure and match in failure


_CHIEF_SERVES = '''if resolver.task_type == "chief":  # the chief serves every worker's and parameter server's address itself
    servers = [tf.distribute.Server(resolver.cluster_spec(), job_name=job, task_index=i, protocol="grpc", start=True)
               for job in ("worker", "ps") for i in range(resolver.cluster_spec().num_tasks(job))]
'''


@pytest.mark.multiprocess
@pytest.mark.parametrize("variant,match", [("the chief serves every role", "serve its own address")])
def test_lesson_12_proof_fails_when_the_chief_serves_every_role(variant, match):
    """Lesson 12's cells that start the parameter-server cluster (engines, TF_CONFIG per role, each role's
    server), run on 4 local engines. As written (the nbval pass runs it: the same cells and proof) each
    worker and the parameter server records the address its server bound, and the proof passes; with the
    chief starting all three servers in its own process and the others none (as LESSON_12_ASYNC's
    cluster once did, in one process), the roles are still read back from TF_CONFIG by 4 separate processes, which
    the old check took for separate roles: the proof must fail on the addresses served. In that variant a
    worker then cannot start its own server: a port binds once."""
    from types import SimpleNamespace

    from helpers.engines import start_engines

    serving = cell_defining("12_strategy_tour.ipynb", "tf.distribute.Server(").split("\n", 1)[1]  # without %%px
    started = serving.split("served = None")[1].split("role = (")[0].split("\n", 1)[1]  # the `if` that starts it
    assert started.startswith("if resolver.task_type in") and "served = server.target" in started, started
    ns = {"start_engines": start_engines, "SLURM": False, "PS_WORKERS": 2, "plain_cnn": None, "STEPS": 40, "BATCH": 64,
          "LEARNING_RATE": 0.05, "dataset": SimpleNamespace(data_dir="unused"), "sizes": SimpleNamespace(train_examples=1),
          "print": lambda *a, **k: None}
    exec(cell_defining("12_strategy_tour.ipynb", "ranked = engines.setup_multiworker"), ns)
    engines = ns["engines"]
    try:
        exec(cell_defining("12_strategy_tour.ipynb", "tf_config = {\"cluster\": cluster"), ns)
        engines.view.execute(serving if variant == "as written" else serving.replace(started, _CHIEF_SERVES), block=True)
        roles = [tuple(r) for r in engines.view.pull("role", block=True)]
        print(variant, roles, ns["cluster"])
        if variant != "as written":  # a worker's own server on the address the chief bound: refused
            worker = engines.client[ns["ranked"][1]["engine"]]
            with pytest.raises(Exception, match="Could not start gRPC server"):
                worker.execute(started.replace("served = server.target", "pass"), block=True)
        holds_unless(match, run_proof, "12_strategy_tour.ipynb",
                     {**OK["12_strategy_tour.ipynb"], "roles": roles, "cluster": ns["cluster"]})
    finally:
        engines.finish()
