"""`python -m helpers check-script`: a learner's own training script, run small and checked.

The script runs unchanged at a toy size, once as one worker with global batch B and once as N
workers with the same global batch (local processes with `TF_CONFIG`, or the tasks of a Slurm
step), each worker under `check_worker`, which writes what it saw to a JSON file. This module
compares those files and prints one PASS / FAIL / NOT SEEN line per check, with the fix in the
script's terms. The contract and the limits are in docs/check-your-script.md.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CourseError

DEFAULT_BATCH = 12  # divisible by 1, 2, 3, 4 and 6 workers
DEFAULT_DEADLINE_S = 300.0
EPS32 = 2.0 ** -24  # float32 unit roundoff
PEER_GONE = ("UnavailableError", "CancelledError", "AbortedError", "DeadlineExceededError")  # a peer left
KERAS_FIT_SIGNS = ("Attempt to convert a value (PerReplica", "Invalid reduction dimension")


@dataclass
class Options:
    script: Path
    script_args: list[str]
    workers: list[int]
    global_batch: int
    batch_flag: str
    batch_is_global: bool
    examples_flag: str | None = None
    deadline_s: float = DEFAULT_DEADLINE_S
    slurm: bool = False
    keep: Path | None = None


@dataclass
class Run:
    """One run of the script: its workers' reports, weights and last marks."""
    workers: int
    seconds: float = 0.0
    reports: dict = field(default_factory=dict)  # rank -> worker JSON
    weights: dict = field(default_factory=dict)  # rank -> {name: array}
    last_marks: dict = field(default_factory=dict)  # rank -> last progress line
    marks: dict = field(default_factory=dict)  # rank -> every progress line
    where: dict = field(default_factory=dict)  # rank -> the script line it was last seen on
    killed: dict = field(default_factory=dict)  # rank -> why (deadline, rank N failed)
    outputs: dict = field(default_factory=dict)  # rank -> last lines the worker printed


@dataclass
class Finding:
    status: str  # PASS, FAIL, NOT SEEN
    what: str
    detail: str
    fix: str = ""

    def lines(self) -> list[str]:
        out = [f"{self.status:<8} {self.what}: {self.detail}"]
        if self.fix:
            out.append(f"         fix: {self.fix}")
        return out


# ------------------------------------------------------------------ options
def option_name(name: str | None) -> str | None:
    """`batch-size` or `--batch-size` -> `--batch-size` (argparse takes a bare dashed value for an option)."""
    return None if name is None else (name if name.startswith("-") else "--" + name)


def check_options(opts: Options) -> None:
    """One-line errors for what the user can fix before anything starts."""
    if not opts.script.is_file():
        raise CourseError(f"no script {opts.script}: give the path of your training script")
    if opts.script.suffix != ".py":
        raise CourseError(f"{opts.script} is not a Python file (.py)")
    for flag in filter(None, (opts.batch_flag, opts.examples_flag)):
        if not flag.strip("-") or any(c.isspace() for c in flag):
            raise CourseError(f"{flag!r} is not an option name: write it as your script takes it, e.g. batch-size")
        if any(a == flag or a.startswith(flag + "=") for a in opts.script_args):
            raise CourseError(f"{flag} is set by check-script (it differs between the runs): remove it after --")
    if opts.global_batch < 1:
        raise CourseError(f"--global-batch {opts.global_batch} must be at least 1")
    for n in opts.workers:
        if n < 2:
            raise CourseError(f"--workers {n}: the comparison needs 2 or more workers (1 worker always runs)")
        if opts.global_batch % n:
            raise CourseError(f"--global-batch {opts.global_batch} does not split over {n} workers: "
                              f"choose a multiple of {n}")


def script_args(opts: Options, n: int) -> list[str]:
    batch = opts.global_batch if opts.batch_is_global else opts.global_batch // n
    args = [*opts.script_args, opts.batch_flag, str(batch)]
    if opts.examples_flag:
        args += [opts.examples_flag, str(opts.global_batch)]
    return args


# ------------------------------------------------------------------ running
def worker_command(out: Path, opts: Options, n: int) -> list[str]:
    return ["-m", "helpers.tools.check_worker", str(out), str(opts.script), *script_args(opts, n)]


def _environment() -> dict:
    from .. import HUB_SECRETS
    from ..environment import PROXY_VARIABLES

    env = {k: v for k, v in os.environ.items() if k not in (*PROXY_VARIABLES, *HUB_SECRETS)}
    env.update(TF_DETERMINISTIC_OPS="1", PYTHONHASHSEED="1234", CUDA_VISIBLE_DEVICES="")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    root = str(Path(__file__).resolve().parents[2])  # the course's package, for `-m helpers.tools.check_worker`
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    return env


