"""check-script's analysis of two runs: failures and hangs, the strategy's scope, weights, batch norm, metrics, and the whole report.

The reference is the one-worker run; every N-worker run is compared with it. The input checks
live in `inputs`, "who writes" in `files`; the contract and the limits in
docs/check-your-script.md.
"""

from __future__ import annotations

from typing import NamedTuple

from .files import write_findings
from .findings import Finding
from .inputs import input_findings, training_key
from .launch import Run
from .options import Options
from .watch import ENDLESS, TF_CONFIG_REPLACED

EPS32 = 2.0 ** -24  # float32 unit roundoff
STILL_STEPPING_S = 5.0  # a last step this recent at the deadline: the worker was still training
PEER_GONE = ("UnavailableError", "CancelledError", "AbortedError", "DeadlineExceededError")  # a peer left
KERAS_FIT_SIGNS = ("Attempt to convert a value (PerReplica", "Invalid reduction dimension")


# ------------------------------------------------------------------ failures and hangs
def crash_findings(run: Run, label: str) -> list[Finding]:
    """A worker that raised, exited with an error, or was killed at the deadline."""
    findings = []
    hung = [r for r, why in run.killed.items() if why == "deadline"]
    replaced = tf_config_finding(run) if hung or any(r.get("exception") for r in run.reports.values()) else None
    if replaced:
        findings.append(replaced)  # the cause of the hang or error that follows
    elif hung:
        findings.append(hang_finding(run, hung))
    told = set()
    for rank, report in sorted(run.reports.items()):
        exc = report.get("exception")
        if not exc or (exc["type"], exc.get("line")) in told:
            continue  # the same failure on several workers: once, on the first
        told.add((exc["type"], exc.get("line")))
        same = [r for r, rep in sorted(run.reports.items()) if rep.get("exception")
                and (rep["exception"]["type"], rep["exception"].get("line")) == (exc["type"], exc.get("line"))]
        who = f"worker {rank}" if len(same) == 1 else "workers " + ", ".join(map(str, same))
        where = f" at {exc['line']} ({exc['code'].strip()})" if exc.get("line") and exc.get("code") else ""
        lines = [line.strip() for line in exc["message"].splitlines() if line.strip()]
        message = next((line for line in lines if not line.endswith(":")), lines[0] if lines else "")[:300]
        if any(sign in exc["message"] for sign in KERAS_FIT_SIGNS):
            findings.append(Finding(
                "FAIL", f"model.fit with {label}",
                f"{who} failed{where}: {exc['type']}: {message[:120]}: Keras 3's model.fit fails under "
                "MultiWorkerMirroredStrategy with 2 or more workers (keras-team/keras#20585), and this script "
                "does not carry the fix",
                "patch Keras before the strategy is made, as lesson 08's script does (fix_keras_fit_for_multiworker; "
                "docs/keras3-fit.md), or write a custom loop over strategy.run"))
        elif exc["type"] in PEER_GONE and any(not r.get("exception") for r in run.reports.values()):
            ended = [r for r, rep in sorted(run.reports.items()) if not rep.get("exception")]
            findings.append(Finding(
                "FAIL", "a collective only some workers enter", f"{who} failed{where}: {exc['type']}: a "
                f"collective its peers never joined: worker(s) {', '.join(map(str, ended))} had already ended the "
                "script",
                "run every training step, evaluate and reduce on every worker; only file writing may depend on the "
                "chief"))
        else:
            traced = f", in the traced {exc['traced']}" if exc.get("traced") else ""  # a tf.function's Python
            raised = f" (raised at {exc['raised_at']})" if exc.get("raised_at") else ""
            findings.append(Finding("FAIL", f"the run with {label}", f"{who} failed{where}: "
                                    f"{exc['type']}" + (f": {message}" if message else "") + traced + raised,
                                    "fix the error above (the run with one worker "
                                    "is the reference)" if run.workers > 1
                                    else "the script must run as one worker (the reference run) before the runs can be "
                                    "compared"))
    return findings


