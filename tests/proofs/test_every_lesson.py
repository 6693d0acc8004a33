"""Every notebook's proof cell raises when its claim is false, and every piece of it is needed.

Each notebook ends with a cell that asserts what the lesson claims, on figures a cell before it
measured. Here that cell's own source runs on figures like those a correct run produces (it must
pass) and on figures where one claim is broken (it must raise, naming the claim), for every lesson
of the table (tests/support/proof_cases.py); the meta-tests then remove each piece of each proof, or
loosen its thresholds, and some broken case must get through, so no proof cell can silently stop
proving anything. Each lesson's own proof tests are in tests/proofs/test_lesson_NN.py."""

import math

import pytest

from tests.support.proof_cases import BROKEN, OK, planted_strategy
from tests.support.proof_cells import NOTEBOOKS, execute_proof, proof_source, run_proof


@pytest.mark.parametrize("name", sorted(OK))
def test_proof_passes_on_a_correct_run(name):
    run_proof(name, {"math": math, **OK[name]})


@pytest.mark.parametrize("name,broken,match", BROKEN, ids=[f"{n[:2]}-{m[:24]}" for n, _, m in BROKEN])
def test_proof_raises_on_a_broken_claim(name, broken, match):
    with pytest.raises(AssertionError, match=match):
        run_proof(name, {**OK[name], **broken})


def test_every_notebook_has_a_proof_cell_and_broken_variants():
    names = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert names == sorted(OK), "a notebook without a correct-run namespace here"
    for name in names:
        assert "assert" in proof_source(name), name
        asserts = proof_source(name).count("assert ")
        variants = sum(1 for n, _, _ in BROKEN if n == name)
        assert variants >= min(asserts, 2), f"{name}: {asserts} asserts, only {variants} broken variants"