def run_local(opts: Options, n: int, out: Path) -> Run:
    from ..local_workers import run_local_workers

    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    outcomes = run_local_workers(worker_command(out, opts, n), n, opts.deadline_s, env=_environment())
    run = Run(workers=n, seconds=time.monotonic() - began)
    for outcome in outcomes:
        if outcome.killed_because:
            run.killed[outcome.rank] = outcome.killed_because
        run.outputs[outcome.rank] = outcome.output.strip().splitlines()[-6:]
    return read_run(run, out)


def run_slurm(opts: Options, n: int, out: Path) -> Run:
    """The N workers as the tasks of one `srun` step, one task per node (inside an allocation)."""
    srun = shutil.which("srun")
    if srun is None:
        raise CourseError("--slurm needs srun on PATH (run check-script inside an allocation, or without --slurm)")
    out.mkdir(parents=True, exist_ok=True)
    env = _environment()
    env["CHECK_SCRIPT_SLURM"] = "1"
    nodes = min(n, int(os.environ.get("SLURM_JOB_NUM_NODES") or n))  # inside an allocation: the nodes it holds
    command = [srun, f"--nodes={nodes}", f"--ntasks={n}", "--kill-on-bad-exit=1",
               f"--time={max(1, math.ceil(opts.deadline_s / 60))}", sys.executable, *worker_command(out, opts, n)]
    began = time.monotonic()
    run = Run(workers=n)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    at_deadline = None
    try:
        output, _ = proc.communicate(timeout=opts.deadline_s)
    except subprocess.TimeoutExpired:
        # the workers without a report now hung; srun passes the interrupt on to them, and one in
        # Python code (a worker waiting in time.sleep for a peer) then reports KeyboardInterrupt
        # and writes more marks: what they showed at the deadline is kept
        at_deadline = read_run(Run(workers=n), out)
        for _ in range(2):  # two interrupts within a second: srun terminates the step (srun(1))
            proc.send_signal(signal.SIGINT)
            time.sleep(0.3)
        try:
            output, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    run.outputs = {0: output.strip().splitlines()[-6:]}
    run.seconds = time.monotonic() - began
    run = read_run(run, out)
    for rank in [r for r in range(n) if at_deadline is not None and r not in at_deadline.reports]:
        run.reports.pop(rank, None)  # written by the interrupt, not by the script
        run.weights.pop(rank, None)
        run.killed[rank] = "deadline"
        run.marks[rank], run.last_marks[rank] = at_deadline.marks[rank], at_deadline.last_marks[rank]
        if rank in at_deadline.where:
            run.where[rank] = at_deadline.where[rank]
    return run


def read_run(run: Run, out: Path) -> Run:
    import numpy as np

    for rank in range(run.workers):
        report = out / f"worker-{rank}.json"
        if report.exists():
            run.reports[rank] = json.loads(report.read_text())
            run.killed.pop(rank, None)  # it finished; another rank's failure ended the run
        weights = out / f"weights-{rank}.npz"
        if weights.exists() and rank in run.reports:  # written before the report: whole only then
            with np.load(weights) as data:
                run.weights[rank] = {k: data[k] for k in data.files}
        marks = out / f"marks-{rank}.txt"
        lines = marks.read_text().strip().splitlines() if marks.exists() else []
        where = out / f"where-{rank}.txt"
        if where.exists():
            run.where[rank] = where.read_text().strip()
        run.marks[rank] = [line.split(" ", 1)[1] for line in lines]
        run.last_marks[rank] = run.marks[rank][-1] if lines else "never started the script"
    return run


# ------------------------------------------------------------------ analysis
def crash_findings(run: Run, label: str) -> list[Finding]:
    """A worker that raised, exited with an error, or was killed at the deadline."""
    findings = []
    hung = [r for r, why in run.killed.items() if why == "deadline"]
    if hung:
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
            raised = f" (raised at {exc['raised_at']})" if exc.get("raised_at") else ""
            findings.append(Finding("FAIL", f"the run with {label}", f"{who} failed{where}: "
                                    f"{exc['type']}" + (f": {message}" if message else "") + raised,
                                    "fix the error above (the run with one worker "
                                    "is the reference)" if run.workers > 1 else "the script must run alone first"))
    return findings


