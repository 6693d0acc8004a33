"""check-script's input checks, from what every step was fed: batch per replica, input sharding, steps.

Each worker records, for every `strategy.run` of the script (Keras's `fit`, its validation,
`evaluate`, `predict`, a custom loop's step function), one fingerprint per example of the batch
each step was handed, in order (`watch`): a stream per step function and phase. A stream of
the N-worker run is compared with the same stream of the one-worker run step by step: step s of
the N workers together must hold exactly the examples of step s of one worker, each once, and
every worker must run as many steps as one worker.
"""

from __future__ import annotations

from collections import Counter

from .findings import Finding
from .launch import Run


def streams(report: dict) -> dict[tuple[str, str], list[list[str]]]:
    """{(phase, step function): the batches its steps were fed, in order} of one worker's report."""
    return {(entry["phase"], entry["fn"]): entry["batches"] for entry in report.get("fed", [])}


def label(key: tuple[str, str]) -> str:
    """A stream as the learner knows it."""
    phase, fn = key
    if phase == "fit" and fn == "train_step":
        return "model.fit's training steps"
    if phase.endswith("fit>evaluate"):
        return "model.fit's validation"
    if phase in ("evaluate", "predict"):
        return f"model.{phase}"
    return f"strategy.run({fn})" if not phase else f"{phase.replace('>', ' in ')} ({fn})"


def training_key(report: dict) -> tuple[str, str] | None:
    """The stream the optimizer's steps trained on: fit's, or the script's own loop whose step
    count is the optimizer's (else its longest)."""
    found = streams(report)
    if ("fit", "train_step") in found:
        return ("fit", "train_step")
    own = {k: v for k, v in found.items() if not k[0]}
    if not own:
        return None
    matching = [k for k, v in own.items() if len(v) == report.get("steps")]
    return matching[0] if matching else max(own, key=lambda k: len(own[k]))


def _name(check: str, key: tuple[str, str], training: tuple[str, str] | None) -> str:
    return check if key == training else f"{check} ({label(key)})"


def input_findings(ref: Run, run: Run, global_batch: int, batch_flag: str) -> tuple[list[Finding], bool]:
    """Batch per replica, steps and sharding of every stream; (findings, whether the training
    steps read the same examples in both runs, so that their weights can be compared)."""
    one = ref.reports[0]
    training = training_key(one)
    ref_streams = streams(one)
    if not ref_streams:
        why = "no step of the one-worker run was fed through strategy.run"
        if one.get("not_seen"):
            why += f" ({'; '.join(one['not_seen'])})"
        to_see = ("hand each step its batch: strategy.run(step, args=(next(iterator),)); build the model in "
                  "strategy.scope() (model.fit outside it runs no strategy at all)")
        return [Finding("NOT SEEN", "batch per replica", why, to_see=to_see),
                Finding("NOT SEEN", "input sharding", why, to_see=to_see)], False
    findings: list[Finding] = []
    comparable = False
    for key in ref_streams:
        name = lambda check: _name(check, key, training)  # noqa: E731
        each = {r: streams(rep).get(key, []) for r, rep in sorted(run.reports.items())}
        batch, sizes_ok = _batch_finding(ref_streams[key], each, run.workers, global_batch if key == training
                                         else None, batch_flag, name("batch per replica"))
        findings.append(batch)
        if not sizes_ok:
            findings.append(Finding("NOT SEEN", name("input sharding"), "not compared: see the batch line above",
                                    to_see="fix the batch line above"))
            continue
        steps = _steps_finding(ref_streams[key], each, run.workers, label(key), name("steps"))
        if steps is not None:
            findings.append(steps)
        sharding, same = coverage_finding(ref_streams[key], each, name("input sharding"))
        findings.append(sharding)
        comparable |= same and key == training
    return findings, comparable