def _passes(code, name: str, namespace: dict) -> bool:
    try:
        execute_proof(code, name, namespace)
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
# the correct runs measured lie 10x or more inside each bound; lesson 13's gradient gaps are held to the two scalings'
# gap its recipe measures plus the sums' order, ninth review), lesson 13's also as the review loosened them, and a
# bound of exactly zero (or a count) to
# its nearest looser form. Some broken case the proof fails must then pass, or the threshold is not shown to matter.
LOOSENED = [
    ("01_mirrored_strategy.ipynb", "updated_gap == 0", "updated_gap < 1e-6"),
    ("01_mirrored_strategy.ipynb", "moved > 0", "moved >= 0"),
    ("01_mirrored_strategy.ipynb", "slot_size > 0", "slot_size >= 0"),
    ("01_mirrored_strategy.ipynb", "moving_gap > 0", "moving_gap >= 0"),
    ("01_mirrored_strategy.ipynb", "num_replicas_in_sync >= 2:", "num_replicas_in_sync >= 3:"),  # the if-guard
    ("03_multiworker_ipyparallel.ipynb", "n >= sizes.epochs * s * max(e)", "n >= sizes.epochs * (s - 1) * max(e)"),
    ("03_multiworker_ipyparallel.ipynb", 'c["padding counted"] - c["plain accuracy"]) > 1e-6',
     'c["padding counted"] - c["plain accuracy"]) > 1e-2'),
    ("03_multiworker_ipyparallel.ipynb", "min(moved) > 0", "min(moved) >= 0"),
    ("03_multiworker_ipyparallel.ipynb", "min(means_moved) > 0", "min(means_moved) >= 0"),
    ("03_multiworker_ipyparallel.ipynb", 'c["padded"] > c["real"]', 'c["padded"] >= c["real"]'),
    # the accuracy's 1e-6 is the guard's (counting the padding moves it by more wherever it is checked): 10x lets 2.3e-6 by
    ("03_multiworker_ipyparallel.ipynb", 'c["accuracy"] - c["plain accuracy"]) < 1e-6', 'c["accuracy"] - c["plain accuracy"]) < 1e-5'),
    # the loss's 1e-4 lies under the least share of padding the lesson's sizes make (0.64 %) by 64x: 10x looser still
    # catches every size; 1e-2 lets that least share by (the rounding, 1e-8 to 1e-7 of the loss, is far below both)
    ("03_multiworker_ipyparallel.ipynb", '< 1e-4 * c["plain loss"]', '< 1e-2 * c["plain loss"]'),
    ("05_sync_batch_norm.ipynb", 'gaps["synchronized vs global"] < 1e-4', 'gaps["synchronized vs global"] < 1e-3'),
    ("05_sync_batch_norm.ipynb", 'gaps["ordinary vs own"] < 1e-4', 'gaps["ordinary vs own"] < 1e-3'),
    ("05_sync_batch_norm.ipynb", 'gaps["ordinary vs global"] > 0.1', 'gaps["ordinary vs global"] > 0.01'),
    ("05_sync_batch_norm.ipynb", "moved_sync > 0", "moved_sync >= 0"),
    ("05_sync_batch_norm.ipynb", "spread_sync == 0", "spread_sync < 1e-6"),
    ("05_sync_batch_norm.ipynb", "spread_plain > 1e-3", "spread_plain > 1e-4"),
    ("05_sync_batch_norm.ipynb", 'moving_gaps["synchronized vs global mean"] < 1e-4', 'moving_gaps["synchronized vs global mean"] < 1e-3'),
    ("05_sync_batch_norm.ipynb", 'moving_gaps["ordinary vs own mean"] < 1e-4', 'moving_gaps["ordinary vs own mean"] < 1e-3'),
    ("05_sync_batch_norm.ipynb", 'moving_gaps["ordinary vs global mean"] > 0.1', 'moving_gaps["ordinary vs global mean"] > 0.01'),
    ("05_sync_batch_norm.ipynb", 'moving_gaps["get_weights() vs replica 0"] == 0', 'moving_gaps["get_weights() vs replica 0"] < 1e-6'),
    ("05_sync_batch_norm.ipynb", 'moving_gaps["get_weights() under each device vs its copy"] == 0',
     'moving_gaps["get_weights() under each device vs its copy"] < 1e-6'),
    ("05_sync_batch_norm.ipynb", "num_replicas_in_sync > 1:", "num_replicas_in_sync > 2:"),  # the if-guard
    ("09_monitoring.ipynb", "loss_gap < 1e-6", "loss_gap < 1e-5"),
    ("09_monitoring.ipynb", "served_gap < 1e-6", "served_gap < 1e-5"),
    ("09_monitoring.ipynb", 'traced_reads["healthy"] == 0', 'traced_reads["healthy"] <= 1'),
    ("09_monitoring.ipynb", "PROFILED_STEPS * global_batch // 2", "PROFILED_STEPS * global_batch // 20"),
    ("09_monitoring.ipynb", 'shares["starved"] > 0.3', 'shares["starved"] > 0.03'),
    ("09_monitoring.ipynb", 'shares["starved"] / 4', 'shares["starved"] / 2'),  # the bound the proof once had
    ("13_from_horovod.ipynb", "n >= 2", "n >= 1"),
    ("13_from_horovod.ipynb", "sum_order = 1e-6 * n * rank_gradient_size", "sum_order = 1e-5 * n * rank_gradient_size"),
    ("13_from_horovod.ipynb", "scaling_bound = sum_order if", "scaling_bound = 10 * sum_order if"),
    ("13_from_horovod.ipynb", "(3e-5 + 2e-6 * BATCH)", "(3e-4 + 2e-5 * BATCH)"),
    ("13_from_horovod.ipynb", "(3e-5 + 2e-6 * BATCH)", "1e-2"),  # the bound it had (sixteenth review, finding 1)
    ("13_from_horovod.ipynb", "update_bound = BASE_LR * n * (scaling_gap + sum_order) + 2 * 2**-23 * weight_size",
     "update_bound = BASE_LR * n * (scaling_gap + 10 * sum_order) + 20 * 2**-23 * weight_size"),  # the update's, Horovod's
    ("13_from_horovod.ipynb", "+ 2 * 2**-23 * weight_size", "+ 1e-6"),  # the fixed term it had (twentieth review)
    ("13_from_horovod.ipynb", "share_gap < 1e-5 * max(per_rank_loss)", "share_gap < 1e-4 * max(per_rank_loss)"),
    ("13_from_horovod.ipynb", "< 1e-3 * BASE_LR * n", "< 1e-2 * BASE_LR * n"),
    ("13_from_horovod.ipynb", "< 1e-3 * BASE_LR * n", "< 0.4 * BASE_LR * n"),  # the review's
    ("13_from_horovod.ipynb", 'horovod_gaps["recipe"] < sum_order', 'horovod_gaps["recipe"] < 10 * sum_order'),
    ("13_from_horovod.ipynb", 'horovod_gaps["recipe"] < sum_order', 'horovod_gaps["recipe"] < scaling_gap + sum_order'),  # as it was
    ("13_from_horovod.ipynb", 'horovod_gaps["gradient"] < scaling_gap + 2 * sum_order', 'horovod_gaps["gradient"] < scaling_gap + 20 * sum_order'),
    ("13_from_horovod.ipynb", 'horovod_gaps["gradient"] < scaling_gap + 2 * sum_order', 'horovod_gaps["gradient"] < 1e-1 * rank_gradient_size'),  # the review's
    ("15_models_you_keep.ipynb", "not (val_loss[-1] <= val_loss[best_epoch])", "not (val_loss[-1] < val_loss[best_epoch])"),
    ("15_models_you_keep.ipynb", "<= prediction_tolerance", "<= prediction_tolerance + 1e-6"),  # 0.0 on CPUs
    ("15_models_you_keep.ipynb", "<= loss_tolerance * val_loss[", "<= 10 * loss_tolerance * val_loss["),
    ("15_models_you_keep.ipynb", "loss_tolerance * val_loss[best_epoch]", "loss_tolerance * max(1.0, val_loss[best_epoch])"),
    # lessons 04, 10 and 14: each bound loosened 10x, or a count or a zero to its nearest looser form. Not loosened,
    # bounds of rounding, not of a claim: 04's abs(loss) < inf; 10's rel_tol=1e-6 on float32 schedules; 14's
    # 1e-12 (compute plus all-reduce, one GPU at 1.0) and 1e-9 (the ring's 1.75x), float64 sums of exact terms
    ("04_custom_training_loop.ipynb", "N_ENGINES >= 2", "N_ENGINES >= 1"),
    # the cluster check as it was (first review P1: two engines each a MirroredStrategy of 2 GPUs passed it)
    ("04_custom_training_loop.ipynb", "set(in_sync) == {sum(local)}", "set(in_sync) == {in_sync[0]} and in_sync[0] >= len(in_sync)"),
    ("04_custom_training_loop.ipynb", "min(len(s) for s in seen) > 0", "min(len(s) for s in seen) >= 0"),
    ("04_custom_training_loop.ipynb", "overlap == 0", "overlap <= 1"),
    ("04_custom_training_loop.ipynb", "right_gap < 1e-5", "right_gap < 1e-4"),
    ("04_custom_training_loop.ipynb", "num_replicas_in_sync >= 2:", "num_replicas_in_sync >= 3:"),  # the if-guard
    ("04_custom_training_loop.ipynb", "100 * max(right_gap", "10 * max(right_gap"),
    ("04_custom_training_loop.ipynb", "< 0.01 * extra", "< 0.1 * extra"),
    # "twice as large" for "N times": the same at N = 2 (review r04, this round, finding 1: a 4-replica row catches it)
    ("04_custom_training_loop.ipynb", "extra = strategy.num_replicas_in_sync - 1", "extra = 1"),
    ("04_custom_training_loop.ipynb", 'underflow["float16"] == 0', 'underflow["float16"] <= 1e-8'),
    ("04_custom_training_loop.ipynb", 'scaled by 32768"] > 0', 'scaled by 32768"] >= 0'),
    ("04_custom_training_loop.ipynb", 'underflow["bfloat16"] > 0', 'underflow["bfloat16"] >= 0'),
    ("04_custom_training_loop.ipynb", '"loss scale"] == 32768', '"loss scale"] >= 16384'),
    ("04_custom_training_loop.ipynb", '"steps unscaled"] == 1', '"steps unscaled"] >= 0'),
    ("04_custom_training_loop.ipynb", '"moved vs float32"] - 1) < 0.05 for p', '"moved vs float32"] - 1) < 0.5 for p'),
    ("04_custom_training_loop.ipynb", '"moved vs float32"] == 0', '"moved vs float32"] < 0.01'),  # the bound it had
    ("04_custom_training_loop.ipynb", "abs(r - 1) < 0.1 for p", "abs(r - 1) < 1.0 for p"),  # correct runs: 4.8 % off at most
    ("04_custom_training_loop.ipynb", "abs(r - 1) < 0.05 for r in head", "abs(r - 1) < 0.5 for r in head"),  # correct: 1.0
    # lesson 07: the share of the span inside timed steps (its floor 0.9: the lesson's runs measured 0.999-1.00, the
    # test's 14 ms steps 0.96, its callback sleeping 15 % of each step after it 0.72; no ceiling: the steps lie inside),
    # the input alone's share of a step, the count of replicas; 10x or the nearest looser form
    ("07_scaling_performance.ipynb", "0.9 <= in_steps", "0.09 <= in_steps"),
    ("07_scaling_performance.ipynb", "< 0.25", "< 2.5"),
    ("07_scaling_performance.ipynb", "for p in points) >= 2", "for p in points) >= 1"),
    ("10_large_batches.ipynb", "<= 1e-6 * peak_rate[n]", "<= 1e-5 * peak_rate[n]"),  # correct runs: 0.0
    ("10_large_batches.ipynb", "shape_gap < 0.1", "shape_gap < 1.0"),  # correct runs: 2.5e-5 (quick) to 0.008 (93,120 updates)
    ("10_large_batches.ipynb", "abs_tol=one_label / 2", "abs_tol=one_label * 5"),  # the same batches: equal marks
    ("10_large_batches.ipynb", "left < gap / 4", "left < gap / 2"),  # the bound it was (correct runs: 0.8 to 9.7 %)
    ("10_large_batches.ipynb", "spread > one_label / 2", "spread >= 0"),  # marks that tell batches apart, to any marks
    # the rise without warm-up and the warm-up's fall below the starting weights (correct runs: 0.08 and 0.15 or more)
    ("10_large_batches.ipynb", "margin = 0.01", "margin = 0.001"),
    ("10_large_batches.ipynb", "margin = 0.01", "margin = 0.0"),  # the proof as it was (> 0, < 0)
    ("14_predicting_scaling.ipynb", "0.5 < ratio", "0.05 < ratio"),
    ("14_predicting_scaling.ipynb", "ratio < 2.0", "ratio < 20.0"),
    ("14_predicting_scaling.ipynb", "extra_s / 2 <", "extra_s / 20 <"),
    ("14_predicting_scaling.ipynb", "< 2 * extra_s", "< 20 * extra_s"),
    ("14_predicting_scaling.ipynb", ">= 0.9 > max(alone)", ">= 0.8 > max(alone)"),
    # lesson 12: "3 standard errors" to "any fall", fit's history's half of Mirrored's fall 10x, a count or a zero to its nearest looser form.
    # The Mean's 1e-6 is a bound of float32 rounding (5/3 holds to 2**-23 relative), loosened as the review did:
    # the Mean off by 1e-3 gets through
    ("12_strategy_tour.ipynb", "last > 3 * async_se", "last > 0 * async_se"),
    ("12_strategy_tour.ipynb", "sync_last > 3 * sync_se", "sync_last > 0 * sync_se"),
    ("12_strategy_tour.ipynb", "> 3 * loss_se[n]", "> 0 * loss_se[n]"),
    ("12_strategy_tour.ipynb", '>= fell["Mirrored"] / 2', '>= fell["Mirrored"] * 5'),
    ("12_strategy_tour.ipynb", "0 < optimizer_count", "0 <= optimizer_count"),
    ("12_strategy_tour.ipynb", "optimizer_count <= applied_updates", "optimizer_count <= applied_updates + 1"),
    ("12_strategy_tour.ipynb", "overlapping > 0", "overlapping >= 0"),
    ("12_strategy_tour.ipynb", "max(staleness) >= PS_WORKERS", "max(staleness) >= PS_WORKERS - 1"),  # a barrier's bound
    ("12_strategy_tour.ipynb", "(replicas + 1)) < 1e-6", "(replicas + 1)) < 1e-1"),  # the review's
    ("12_strategy_tour.ipynb", "replicas >= 2:", "replicas >= 3:"),  # the if-guard
    # the chief's schedule loop, under the least time the workers need for the stragglers' pauses (a join waits longer)
    ("12_strategy_tour.ipynb", "scheduling_s < pause_floor", "scheduling_s < 10 * pause_floor"),
    ("12_strategy_tour.ipynb", "released_seen[first_straggler]", "released_seen[-1]"),  # the last step alone: any join passes
    # lesson 16: batch-first parsing at least twice as fast, to faster at all (what it was: passed by chance)
    ("16_input_at_scale.ipynb", '>= 2 * rate["map, then batch"]', '> rate["map, then batch"]'),
    # lesson 07: the input's share is checked from 10 timed steps (twelfth review, finding 5: NOT CHECKED below)
    ("07_scaling_performance.ipynb", "checked = timed_steps >= 10", "checked = timed_steps >= 11"),
    # lesson 18: the two counts of its input-sharding line (eleventh review: asserted since 7f4e123)
    ("18_your_own_script.ipynb", "read_twice >= 1", "read_twice >= 0"),
    ("18_your_own_script.ipynb", "missing_in_step >= 1", "missing_in_step >= 0"),
    # lesson 06, eighth review, finding 1: the late peer's wait against twice the heartbeats' report of the death (the
    # most their timeout can be), not the report itself; and against LATE_S, not the literal 19 s it had
    ("06_fault_tolerance.ipynb", "2 * heartbeat_s < late_waited_s", "heartbeat_s < late_waited_s"),
    ("06_fault_tolerance.ipynb", "late_waited_s >= LATE_S - 1", "late_waited_s >= 19")]


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