def hang_finding(run: Run, hung: list[int]) -> Finding:
    waiting = [r for r in hung if "waiting for every worker" in run.last_marks[r]]
    absent = [r for r in range(run.workers) if r not in waiting
              and "MultiWorkerMirroredStrategy() returned" not in _all_marks_text(run, r)]
    states = "; ".join(f"worker {r}: " + (f"still running at {run.where[r]}" if r in hung and run.where.get(r)
                                          else "still running" if r in hung else "ended")
                       + f", its last step '{run.last_marks[r]}'" for r in range(run.workers))
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


def consumed(report: dict, steps: int | None) -> list[list[str]] | None:
    """The batches of the first distributed input this worker's training consumed, in order."""
    inputs = report.get("inputs") or []
    if not inputs or steps is None:
        return None
    batches: list[list[str]] = []
    for iterator in inputs[0]["iterators"]:  # a new iterator per epoch: each read to its end (finite data)
        batches += iterator[:max(0, steps - len(batches))]
    return batches


def run_steps(run: Run) -> int | None:
    steps = [r.get("steps") for r in run.reports.values() if r.get("steps") is not None]
    return min(steps) if steps and len(steps) == len(run.reports) else None


def batch_findings(ref: Run, run: Run, opts: Options) -> tuple[list[Finding], bool]:
    """The per-replica batch each worker's steps hold; (findings, whether the sizes are right)."""
    b, n = opts.global_batch, run.workers
    steps = run_steps(run)
    ref_batches = consumed(ref.reports[0], run_steps(ref))
    if not ref_batches or steps is None or any(not consumed(run.reports[r], steps) for r in run.reports):
        return [Finding("NOT SEEN", "batch per replica", "no training step or no input distributed by the strategy "
                        "was observed (a model outside strategy.scope() makes model.fit read the dataset undistributed; see "
                        "docs/check-your-script.md: what the command cannot see)")], False
    ref_sizes = Counter(len(x) for x in ref_batches)
    if set(ref_sizes) != {b}:
        flag = "--per-replica-batch-flag" if opts.batch_is_global else "--global-batch-flag"
        return [Finding("FAIL", "batch per replica", f"with one worker the steps held {_sizes(ref_sizes)} examples, "
                        f"not the global batch {b} that {opts.batch_flag} {_value(opts, 1)} should give",
                        f"check what {opts.batch_flag} means in your script (use {flag} if it is the other kind)")], False
    expected = b // n
    wrong = {r: Counter(len(x) for x in consumed(rep, steps)) for r, rep in run.reports.items()}
    wrong = {r: sizes for r, sizes in wrong.items() if set(sizes) != {expected}}
    if not wrong:
        return [Finding("PASS", "batch per replica", f"each of the {n} workers' steps held {expected} examples "
                        f"(global batch {b}, as one worker's {b})")], True
    rank, sizes = next(iter(wrong.items()))
    seen = max(sizes)
    if seen == b:
        why = (f"each worker's batch is the global batch {b}: the global batch of a step is {b * n}, {n} times "
               "one worker's")
        fix = ("batch each worker's dataset by the per-replica batch: "
               "input_context.get_per_replica_batch_size(global_batch), or global_batch // "
               "strategy.num_replicas_in_sync")
    elif seen * n == expected:
        why = (f"each worker's steps hold {seen} examples, 1/{n} of the {expected} they should: the dataset handed "
               "to the strategy is batched by the per-worker batch, and the strategy splits each batch over the "
               "workers again")
        fix = ("batch the dataset you give experimental_distribute_dataset (or model.fit) by the global batch "
               "(per-worker batch x number of workers)")
    else:
        why = f"worker {rank}'s steps held {_sizes(sizes)} examples where a global batch of {b} over {n} needs {expected}"
        fix = "batch by global_batch // strategy.num_replicas_in_sync (or input_context.get_per_replica_batch_size)"
    return [Finding("FAIL", "batch per replica", why, fix)], False


def _sizes(sizes: Counter) -> str:
    return ", ".join(str(s) for s in sorted(sizes))


def _value(opts: Options, n: int) -> int:
    return opts.global_batch if opts.batch_is_global else opts.global_batch // n