def _batch_finding(ref: list[list[str]], each: dict[int, list[list[str]]], n: int, global_batch: int | None,
                   batch_flag: str, name: str) -> tuple[Finding, bool]:
    """The examples each worker's steps held; (finding, whether the sizes are right)."""
    ref_sizes = [len(b) for b in ref]
    wrong = _steps_off_the_batch(ref, global_batch) if global_batch is not None else []
    if wrong:
        shown = ", ".join(f"step {s + 1} {ref_sizes[s]}" for s in wrong[:3]) + (", ..." if len(wrong) > 3 else "")
        return Finding("FAIL", name, f"with one worker {len(wrong)} of {len(ref)} steps did not hold the global batch "
                       f"{global_batch} that {batch_flag} {global_batch} should give ({shown} examples); only the last "
                       "step of an epoch may hold fewer",
                       f"batch the dataset by {batch_flag} (with one replica the check gives the same "
                       f"{global_batch} whether it is a global or a per-replica batch)"), False
    if any(not batches for batches in each.values()):
        idle = [r for r, b in each.items() if not b]
        return Finding("FAIL", name, f"worker(s) {', '.join(map(str, idle))} ran no step of it where one worker ran "
                       f"{len(ref)}: a step only some workers run",
                       "run every step on every worker (only file writing may depend on the chief)"), False
    steps = min(len(ref), *(len(b) for b in each.values()))
    pairs = [(ref_sizes[s], [len(each[r][s]) for r in each]) for s in range(steps)]
    if all(sum(sizes) == whole and max(sizes) - min(sizes) <= 1 for whole, sizes in pairs):
        shown = Counter(size for _, sizes in pairs for size in sizes)
        return Finding("PASS", name, f"each of the {n} workers' steps held {_sizes(shown)} examples (global batch "
                       f"{_sizes(Counter(ref_sizes))}, as one worker's)"), True
    ratio = sum(pairs[0][1]) / max(1, pairs[0][0])  # the first step: a last, shorter step shifts the others
    per_worker = pairs[0][1][0]
    if abs(ratio - n) < 0.01 and all(Counter(each[r][s]) == Counter(ref[s]) for r in each for s in range(steps)):
        why = (f"every worker was handed the same {pairs[0][0]} examples one worker was, in every step: the batch "
               f"is neither split nor sharded over the workers (a dataset the strategy did not distribute?), so a "
               f"step's gradient is {n} times one worker's and every example is read {n} times a step")
        fix = ("distribute the dataset: strategy.experimental_distribute_dataset(dataset batched by the global batch), "
               "or strategy.distribute_datasets_from_function(dataset_fn), and hand strategy.run its batches")
        return Finding("FAIL", name, why, fix), False
    if abs(ratio - n) < 0.01:
        why = (f"each worker's batch is the global batch {pairs[0][0]}: the global batch of a step is "
               f"{pairs[0][0] * n}, {n} times one worker's")
        fix = ("batch each worker's dataset by the per-replica batch: input_context.get_per_replica_batch_size("
               "global_batch), or global_batch // strategy.num_replicas_in_sync")
    elif abs(ratio - 1 / n) < 0.01:
        why = (f"each worker's steps hold {per_worker} examples, 1/{n} of the {pairs[0][0] // n} they should: the "
               "dataset handed to the strategy is batched by the per-worker batch, and the strategy splits each "
               "batch over the workers again")
        fix = ("batch the dataset you give experimental_distribute_dataset (or model.fit) by the global batch "
               "(per-worker batch x number of workers)")
    else:
        shown = Counter(size for _, sizes in pairs for size in sizes)
        why = (f"the workers' steps held {_sizes(shown)} examples where a global batch of {pairs[0][0]} over {n} "
               f"needs {pairs[0][0] // n}")
        fix = "batch by global_batch // strategy.num_replicas_in_sync (or input_context.get_per_replica_batch_size)"
    return Finding("FAIL", name, why, fix), False


def _epoch_ends(one: list[list[str]]) -> list[int]:
    """The one-worker steps (0-based) that end an epoch: every example of the stream has been read
    since the last epoch ended, or the stream ends."""
    everything = {x for batch in one for x in batch}
    read: set = set()
    ends = []
    for s, batch in enumerate(one):
        read |= set(batch)
        if read == everything or s == len(one) - 1:
            ends.append(s)
            read = set()
    return ends


def _steps_off_the_batch(ref: list[list[str]], global_batch: int) -> list[int]:
    """The one-worker steps (0-based) that held other than the global batch. A step may hold fewer
    only as the last of an epoch, where `batch` hands out what is left when the examples are not a
    whole number of global batches; a shorter step in the middle of an epoch is counted."""
    ends = set(_epoch_ends(ref))
    return [s for s, batch in enumerate(ref)
            if len(batch) > global_batch or (len(batch) < global_batch and s not in ends)]


def _sizes(sizes: Counter) -> str:
    return ", ".join(str(s) for s in sorted(sizes))


def _steps_finding(ref: list, each: dict[int, list], n: int, what: str, name: str) -> Finding | None:
    """Every worker runs as many steps as one worker over the same data and epochs."""
    counts = {r: len(b) for r, b in each.items()}
    if all(c == len(ref) for c in counts.values()):
        return None  # said by the sharding line (its steps)
    if all(c == n * len(ref) for c in counts.values()):
        return Finding("FAIL", name, f"the {n} workers ran {counts[0]} steps of {what} where one worker ran "
                       f"{len(ref)}, each step of the same global batch: the steps per epoch were computed from the "
                       f"per-worker batch, so every epoch reads the data {n} times",
                       "steps_per_epoch = examples // global_batch (the same for any number of workers)")
    return Finding("FAIL", name, f"the workers ran {', '.join(str(c) for c in counts.values())} steps of {what} "
                   f"(workers {', '.join(map(str, counts))}) where one worker ran {len(ref)}",
                   "give every worker the same number of steps, computed from the global batch")