@pytest.mark.parametrize("name,one_replica", [
    ("01_mirrored_strategy.ipynb", {"strategy": planted_strategy(1), "copies": {1}, "moving_gap": 0.0,
                                    "partial_splits": {1: [1], 2: [2]}, "expected_splits": {1: [1], 2: [2]}}),
    ("02_input_pipelines.ipynb", {"per_replica": [list(range(8))], "from_fn_per_replica": [list(range(8))],
                                  "last_split": [1], "gamma_nan": [False], "cnn_fit": "ran", "cnn_evaluate": "ran"}),
    ("04_custom_training_loop.ipynb", {"strategy": planted_strategy(1), "wrong_gap": 0.0}),
    ("12_strategy_tour.ipynb", {"replicas": 1, "central_bn_error": None, "central_mean": 2.0, "overflow_step": None,
                                "copies": {"OneDevice": 1, "Mirrored": 1, "CentralStorage": 1},
                                "places": {"OneDevice": 1, "Mirrored": 1, "CentralStorage": 1}}),
    ("05_sync_batch_norm.ipynb", {"strategy": planted_strategy(1), "spread_plain": 0.0, "all_reduces": 3,
                                  "gaps": {**OK["05_sync_batch_norm.ipynb"]["gaps"], "ordinary vs global": 1e-7}})])
def test_a_proof_on_one_replica_passes_and_says_what_it_could_not_compare(name, one_replica, capsys):
    run_proof(name, {"math": math, **OK[name], **one_replica})
    out = capsys.readouterr().out
    assert "one replica" in out
    if name in SAYS_NOT_CHECKED:  # the line tests/test_proofs_check_in_the_nbval_pass.py must not find there
        assert "NOT CHECKED (one replica)" in out, out


# lessons whose one-replica branch prints a line starting NOT CHECKED (the nbval pass, on 2 replicas, must not)
SAYS_NOT_CHECKED = {"01_mirrored_strategy.ipynb", "02_input_pipelines.ipynb", "04_custom_training_loop.ipynb",
                    "05_sync_batch_norm.ipynb", "12_strategy_tour.ipynb"}


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