def coverage_findings(ref: Run, run: Run) -> tuple[list[Finding], bool]:
    """Whether the N workers' step s read, together, the examples the one worker's step s read."""
    steps = min(run_steps(ref) or 0, run_steps(run) or 0)
    one = consumed(ref.reports[0], steps)
    each = {r: consumed(rep, steps) for r, rep in sorted(run.reports.items())}
    if not steps or one is None or any(b is None for b in each.values()):
        return [Finding("NOT SEEN", "input sharding", "no input distributed by the strategy was observed")], False
    n = run.workers
    identical = same_step = 0
    overlap: Counter = Counter()
    missing: set = set()
    repeats = 0
    for s in range(steps):
        parts = [Counter(each[r][s]) for r in each]
        union = sum(parts, Counter())
        if union == Counter(one[s]):
            same_step += 1
        if all(p == parts[0] for p in parts):
            identical += 1
        read_by = Counter(x for p in parts for x in set(p))
        overlap.update(x for x, count in read_by.items() if count > 1)
        missing |= set(one[s]) - set(union)
        repeats += sum(count - 1 for p in parts for count in p.values())
    if same_step == steps:
        return [Finding("PASS", "input sharding", f"in each of {steps} steps the {n} workers read, together, exactly "
                        f"the examples one worker read, none of them twice")], True
    distinct_one = len({x for batch in one for x in batch})
    if identical == steps:
        return [Finding("FAIL", "input sharding", f"all {n} workers read the same examples in every step: the input "
                        "is not sharded, so a step covers 1/{n} of what it should and every example is read {n} times "
                        "an epoch".replace("{n}", str(n)),
                        "shard each worker's input: in distribute_datasets_from_function, "
                        "dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id) first; "
                        "with experimental_distribute_dataset leave auto-sharding on (no AutoShardPolicy.OFF)")], False
    if overlap:
        return [Finding("FAIL", "input sharding", f"the workers' shards overlap: over {steps} steps, {len(overlap)} "
                        f"of the {distinct_one} examples were read by two workers in one step, and {len(missing)} "
                        "were missing from a step where one worker read them: each worker shuffled differently "
                        "before a manual shard()",
                        "shard before shuffling (dataset.shard(...) right after the source), or give shuffle the "
                        "same seed on every worker")], False
    if missing and repeats:
        return [Finding("FAIL", "input sharding", f"the workers together read only {distinct_one - len(missing)} of "
                        f"the {distinct_one} examples of an epoch, each repeating its own part: the input is "
                        "sharded twice (a manual shard() and the strategy's auto-sharding, or shard() called twice)",
                        "shard once: with experimental_distribute_dataset (and model.fit) the strategy shards for "
                        "you, drop your shard(); with distribute_datasets_from_function shard once by "
                        "input_context")], False
    return [Finding("NOT SEEN", "input sharding", "the workers' steps held other examples than the one-worker run's "
                    "(a shuffle after sharding?), without overlap: pass --examples-flag so that an epoch is one "
                    "global batch, then every step can be compared")], False


def tolerance(steps: int, batch: int) -> float:
    """Relative tolerance on the weights' displacement after `steps` steps.

    The N-worker run sums the same per-example gradients in another order (N partial means, then
    an all-reduce) than one worker's mean over B: each reduction of B float32 terms may differ by
    about B * eps (eps = 2**-24, worst case), once per layer and step, and training carries the
    difference on; 100 * steps * B * eps covers a few layers and steps with a margin and is still
    thousands of times smaller than any mistake the command names (a factor 2, a missing example).
    """
    return 100 * steps * batch * EPS32


def _displacements(ref: Run, run: Run, model: int) -> tuple | None:
    import numpy as np

    a, b = ref.weights.get(0, {}), run.weights.get(0, {})
    names = sorted(k for k in a if k.startswith(f"final_{model}_"))
    if not names or any(k not in b or k.replace("final_", "init_") not in a or a[k].shape != b[k].shape
                        for k in names):
        return None
    w1 = np.concatenate([a[k].ravel() for k in names]).astype(np.float64)
    wn = np.concatenate([b[k].ravel() for k in names]).astype(np.float64)
    w0 = np.concatenate([a[k.replace("final_", "init_")].ravel() for k in names]).astype(np.float64)
    return w0, w1, wn