def tf_config_finding(run: Run) -> Finding | None:
    """A script that wrote its own TF_CONFIG (its hosts and ports, or a fixed rank) before making the
    strategy: what its workers then hang or fail on is this, not the collective they wait in."""
    found = {r: next((m for m in run.marks.get(r, []) if m.startswith(TF_CONFIG_REPLACED)), None)
             for r in range(run.workers)}
    changed = {r: mark for r, mark in found.items() if mark}
    if not changed:
        return None
    first = min(changed)
    return Finding("FAIL", "TF_CONFIG", f"worker(s) {', '.join(map(str, changed))} made the strategy from a TF_CONFIG "
                   f"the script wrote itself, not the one it was given: worker {first}'s "
                   f"{changed[first][len(TF_CONFIG_REPLACED):].strip()}; the workers wait for peers that are not "
                   "where it says (or two claim one rank)",
                   "read the cluster from the environment the launcher sets (TF_CONFIG as given, or "
                   "tf.distribute.cluster_resolver.SlurmClusterResolver under Slurm): never write TF_CONFIG in the script")


def hang_finding(run: Run, hung: list[int]) -> Finding:
    waiting = [r for r in hung if "waiting for every worker" in run.last_marks[r]]
    absent = [r for r in range(run.workers) if r not in waiting
              and "MultiWorkerMirroredStrategy() returned" not in _all_marks_text(run, r)]
    states = "; ".join(f"worker {r}: " + (f"still running at {run.where[r]}" if r in hung and run.where.get(r)
                                          else "still running" if r in hung else "ended")
                       + f", its last step '{run.last_marks[r]}'" for r in range(run.workers))
    if sorted(hung) == list(range(run.workers)) and all(_stepping_at_the_end(run, r) for r in hung):
        endless = any(ENDLESS in _all_marks_text(run, r) for r in hung)
        return Finding(
            "FAIL", "an epoch that never ends" if endless else "still training at the deadline",
            f"every worker was still taking steps when the deadline ended the run ({states})"
            + (": its data set is endless (.repeat() with no count) and an epoch over it never ends" if endless
               else ": the run needs longer than the deadline, or its loop never ends"),
            "give model.fit steps_per_epoch (and validation_steps) when the data set repeats, or repeat it a number "
            "of times; in a custom loop, end the epoch after its steps" if endless else
            "give check-script a longer --deadline, or the script fewer steps (its options after --)")
    if waiting and absent:
        names = ", ".join(map(str, absent))
        return Finding("FAIL", "hang", f"worker(s) {names} never joined: MultiWorkerMirroredStrategy() waited for "
                       f"them until the deadline ({states})",
                       f"every worker must make the strategy: look at what worker {absent[0]} did before it "
                       "(its last step above)")
    names = ", ".join(map(str, hung))
    return Finding("FAIL", "hang", f"worker(s) {names} did not finish within the deadline ({states}): a "
                   "collective (a training or evaluation step, a reduce, a save of a distributed model) that only "
                   "some workers enter never completes",
                   "run every step, evaluate and model.save on every worker; only the file writing may depend on "
                   "the chief (write elsewhere on the others)")


def _all_marks_text(run: Run, rank: int) -> str:
    return "\n".join(run.marks.get(rank, []))