def coverage_finding(one: list[list[str]], each: dict[int, list[list[str]]], name: str) -> tuple[Finding, bool]:
    """Whether the N workers' step s read, together, the examples the one worker's step s read;
    (finding, whether every step did). Overlap is counted in a step and over an epoch: with one
    example per worker a step, two workers rarely read one example in the same step, but workers
    that shuffled differently before a manual shard() read some of the same examples in an epoch."""
    steps = min(len(one), *(len(b) for b in each.values()))
    n = len(each)
    if not steps:
        return Finding("NOT SEEN", name, "no step was fed", to_see="a run of at least one step"), False
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
    in_epoch = epoch_overlap(one[:steps], {r: b[:steps] for r, b in each.items()})
    if same_step == steps:
        return Finding("PASS", name, f"in each of {steps} steps the {n} workers read, together, exactly the examples "
                       "one worker read, none of them twice"), True
    distinct_one = len({x for batch in one[:steps] for x in batch})
    if identical == steps:
        return Finding("FAIL", name, f"all {n} workers read the same examples in every step: the input is not "
                       f"sharded, so a step covers 1/{n} of what it should and every example is read {n} times an "
                       "epoch", "shard each worker's input: in distribute_datasets_from_function, dataset.shard("
                       "input_context.num_input_pipelines, input_context.input_pipeline_id) first; with "
                       "experimental_distribute_dataset leave auto-sharding on (no AutoShardPolicy.OFF)"), False
    if overlap or any(in_epoch):
        return Finding("FAIL", name, f"the workers' shards overlap: over {steps} steps, {len(overlap)} of the "
                       f"{distinct_one} examples {_were(len(overlap))} read by two workers in one step, and "
                       f"{_per_epoch(in_epoch)}; {len(missing)} {_were(len(missing))} missing from a step where the "
                       "one-worker run read them, neither worker reading them in it: each worker shuffled differently before a manual shard()",
                       "give shuffle the same seed on every worker, and the same global seed "
                       "(tf.random.set_seed) or none: every worker then draws one order, which shard() splits; a "
                       "shuffle after shard() with a seed per worker also reads every example once an epoch, but its "
                       "steps hold other examples than one worker's and can be compared only with --examples-flag "
                       "(an epoch of one global batch)"), False
    if missing and repeats:
        return Finding("FAIL", name, f"the workers together read only {distinct_one - len(missing)} of the "
                       f"{distinct_one} examples of an epoch, each repeating its own part: the input is sharded twice "
                       "(a manual shard() and the strategy's auto-sharding, or shard() called twice)",
                       "shard once: with experimental_distribute_dataset (and model.fit) the strategy shards for "
                       "you, drop your shard(); with distribute_datasets_from_function shard once by "
                       "input_context"), False
    return Finding("NOT SEEN", name, "the workers' steps held other examples than the one-worker run's, without "
                   "overlap: something differs per worker before the batch is made (a shuffle after sharding, or "
                   "random augmentation seeded per worker)",
                   to_see="--examples-flag (an epoch of one global batch: a shuffle cannot move an example to another "
                   "step) and the same seed for random augmentation on every worker"), False


def epoch_overlap(one: list[list[str]], each: dict[int, list[list[str]]]) -> list[set]:
    """The examples two workers read within each epoch, its steps those of one worker's epoch
    (`_epoch_ends`): a shuffle after the shard, or one order split by shard(), gives none. One set
    an epoch, so that a count is per epoch and not the union over the epochs."""
    found: list[set] = []
    start = 0
    for end in _epoch_ends(one):
        readers = Counter(x for r in each for x in {x for b in each[r][start:end + 1] for x in b})
        found.append({x for x, count in readers.items() if count > 1})
        start = end + 1
    return found


def _per_epoch(in_epoch: list[set]) -> str:
    """'12 to 13 were read by two workers within each of the 2 epochs (...)': the examples two workers
    read in one epoch, in any of its steps; a count per epoch, apart from the count in one step."""
    counts = sorted(len(found) for found in in_epoch)
    spread = str(counts[0]) if counts[0] == counts[-1] else f"{counts[0]} to {counts[-1]}"
    where = "the one epoch" if len(counts) == 1 else f"each of the {len(counts)} epochs"
    verb = _were(counts[0]) if counts[0] == counts[-1] else "were"
    return f"{spread} {verb} read by two workers within {where} (in the same step or in two steps of it)"


def _were(count: int) -> str:
    return "was" if count == 1 else "were"