def weight_findings(ref: Run, run: Run, comparable: bool, opts: Options) -> list[Finding]:
    import numpy as np

    n, steps = run.workers, run_steps(run) or 0
    report = run.reports.get(0, {})
    models = unique_models(report)
    if not models:
        return [Finding("NOT SEEN", "same weights as one worker", "no Keras model with weights was observed")]
    if not comparable:
        return [Finding("NOT SEEN", "same weights as one worker", "not compared: the runs' steps did not read the "
                        "same examples (see the input lines above)")]
    bn = [layer["name"] for _, m in models for layer in m.get("batch_norm", []) if not layer["synchronized"]]
    dropout = sorted(set(report.get("dropout_off", [])))
    tol = tolerance(steps, opts.global_batch)
    findings = []
    for index, model in models:
        found = _displacements(ref, run, index)
        if found is None:
            findings.append(Finding("NOT SEEN", "same weights as one worker", f"model '{model['name']}': the runs' "
                                    "weights cannot be paired (different shapes, or not built before training)"))
            continue
        w0, w1, wn = found
        moved = np.linalg.norm(w1 - w0)
        if moved == 0:
            findings.append(Finding("NOT SEEN", "same weights as one worker", f"model '{model['name']}' did not move "
                                    f"in {steps} steps with one worker"))
            continue
        rel = float(np.linalg.norm(wn - w1) / moved)
        ratio = float(np.dot(wn - w0, w1 - w0) / moved ** 2)
        notes = (f"; dropout turned off in {', '.join(dropout)}" if dropout else "")
        if bn:
            findings.append(Finding("NOT SEEN", "same weights as one worker", f"not exact: batch-norm layers "
                                    f"{', '.join(bn)} normalise each replica's examples alone; difference "
                                    f"{rel:.1e} of the update after {steps} steps (tolerance {tol:.1e}){notes}"))
        elif rel <= tol:
            findings.append(Finding("PASS", "same weights as one worker", f"after {steps} steps the {n} workers' "
                                    f"weights differ from one worker's by {rel:.1e} of the update (tolerance "
                                    f"{tol:.1e} = 100 x steps x batch x float32 eps){notes}"))
        elif abs(ratio - n) < 0.3 * n:
            findings.append(Finding("FAIL", "same weights as one worker", f"the {n} workers moved the weights "
                                    f"{ratio:.2f} times as far as one worker over the same {steps} steps: the loss is "
                                    "averaged over each replica's batch, and the strategy then sums the replicas' "
                                    "gradients", "divide the per-example losses by the global batch: "
                                    "tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)"))
        elif abs(ratio - 1 / n) < 0.3 / n:
            findings.append(Finding("FAIL", "same weights as one worker", f"the {n} workers moved the weights "
                                    f"{ratio:.2f} times as far as one worker: the gradients are averaged twice",
                                    "sum the per-example losses over the global batch once "
                                    "(tf.nn.compute_average_loss); do not divide by num_replicas_in_sync again"))
        else:
            findings.append(Finding("FAIL", "same weights as one worker", f"after {steps} steps the {n} workers' "
                                    f"weights differ from one worker's by {rel:.1e} of the update (tolerance "
                                    f"{tol:.1e}){notes}", "look at the other FAIL lines first; a loss or an update "
                                    "that depends on the worker or on its share of the batch does this"))
    return findings


def identical_findings(run: Run) -> list[Finding]:
    import numpy as np

    if len(run.weights) < run.workers:
        return [Finding("NOT SEEN", "identical weights on every worker", "not every worker wrote its weights")]
    names = sorted(k for k in run.weights[0] if k.startswith(("final_", "other_")))  # trainable and not
    if not names:
        return [Finding("NOT SEEN", "identical weights on every worker", "no Keras model with weights was observed")]
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


def write_findings(run: Run) -> list[Finding]:
    by_path: dict[str, set] = {}
    how: dict[str, set] = {}
    logs: dict[str, set] = {}
    for rank, report in run.reports.items():
        for path, kind in report.get("writes", []):
            by_path.setdefault(path, set()).add(rank)
            how.setdefault(path, set()).add(kind)
        for path in report.get("summary_dirs", []):
            logs.setdefault(path, set()).add(rank)
    if len(run.reports) < run.workers:
        return [Finding("NOT SEEN", "who writes", "not every worker wrote its report")]
    shared = {p: r for p, r in by_path.items() if len(r) > 1}
    shared_logs = {p: r for p, r in logs.items() if len(r) > 1}
    if shared or shared_logs:
        path, ranks = next(iter(shared.items())) if shared else next(iter(shared_logs.items()))
        what = (f"workers {', '.join(map(str, sorted(ranks)))} all write {path} ({', '.join(sorted(how.get(path, {'tf.summary'})))})"
                if shared else f"workers {', '.join(map(str, sorted(ranks)))} all write TensorBoard logs into {path}")
        more = f" (and {len(shared) + len(shared_logs) - 1} more shared paths)" if len(shared) + len(shared_logs) > 1 else ""
        return [Finding("FAIL", "who writes", what + more + ": they overwrite each other's files",
                        "write only on the chief (strategy.extended.should_checkpoint: True on the chief and in a run "
                        "alone, where task_id is None) and give the other workers "
                        "a path of their own (e.g. a temporary directory, as TensorFlow's tutorial's write_filepath "
                        "does)")]
    if not by_path and not logs:
        return [Finding("NOT SEEN", "who writes", "the script wrote no file the command observes (Python open, Keras "
                        "save/save_weights, tf.train.Checkpoint, tf.summary, tf.io.gfile)")]
    chief = sorted(p for p, r in by_path.items() if 0 in r) + sorted(logs)
    wrote = f"; the chief wrote {len(chief)} path(s) ({_short(chief)})" if chief else ""
    return [Finding("PASS", "who writes", f"no file is written by two workers{wrote}, the others only paths of "
                    "their own")]