def _stepping_at_the_end(run: Run, rank: int) -> bool:
    """The worker's last progress line is a training step written just before the deadline (within 5 s, or 3
    of its recent steps' intervals): it was still stepping, not waiting in a collective (whose last step is as
    old as the wait)."""
    marks, times = run.marks.get(rank, []), run.mark_times.get(rank, [])
    steps = [t for m, t in zip(marks, times) if m.startswith("step ") and "of strategy.run" in m][-11:]
    if not marks or len(times) != len(marks) or not marks[-1].startswith("step ") or not run.ended_at:
        return False
    gaps = sorted(b - a for a, b in zip(steps, steps[1:]))
    recent = max(STILL_STEPPING_S, 3 * gaps[len(gaps) // 2]) if gaps else STILL_STEPPING_S
    return run.ended_at - times[-1] <= recent



# ------------------------------------------------------------------ the strategy's scope
def unique_models(report: dict) -> list[tuple[int, dict]]:
    return [(i, m) for i, m in enumerate(report.get("models", []))
            if not m.get("same_weights_as_another") and m.get("weights")]


def scope_findings(run: Run) -> list[Finding]:
    report = run.reports.get(0)
    if not report:
        return []
    if not report.get("strategies"):
        return [Finding("FAIL", "strategy", "the script made no tf.distribute.MultiWorkerMirroredStrategy: each "
                        "worker trains alone", "make the strategy from TF_CONFIG before anything else of TensorFlow")]
    findings = []
    for _, model in unique_models(report):
        plain = not all(model.get("distributed") or [False])
        if plain or not model.get("in_scope", True):
            findings.append(Finding(
                "FAIL", "strategy.scope()", f"model '{model['name']}' (made at {model['where']}) was built outside "
                "strategy.scope(): its variables are not mirrored, so the strategy does not keep the workers' copies "
                "equal", f"build and compile the model inside `with strategy.scope():` ({model['where']})"))
        elif model.get("compiled_in_scope") is False:
            findings.append(Finding(
                "FAIL", "strategy.scope()", f"model '{model['name']}' was compiled outside strategy.scope() (at "
                f"{model.get('compiled_where')}): its optimizer and metrics are made outside the strategy",
                "call model.compile inside `with strategy.scope():` too"))
    if not findings and unique_models(report):
        names = ", ".join(m["name"] for _, m in unique_models(report))
        findings.append(Finding("PASS", "strategy.scope()", f"model(s) {names} built (and compiled) in the "
                                "scope: mirrored variables"))
    return findings



# ------------------------------------------------------------------ weights
def identical_findings(run: Run) -> list[Finding]:
    import numpy as np

    if len(run.weights) < run.workers:
        return [Finding("NOT SEEN", "identical weights on every worker", "not every worker wrote its weights",
                        to_see="a run in which every worker ends")]
    names = sorted(k for k in run.weights[0] if k.startswith(("final_", "other_")))  # trainable and not
    if not names:
        return [Finding("NOT SEEN", "identical weights on every worker", "no Keras model with weights was observed",
                        to_see="a Keras 3 model built in strategy.scope()")]
    started = _first_difference(run, "init_")
    if started is not None:
        rank, gap = started
        return [Finding("FAIL", "identical weights on every worker", f"worker {rank} started training from other "
                        f"weights than worker 0 (up to {gap:.2e} apart at the first step): weights restored or "
                        "loaded on some workers only", "restore the checkpoint (or load the weights) on every worker, "
                        "before the first step; only writing is the chief's alone")]
    worst, where = 0.0, None
    for rank in range(1, run.workers):
        for name in names:
            other = run.weights[rank].get(name)
            if other is None or other.shape != run.weights[0][name].shape:
                return [Finding("FAIL", "identical weights on every worker", f"worker {rank} has other models "
                                "than worker 0", "every worker must build the same model")]
            gap = float(np.max(np.abs(other - run.weights[0][name]))) if other.size else 0.0
            if gap > worst:
                worst, where = gap, (rank, name)
    if worst == 0:
        kept = sum(1 for k in names if k.startswith("other_"))
        return [Finding("PASS", "identical weights on every worker", f"the {run.workers} workers' weights are equal "
                        f"bit for bit ({len(names) - kept} trainable and {kept} non-trainable arrays)")]
    if where[1].startswith("other_"):
        return [Finding("FAIL", "identical weights on every worker", f"worker {where[0]}'s non-trainable weights (e.g. "
                        f"batch norm's moving statistics) differ from worker 0's by up to {worst:.2e}: each worker "
                        "updates them from its own examples alone",
                        "keep that state equal on every worker: BatchNormalization(synchronized=True), or update it "
                        "from values reduced over the replicas")]
    return [Finding("FAIL", "identical weights on every worker", f"worker {where[0]}'s weights differ from worker "
                    f"0's by up to {worst:.2e}: the workers train different models",
                    "build and compile the model in strategy.scope() and update it only through the strategy "
                    "(model.fit, or optimizer.apply_gradients inside strategy.run)")]


def _first_difference(run: Run, prefix: str) -> tuple[int, float] | None:
    """(worker, largest gap) of the first worker whose `prefix` arrays differ from worker 0's."""
    import numpy as np

    names = [k for k in run.weights.get(0, {}) if k.startswith(prefix)]
    for rank in range(1, run.workers):
        other = run.weights.get(rank, {})
        gaps = [float(np.max(np.abs(other[k] - run.weights[0][k]))) for k in names
                if k in other and other[k].shape == run.weights[0][k].shape and other[k].size]
        if gaps and max(gaps) > 0:
            return rank, max(gaps)
    return None


def batch_norm_findings(run: Run, opts: Options) -> list[Finding]:
    report = run.reports.get(0, {})
    layers = [layer for _, m in unique_models(report) for layer in m.get("batch_norm", [])]
    if not layers:
        return []
    plain = [layer["name"] for layer in layers if not layer["synchronized"]]
    per_replica = opts.global_batch // run.workers
    if not plain:
        return [Finding("PASS", "batch norm", f"{len(layers)} BatchNormalization layer(s), synchronized over the "
                        "replicas")]
    return [Finding("FAIL", "batch norm", f"layers {', '.join(plain)} compute their statistics over each replica's "
                    f"batch alone ({per_replica} examples here, not the global {opts.global_batch}): at small "
                    "per-replica batches they normalise with noisy statistics and the workers' moving means differ",
                    "keras.layers.BatchNormalization(synchronized=True) (statistics all-reduced over the replicas)")]




def run_steps(run: Run) -> int | None:
    """The optimizer steps every worker of `run` took (the fewest), or None when not every worker had one."""
    steps = [r.get("steps") for r in run.reports.values() if r.get("steps") is not None]
    return min(steps) if steps and len(steps) == len(run.reports) else None


def tolerance(steps: int, w_norm: float, moved: float) -> float:
    """Relative tolerance on the weights, ||w_N - w_1|| / ||w_1 - w_0||, after `steps` steps: float32
    rounding alone, measured against the update's own size. It has no term in the batch; it grows
    with the steps as far as the update does not keep pace with them (S ||w|| / ||w_1 - w_0||):
    for lesson 18's script 1.9e-5 at 4 steps, 2.2e-5 at 8, 3.1e-5 at 32 and 7.0e-5 at 128, as the
    loss levels off and each step moves the weights less.

    The two runs feed every step the same examples and differ only in the order of float32 sums:
    - each gradient is a sum of per-example terms, by one worker at once or by N workers in parts
      and then an all-reduce; tree reductions of up to 2**30 terms round to within about 31 eps
      of the sum of the terms' absolute values (eps = 2**-24, float32's unit roundoff), not of the
      sum itself: 64 eps, a margin of 2, is a fraction of each step's update at any batch as far as
      the per-example gradients do not cancel (where they do, more than that fraction), so of the
      whole update as far as the steps add up (steps that partly cancel make it a larger part of
      the whole: the next term grows too). The bound is not proven for gradients that cancel: what
      holds is what was measured, lesson 18's fixed script 70 to 300 times inside the tolerance and
      the correct scripts of docs/check-your-script.md at least 3 times;
    - after every step each run rounds each weight to float32: once the runs differ at all, a
      weight can land one unit in the last place apart, at most 2 eps |w|, so 2 eps S ||w|| over S
      steps, 4 eps S ||w|| with a margin of 2. Relative to the update it is 4 eps ||w|| / (||w_1 -
      w_0|| / S), float32's resolution of the weights over the mean step: it grows when the
      steps are small next to the weights, where float32 cannot tell the runs apart any better.
    Training carries a difference on from step to step and can amplify it past any bound, so the
    runs are judged step by step (`weights_finding`); every mistake the command names moves the
    weights by a large part of the update from the first step.
    """
    return 64 * EPS32 + 4 * EPS32 * steps * w_norm / moved


class Apart(NamedTuple):
    """The N workers' weights against one worker's after `step` steps: their difference and its
    tolerance, and how far the N workers moved them along one worker's update (1: as far), each
    relative to one worker's update since the first step."""
    step: int
    rel: float
    tol: float
    ratio: float


def _trail(ref: Run, run: Run, model: int, steps: int) -> list[Apart] | None:
    """How far apart the runs' weights of `model` were after each step both recorded (the first
    steps of the training stream, `worker.snapshot_weights`), then after the last; None when the
    weights cannot be paired. A step after which one worker's weights had not moved is left out."""
    import numpy as np

    a, b = ref.weights.get(0, {}), run.weights.get(0, {})
    names = sorted(k[len("final_"):] for k in a if k.startswith(f"final_{model}_"))
    if not names or any(f"final_{k}" not in b or f"init_{k}" not in a or a[f"final_{k}"].shape != b[f"final_{k}"].shape
                        for k in names):
        return None

    def flat(weights: dict, prefix: str):
        return np.concatenate([weights[prefix + k].ravel() for k in names]).astype(np.float64)

    w0 = flat(a, "init_")
    points = [(j - 1, flat(a, ours), flat(b, theirs)) for j, ours, theirs in _fed_pairs(ref, run, names, steps)]
    trail = []
    for step, w1, wn in points + [(steps, flat(a, "final_"), flat(b, "final_"))]:
        moved = float(np.linalg.norm(w1 - w0))
        if moved > 0:
            tol = tolerance(step, float(max(np.linalg.norm(w0), np.linalg.norm(w1))), moved)
            apart = float(np.linalg.norm(wn - w1)) / moved
            trail.append(Apart(step, apart, tol, float(np.dot(wn - w0, w1 - w0)) / moved ** 2))
    return trail


def _fed_pairs(ref: Run, run: Run, names: list[str], steps: int) -> list[tuple[int, str, str]]:
    """(feed j, one worker's prefix, the N workers' prefix) of the weights both runs recorded as
    the j-th step of the training stream was fed (after j - 1 steps), for j - 1 below `steps`."""
    key = training_key(ref.reports.get(0, {}))
    places = [next((i for i, e in enumerate(r.reports.get(0, {}).get("fed", [])) if (e["phase"], e["fn"]) == key),
                   None) for r in (ref, run)]
    if key is None or None in places:
        return []
    pairs, j = [], 2
    while j - 1 < steps and all(f"fed{places[0]}_{j}_{k}" in ref.weights[0] and f"fed{places[1]}_{j}_{k}" in
                                run.weights[0] for k in names):
        pairs.append((j, f"fed{places[0]}_{j}_", f"fed{places[1]}_{j}_"))
        j += 1
    return pairs


def weight_findings(ref: Run, run: Run, comparable: bool) -> list[Finding]:
    """The N workers' trained weights against one worker's, relative to one worker's update."""
    n, steps = run.workers, run_steps(run) or 0
    report = run.reports.get(0, {})
    models = unique_models(report)
    name = "same weights as one worker"
    if not models:
        return [Finding("NOT SEEN", name, "no Keras model with weights was observed",
                        to_see="a Keras 3 model (keras.Model, Sequential or functional) built in strategy.scope()")]
    if not comparable:
        return [Finding("NOT SEEN", name, "not compared: the runs' steps did not read the same examples (see the "
                        "input lines above)", to_see="fix the input lines above")]
    if run_steps(ref) != steps:
        return [Finding("NOT SEEN", name, f"not compared: one worker took {run_steps(ref)} optimizer steps, the "
                        f"{n} workers {steps}", to_see="the same number of steps in both runs (see the steps line)")]
    if _first_difference(run, "init_") is not None:
        return [Finding("NOT SEEN", name, "not compared: the workers started from different weights (see identical "
                        "weights on every worker)", to_see="the fix of the identical weights line")]
    bn = [layer["name"] for _, m in models for layer in m.get("batch_norm", []) if not layer["synchronized"]]
    dropout = sorted(set(report.get("dropout_off", [])))
    notes = (f"; dropout and random layers turned off in {', '.join(dropout)}" if dropout else "")
    findings = []
    for index, model in models:
        trail = _trail(ref, run, index, steps)
        if trail is None:
            findings.append(Finding("NOT SEEN", name, f"model '{model['name']}': the runs' weights cannot be paired "
                                    "(different shapes, or not built before the first step)",
                                    to_see="build the model before training (keras.Input, or model.build)"))
        elif not trail or trail[-1].step != steps:
            findings.append(Finding("NOT SEEN", name, f"model '{model['name']}' did not move in {steps} steps with "
                                    "one worker", to_see="a learning rate and data that move the weights"))
        elif bn:
            last = trail[-1]
            findings.append(Finding("NOT SEEN", name, f"not exact: batch-norm layers {', '.join(bn)} normalise each "
                                    f"replica's examples alone; difference {last.rel:.1e} of the update after {steps} "
                                    f"steps (tolerance {last.tol:.1e}){notes}",
                                    to_see="BatchNormalization(synchronized=True) (see the batch norm line)"))
        else:
            findings.append(weights_finding(trail, n, notes))
    return findings


def weights_finding(trail: list[Apart], n: int, notes: str) -> Finding:
    """The verdict on one model from the runs' trail, judged step by step. Both runs start from the
    same weights and are fed the same examples, so after the first step they differ by the order
    of float32 sums alone; from then on training amplifies that difference (a ReLU whose input is
    on the kink in one run and not in the other passes one example's gradient in one run only; a
    batch norm over a few examples divides by a small spread), as it would a real difference that
    starts there. So a difference past the tolerance FAILs at the first step, or when it moves
    the weights as a named mistake does; past it only later, the steps from there are NOT SEEN."""
    name, last, first = "same weights as one worker", trail[-1], trail[0]
    parted = next((apart for apart in trail if apart.rel > apart.tol), None)
    if parted is None:
        also = f"; within it after each of the first {len(trail) - 1} steps too" if len(trail) > 1 else ""
        return Finding("PASS", name, f"after {last.step} steps the {n} workers' weights differ from one worker's by "
                       f"{last.rel:.1e} of the update (tolerance {last.tol:.1e}: float32 rounding, relative to the "
                       f"update){also}{notes}")
    at_first = f" ({first.ratio:.2f} times in the first step)" if first.step == 1 and last.step > 1 else ""
    if parted is first and abs(first.ratio - n) < 0.3 * n:
        return Finding("FAIL", name, f"the {n} workers moved the weights {last.ratio:.2f} times as far as one worker "
                       f"over the same {last.step} steps, as when the loss is averaged over each replica's batch "
                       f"and the strategy then sums the replicas' gradients (the weights alone cannot tell that from "
                       f"a learning rate multiplied by the number of workers, or gradients clipped on each replica "
                       f"before the sum){at_first}",
                       "divide the per-example losses by the global batch: tf.nn.compute_average_loss("
                       "per_example_loss, global_batch_size=GLOBAL_BATCH); keep one worker's learning rate for "
                       "this global batch; clip the summed gradients, not each replica's (Keras 3's clipnorm "
                       "and global_clipnorm clip each replica's before the sum): all-reduce them in the replica "
                       "context, scale by min(1, c / tf.linalg.global_norm(summed)), then apply them")
    if parted is first and abs(first.ratio - 1 / n) < 0.3 / n:
        return Finding("FAIL", name, f"the {n} workers moved the weights {last.ratio:.2f} times as far as one worker: "
                       f"the gradients are averaged twice{at_first}", "sum the per-example losses over the global "
                       "batch once (tf.nn.compute_average_loss); do not divide by num_replicas_in_sync again")
    if parted.step == 1:
        later = f"; {last.rel:.1e} after {last.step} steps" if last.step > 1 else ""
        return Finding("FAIL", name, f"after the first step the {n} workers' weights differ from one worker's by "
                       f"{parted.rel:.1e} of the update (tolerance {parted.tol:.1e}: both runs started from the same "
                       f"weights, so no rounding was amplified yet){later}{notes}",
                       "look at the other FAIL lines first; a loss or an update that depends on the worker or on its "
                       "share of the batch does this")
    return _parted_finding(trail, trail.index(parted), n, notes)


def _parted_finding(trail: list[Apart], at: int, n: int, notes: str) -> Finding:
    """NOT SEEN from the step the runs parted at, `trail[at]`, when that was not the first: the
    steps before it are compared, the rest cannot be told from rounding amplified by training."""
    parted, last, agreed = trail[at], trail[-1], trail[:at]
    if agreed:
        before = (f"compared for {agreed[-1].step} of {last.step} steps: the {n} workers' weights equalled one "
                  f"worker's to float32 rounding after each of the first {agreed[-1].step} steps (at most "
                  f"{max(a.rel for a in agreed):.1e} of the update), then parted at step {parted.step}")
    else:
        before = f"compared only after the last step: the {n} workers' weights had parted by then"
    return Finding("NOT SEEN", "same weights as one worker",
                   f"{before} ({parted.rel:.1e}, tolerance {parted.tol:.1e}; {last.rel:.1e} after {last.step} steps): "
                   "training amplifies float32 rounding (an input on a ReLU's kink in one run only, a batch norm over "
                   "few examples) as it would a difference that starts there, and the check cannot tell them apart"
                   f"{notes}", to_see="fewer steps (fewer epochs or examples), so that every step is compared"
                   + (f" (up to {agreed[-1].step} here)" if agreed else ""))


# ------------------------------------------------------------------ metrics and returned values
def metric_findings(run: Run) -> list[Finding]:
    """Keras metrics the script made: in the scope they are read summed over the workers; outside
    it each worker's counts only what that worker saw."""
    per_worker = {r: rep.get("metrics", []) for r, rep in run.reports.items()}
    made = per_worker.get(0, [])
    if not made:
        return []
    findings = []
    for i, metric in enumerate(made):
        if metric.get("in_scope") or not any(m[i].get("updated") for m in per_worker.values() if len(m) > i):
            continue
        values = {r: m[i].get("result") for r, m in per_worker.items() if len(m) > i}
        if len(set(values.values())) > 1:
            shown = ", ".join(f"{v:.4g} on worker {r}" for r, v in sorted(values.items()) if v is not None)
            findings.append(Finding("FAIL", "metrics", f"metric '{metric['name']}' (made at {metric['where']}, outside "
                                    f"strategy.scope()) ends at {shown}: each worker's counts only its own examples, "
                                    "and what it logs is not the whole run's", "make the metric inside `with "
                                    "strategy.scope():` (its variables are then summed over the workers when read)"))
    if findings:
        return findings
    names = ", ".join(f"'{m['name']}'" for m in made)
    return [Finding("PASS", "metrics", f"metric(s) {names}: made in strategy.scope() (read summed over the workers) "
                    "or equal on every worker")]


def returned_findings(run: Run) -> list[Finding]:
    """Values strategy.run gave back to the script's own loop and never reduced over the replicas."""
    report = run.reports.get(0, {})
    if not report.get("runs") or report.get("reduces"):
        return []
    return [Finding("NOT SEEN", "values strategy.run returned", "the script's own loop got values back from "
                    "strategy.run and never reduced them (no strategy.reduce, gather or experimental_local_results): "
                    "what it logs of them (a loss, an accuracy) is each worker's own; the check cannot see what "
                    "the script does with them",
                    to_see="strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_value, axis=None) before logging")]


def watch_findings(run: Run) -> list[Finding]:
    """What the workers' wrappers could not look at (e.g. a step run under XLA, a step handed no tensor)."""
    seen = dict.fromkeys(item for rep in run.reports.values() for item in rep.get("not_seen", []))
    return [Finding("NOT SEEN", "watch", item, to_see="see docs/check-your-script.md: what it cannot see")
            for item in seen]


# ------------------------------------------------------------------ the whole report
def analyse(ref: Run, runs: list[Run], opts: Options) -> list[tuple[str, list[Finding]]]:
    """The findings of each N-worker run against the one-worker run."""
    ref_failures = crash_findings(ref, "1 worker")
    if ref_failures or 0 not in ref.reports:
        if not ref_failures:
            ref_failures = [Finding("FAIL", "the run with 1 worker", "no report from the worker: "
                                    + " | ".join(ref.outputs.get(0, [])))]
        # a model outside strategy.scope() makes a custom loop's first step fail even alone: name the cause
        causes = [f for f in scope_findings(ref) if f.status == "FAIL"]
        return [("1 worker (the reference)", causes + ref_failures)]
    sections = []
    for run in runs:
        label = f"{run.workers} workers"
        findings = crash_findings(run, label)
        findings += scope_findings(run)
        if len(run.reports) == run.workers and not any(r.get("exception") for r in run.reports.values()):
            inputs, comparable = input_findings(ref, run, opts.global_batch, opts.batch_flag)
            findings += inputs
            findings += weight_findings(ref, run, comparable)
            findings += identical_findings(run)
            findings += metric_findings(run)
            findings += returned_findings(run)
            findings += [f for f in watch_findings(run) if not any(f.detail in g.detail for g in findings)]
        if len(run.reports) == run.workers:  # writes are recorded up to a failure (e.g. two workers' checkpoint race)
            findings += write_findings(run)
        findings += batch_norm_findings(run, opts)
        sections.append((label, findings))
    return sections