def _short(paths: list[str]) -> str:
    shown = [os.path.basename(p.rstrip("/")) or p for p in paths[:3]]
    return ", ".join(shown) + (", ..." if len(paths) > 3 else "")


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


def analyse(ref: Run, runs: list[Run], opts: Options) -> list[tuple[str, list[Finding]]]:
    """The findings of each N-worker run against the one-worker run."""
    sections = []
    ref_failures = crash_findings(ref, "1 worker")
    if ref_failures or 0 not in ref.reports:
        if not ref_failures:
            ref_failures = [Finding("FAIL", "the run with 1 worker", "no report from the worker: "
                                    + " | ".join(ref.outputs.get(0, [])))]
        # a model outside strategy.scope() makes a custom loop's first step fail even alone: name the cause
        causes = [f for f in scope_findings(ref) if f.status == "FAIL"]
        return [("1 worker (the reference)", causes + ref_failures)]
    for run in runs:
        label = f"{run.workers} workers"
        findings = crash_findings(run, label)
        findings += scope_findings(run)
        if len(run.reports) == run.workers and not any(r.get("exception") for r in run.reports.values()):
            batch, sizes_ok = batch_findings(ref, run, opts)
            findings += batch
            coverage, comparable = coverage_findings(ref, run) if sizes_ok else (
                [Finding("NOT SEEN", "input sharding", "not checked: see batch per replica above")], False)
            findings += coverage
            findings += weight_findings(ref, run, comparable, opts)
            findings += identical_findings(run)
        if len(run.reports) == run.workers:  # writes are recorded up to a failure (e.g. two workers' checkpoint race)
            findings += write_findings(run)
        findings += batch_norm_findings(run, opts)
        sections.append((label, findings))
    return sections


# ------------------------------------------------------------------ the command
def _hosts(run: Run) -> str:
    hosts = [run.reports[r].get("host", "?") for r in sorted(run.reports)]
    return ", ".join(dict.fromkeys(hosts)) or "(no worker reported)"


def main(opts: Options) -> int:
    check_options(opts)
    began = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="check-script-")) if opts.keep is None else opts.keep
    runner = run_slurm if opts.slurm else run_local
    try:
        ref = run_local(opts, 1, scratch / "1-worker") if not opts.slurm else run_slurm(opts, 1, scratch / "1-worker")
        runs = [] if (crash_findings(ref, "1 worker") or 0 not in ref.reports) else \
            [runner(opts, n, scratch / f"{n}-workers") for n in opts.workers]
        sections = analyse(ref, runs, opts)
    finally:
        if opts.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    where = "Slurm tasks" if opts.slurm else "local processes"
    print(f"check-script {opts.script}: global batch {opts.global_batch}, {opts.batch_flag} "
          f"({'global' if opts.batch_is_global else 'per replica'}), {where}; "
          f"script options: {shlex.join(opts.script_args) or '(none)'}")
    print("  " + "; ".join(f"{r.workers} worker{'s' if r.workers > 1 else ''}: {r.seconds:.0f} s on {_hosts(r)}"
                           for r in [ref, *runs]))
    failed = False
    for label, findings in sections:
        print(f"{label}:")
        for finding in findings:
            failed |= finding.status == "FAIL"
            for line in finding.lines():
                print("  " + line)
    print(f"{'FAILED' if failed else 'passed'} in {time.monotonic() - began:.0f} s "
          "(what the command cannot see: docs/check-your-script.md)")
    return 1 if failed else 0
