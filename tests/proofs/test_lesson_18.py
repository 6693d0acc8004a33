"""Lesson 18's proof cell (notebooks/18_your_own_script.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.proof_cells import NOTEBOOKS, cell_defining, gather_and_prove, holds_unless, solution_source


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
            "same weights as one worker": "PASS     same weights as one worker: after 8 steps ... 2.3e-07 of the update "
                                          "(tolerance ...); within it after each of the first 7 steps too",
            "identical weights on every worker": "PASS     identical weights on every worker: equal bit for bit",
            "who writes": "PASS     who writes: no file is written by two workers; the chief wrote 1 path(s) (run/ckpt), "
                          "the others only paths of their own (run/workertemp_1/ckpt)"}
_FAIL_18 = {"batch per replica": "FAIL     batch per replica: each worker's batch is the global batch 12: the global "
                                  "batch of a step is 24, 2 times one worker's",
            "input sharding": "FAIL     input sharding: the workers' shards overlap: over 8 steps, 7 of the 48 examples "
                              "were read by two workers in one step, and 12 to 13 were read by two workers within each "
                              "of the 2 epochs (in the same step or in two steps of it); 31 were missing from a step "
                              "where one worker read them: each worker shuffled differently before a manual shard()",
                              # check-script's coverage_finding on the script's orders at 12
            "who writes": "FAIL     who writes: workers 0, 1 all write /x/run/ckpt (tf.train.Checkpoint): they overwrite ..."}
_MARKS_18 = ("1795937582.700 script starting\n1795937583.112 distribute_datasets_from_function at train.py:51\n"
             "1795937583.988 script raised AssertionError\n1795937584.010 report written\n")  # as kept, the first check
_STEPS_18 = "".join(f"1795937600.{k} step {k} of strategy.run(step) in the script: 12 examples\n" for k in range(1, 9))
_RAN_18 = "1795937590.100 script starting\n" + _STEPS_18 + "1795937601.000 script ended\n1795937601.010 report written\n"
_WORKERS_18 = ["1-worker/marks-0.txt", "2-workers/marks-0.txt", "2-workers/marks-1.txt"]
_FIX_18 = "           fix: what to change"


def _sharding_18(*lines: str) -> dict:
    """The "batch fixed" check's output: every line but the input sharding's as it passes, then `lines` (the input
    sharding's as given, and any more)."""
    return {"batch fixed": (1, _check_18(*[_PASS_18[n] for n in _PASS_18 if n != "input sharding"], *lines))}


def _steps_line_18(*steps: int) -> str:
    """The fixed script's weights line as check-script's own analysis prints it for the runs compared after `steps`
    (the last: the end), each within the tolerance (eleventh review, finding 1: after step 1 and at the end only,
    as with worker.STEP_BYTES = 1, the line says "within it after each of the first 1 steps too")."""
    from helpers.commands.check_script.analysis import Apart, weights_finding

    return "\n  ".join(weights_finding([Apart(s, 2.3e-07, 2.2e-05, 1.0) for s in steps], 2, "").lines())


_RAISED_18 = "tensorflow/python/distribute/mirrored_strategy.py:806, in _update: assert isinstance(var, values.DistributedVariable)"


def _as_written_18(workers: int = 1, error: str = "AssertionError", raised: str = _RAISED_18,
                   at: str = "train.py:53 (loss = train_step(batch))", traced: str = "train_step at train.py:47") -> str:
    return _check_18("FAIL     strategy.scope(): model 'sequential' (made at train.py:31) was built outside "
                     "strategy.scope(): its variables are not mirrored", _FIX_18,
                     f"FAIL     the run with 1 worker: worker 0 failed at {at}: {error}, in the traced {traced} "
                     f"(raised at {raised})", workers=workers)


_NOT_COMPARED_18 = ("NOT SEEN input sharding: not compared: see the batch line above",
                    "NOT SEEN same weights as one worker: not compared: the runs' steps did not read the same examples")
_PARTED_18 = ("NOT SEEN same weights as one worker: compared for 3 of {steps} steps: the 2 workers' weights equalled one "
              "worker's to float32 rounding after each of the first 3 steps (at most 3.4e-06 of the update), then parted "
              "at step 4 (7.4e-05, tolerance 6.4e-06; 3.2e-02 after {steps} steps)")  # as printed at GLOBAL_BATCH = 2
_CHIEF_LEFT_18 = ["run/ckpt.data-00000-of-00001", "run/ckpt.index"]
_CKPT_18 = {"ckpt.data-00000-of-00001": b"weights", "ckpt.index": b"index"}  # run/ckpt as a worker wrote it (scope fix)
_DIFFER_18 = ("FAIL     identical weights on every worker: worker 1's trainable weights differ from worker 0's by up to "
              "3.1e-01")  # what the check prints when the workers' weights differ at exit
_NOTES_18 = b"lr 0.1 looked best\n"  # the learner's file in the real run/ (cell 3)
_AS_MADE_18 = ({"run": 1795937500000000000}, {"run/notes.txt": _NOTES_18})  # run_state() of the run/ cell 3 made


def _run_seen_18(*effects) -> list:
    """Cell 11's RUN_SEEN over the five checks: run_state() of the real run/ before and after each, each check's
    before its predecessor's after. `effects` gives, check by check (the rest leave run/ as it is), what one did to
    it: (whether a directory's modification time moved, the files it then held), or None: run/ gone."""
    seen, state = [], _AS_MADE_18
    for k in range(5):
        effect = effects[k] if k < len(effects) else (False, state[1])
        after = ({}, {}) if effect is None else ({d: t + 1_000_000 * effect[0] for d, t in state[0].items()}, effect[1])
        seen.append((state, after))
        state = after
    return seen


_KEPT_18 = (False, {"run/notes.txt": _NOTES_18})  # a check that left run/ as it was
_TOUCHED_18 = (True, {"run/notes.txt": _NOTES_18})  # an entry made in run/ and removed again: only the time moved
_FIRST_ALONE_18 = ('  File "/x/train.py", line 26, in dataset_fn\n    dataset = dataset.shuffle(len(x), seed=args.seed + '
                   "task_id)  # each worker its own order\nTypeError: unsupported operand type(s) for +: 'int' and "
                   "'NoneType'\n")


def _checks_18(**changes) -> dict:
    """The five checks lesson 18 runs, as `check` returned them: (exit status, what the command printed, each
    worker's kept marks by run). Each key of `changes` replaces one; a replacement without marks gets the
    check's usual ones (the first check's one worker raised before any step, every later worker ran to the end)."""
    def report(failing: dict, seen: dict) -> str:
        return _check_18(*[failing.get(n) or seen.get(n) or _PASS_18[n] for n in _PASS_18], _FIX_18)

    not_seen = {"input sharding": "NOT SEEN input sharding: not compared: see the batch line above",
                "same weights as one worker": "NOT SEEN same weights as one worker: not compared: the runs' steps did "
                                              "not read the same examples (see the input lines above)"}
    checks = {
        "as written": (1, _as_written_18()),
        # both workers wrote run/ckpt, each in a working directory of its own (no race): every check ran
        "scope fixed": (1, report({"batch per replica": _FAIL_18["batch per replica"],
                                   "who writes": _FAIL_18["who writes"]}, not_seen)),
        "checkpoint fixed": (1, report({"batch per replica": _FAIL_18["batch per replica"]}, not_seen)),
        "batch fixed": (1, report({"input sharding": _FAIL_18["input sharding"]},
                                  {"same weights as one worker": not_seen["same weights as one worker"]})),
        "seed fixed": (0, report({}, {}))}
    checks = {**checks, **changes}
    return {label: value if len(value) == 3 else (*value, {"1-worker/marks-0.txt": _MARKS_18} if label == "as written"
                                                   else dict.fromkeys(_WORKERS_18, _RAN_18))
            for label, value in checks.items()}


@pytest.mark.parametrize("changes,script,match", [
    ({}, "import tensorflow as tf\nimport keras\n", None),
    # the check called the planted shuffle NOT SEEN instead of naming it
    (_sharding_18("NOT SEEN input sharding: the workers' steps held other examples"),
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
     "import tensorflow as tf\n", "before any step of strategy.run ran"),
    # second review, finding 6: the one worker ran to the end of the script, no step marked (no AssertionError raised)
    ({"marks": _MARKS_18.replace("script raised AssertionError", "script ended")}, "import tensorflow as tf\n",
     "before any step of strategy.run ran"),
    # second review, finding 4: the check's step mark renamed (or no longer written): no check marks any step, so the
    # first check's absence of one proves nothing
    ({"step mark": "batch"}, "import tensorflow as tf\n", "mark each step of strategy.run"),
    # second review, finding 5: the same AssertionError from mirrored_strategy.py, at the checkpoint, not the first step
    ({"as written": (1, _as_written_18(at='train.py:58 (checkpoint.write(os.path.join(args.out, "ckpt")))'))},
     "import tensorflow as tf\n", "stopped at the one-worker run"),
    # second review, finding 9: with only the batch and the shuffle mistakes left, a worker's script stopped early
    # (sys.exit(0) after its first epoch: no exception, no failure line), or a worker left no marks
    ({"kept": {"batch fixed": {"2-workers/marks-1.txt": _RAN_18.replace("script ended", "script exited with status 0")}}},
     "import tensorflow as tf\n", "train to the end"),
    ({"kept": {"checkpoint fixed": {"2-workers/marks-1.txt": None}}}, "import tensorflow as tf\n", "train to the end"),
    # with only the batch and the shuffle mistakes left: a worker ended without its weights, or a run failed
    ({"batch fixed": (1, _check_18(*[_PASS_18[n] for n in _PASS_18 if n not in ("input sharding", "identical weights "
                                                                                   "on every worker")],
                                   _FAIL_18["input sharding"], "NOT SEEN identical weights on every worker: not every "
                                   "worker wrote its weights"))}, "import tensorflow as tf\n", "train to the end"),
    (_sharding_18(_FAIL_18["input sharding"],
                  "FAIL     the run with 2 workers: worker 1 failed at train.py:58"),
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
    ({"alone stdout": "worker 0, epoch 0: loss 1.3427\n"}, "import tensorflow as tf\n", "task_id should be None"),
    # third review, finding 1: a chief-only write (worker 1 wrote nothing at all) passed; worker 1 left a checkpoint
    # in its working directory, or one landed in the directory the check ran in
    ({"checkpoint fixed": (1, _check_18(_PASS_18["strategy.scope()"], _FAIL_18["batch per replica"],
                                        *_NOT_COMPARED_18, _PASS_18["identical weights on every worker"],
                                        "PASS     who writes: no file is written by two workers; the chief wrote 1 "
                                        "path(s) (run/ckpt), the others none", _FIX_18))},
     "import tensorflow as tf\n", "turn its FAIL line to PASS"),
    ({"left": {"cwd-0": _CHIEF_LEFT_18, "cwd-1": ["run/ckpt.data-00000-of-00001", "run/ckpt.index"]}},
     "import tensorflow as tf\n", "only the chief should leave a checkpoint"),
    # fourth review, finding 5: check-script before da9c3db linked an existing run/ into each worker's directory, and a
    # check with the real run/ present (measured: old code, fixed script) left the chief's checkpoint in it; the
    # learner's notes.txt changed, or run/ gone
    ({"run seen": _run_seen_18(_KEPT_18, *[(True, {"run/notes.txt": _NOTES_18, "run/ckpt.data-00000-of-00001": b"d",
                                                  "run/ckpt.index": b"i"})] * 4)},
     "import tensorflow as tf\n", "only the chief should leave a checkpoint"),
    ({"run seen": _run_seen_18(*[_KEPT_18] * 4, (False, {"run/notes.txt": b"overwritten\n"}))}, "import tensorflow as tf\n",
     "only the chief should leave"),
    ({"run seen": _run_seen_18(*[_KEPT_18] * 4, None)}, "import tensorflow as tf\n", "only the chief should leave a checkpoint"),
    # seventh review, finding 2: worker 1 stood in the real directory from the checkpoint fix on (launch skipping its
    # chdir): its run/workertemp_1, made and removed, left every file as it was and only moved run/'s modification time;
    # finding 3: a check's write into run/ removed by a later check (the real run/ read only after the last one passed
    # both); check() no longer recording run/ (no reading, nothing compared)
    ({"run seen": _run_seen_18(_KEPT_18, _KEPT_18, _TOUCHED_18, _TOUCHED_18, _TOUCHED_18)}, "import tensorflow as tf\n",
     "only the chief should leave a checkpoint"),
    ({"run seen": _run_seen_18(_KEPT_18, (True, {"run/notes.txt": _NOTES_18, "run/ckpt.index": b"i"}), _TOUCHED_18)},
     "import tensorflow as tf\n", "only the chief should leave a checkpoint"),
    ({"run seen": []}, "import tensorflow as tf\n", "only the chief should leave a checkpoint"),
    # sixth review, finding 8: worker 1 writes run/workertemp_1 and removes it, so what it left shows nothing of where
    # it wrote: its run/ must be a directory of its own, not a link to the learner's run/
    ({"worker1 own run": False}, "import tensorflow as tf\n", "only the chief should leave a checkpoint"),
    # third review, finding 2: the checkpoint fix's check compared the examples (a PASS) instead of saying NOT SEEN
    ({"checkpoint fixed": (1, _check_18(_PASS_18["strategy.scope()"], _FAIL_18["batch per replica"],
                                        _PASS_18["input sharding"], _NOT_COMPARED_18[1],
                                        _PASS_18["identical weights on every worker"], _PASS_18["who writes"], _FIX_18))},
     "import tensorflow as tf\n", "should be NOT SEEN"),
    # third review, finding 3: another global batch, as the lines say it (passes), or lines that still say 12
    ({"global batch": (24, True)}, "import tensorflow as tf\n", None),
    ({"global batch": (24, False)}, "import tensorflow as tf\n", "name each planted mistake"),
    # third review, finding 5: the traced frame named is the step's own (line 45), not train_step's strategy.run line
    ({"as written": (1, _as_written_18(traced="step at train.py:45"))}, "import tensorflow as tf\n",
     "stopped at the one-worker run"),
    # third review, finding 7: the script as written, run alone, ran (a seed without task_id) or failed otherwise
    ({"first alone": (0, "worker None, epoch 0\n")}, "import tensorflow as tf\n", "stop at args.seed \\+ task_id"),
    ({"first alone": (1, 'File "train.py", line 26, in dataset_fn\n    dataset = dataset.shuffle(len(x), '
                         'seed=args.seed + task_id)\nValueError: bad seed')}, "import tensorflow as tf\n",
     "stop at args.seed \\+ task_id"),
    # fifth review, finding 4: the first stop's AssertionError carried a message (the lesson says a bare one)
    ({"as written": (1, _as_written_18(error="AssertionError: var must be a DistributedVariable"))},
     "import tensorflow as tf\n", "stopped at the one-worker run"),
    # fifth review, finding 5: after the scope fix the check printed only its scope and writes lines; or both FAIL
    # lines but no other; or the batch line passed; or, later, a check printed no line (who writes)
    ({"scope fixed": (1, _check_18(_PASS_18["strategy.scope()"], _FAIL_18["who writes"], _FIX_18))},
     "import tensorflow as tf\n", "two lines should fail"),
    ({"scope fixed": (1, _check_18(_PASS_18["strategy.scope()"], _FAIL_18["batch per replica"], _FAIL_18["who writes"],
                                   _FIX_18))}, "import tensorflow as tf\n", "train to the end"),
    ({"scope fixed": (1, _check_18(*[_FAIL_18["who writes"] if n == "who writes" else _PASS_18[n] for n in _PASS_18],
                                   _FIX_18))}, "import tensorflow as tf\n", "two lines should fail"),
    ({"batch fixed": (1, _check_18(*[_PASS_18[n] for n in _PASS_18 if n not in ("input sharding", "who writes")],
                                   _FAIL_18["input sharding"]))}, "import tensorflow as tf\n", "train to the end"),
    # issue 53: the fixed script's weights parted from one worker's after a later step (rounding amplified, or a
    # mistake that starts there): NOT SEEN, compared for K of S steps, exit 3: no pass
    ({"seed fixed": (3, _check_18(*[_PASS_18[n] for n in _PASS_18 if n != "same weights as one worker"],
                                  _PARTED_18.format(steps=8)))}, "import tensorflow as tf\n", "should pass every check"),
    # eighth review, finding 6: the first stop raised in mirrored_strategy.py, but not by _update's assert (another
    # assert of the same file, as a jit-compiled step on GPUs would reach)
    ({"as written": (1, _as_written_18(raised="tensorflow/python/distribute/mirrored_strategy.py:849, in "
                                              "_replica_ctx_update: assert replica_context"))},
     "import tensorflow as tf\n", "stopped at the one-worker run"),
    # eighth review, finding 7: the workers' weights differed (their checkpoints then not the same bytes) after the
    # checkpoint fix; or after the scope fix (a third FAIL line there: the two-lines assert catches it first)
    ({"checkpoint fixed": (1, _check_18(_PASS_18["strategy.scope()"], _FAIL_18["batch per replica"], *_NOT_COMPARED_18,
                                        _DIFFER_18, _PASS_18["who writes"], _FIX_18))},
     "import tensorflow as tf\n", "the workers' weights be identical"),
    ({"scope fixed": (1, _check_18(_PASS_18["strategy.scope()"], _FAIL_18["batch per replica"], *_NOT_COMPARED_18,
                                   _DIFFER_18, _FAIL_18["who writes"], _FIX_18))},
     "import tensorflow as tf\n", "two lines should fail"),
    # tenth review, finding 2: after the scope fix each worker wrote its rank into its checkpoint (a tf.Variable(task_id)
    # the checkpoint tracks: measured, identical weights PASS and both files differ); the check kept no checkpoint
    # (nothing compared); worker 1's lacked its data file
    ({"checkpoints": {"cwd-0": {"ckpt.data-00000-of-00001": b"weights, rank 0", "ckpt.index": b"index, rank 0"},
                      "cwd-1": {"ckpt.data-00000-of-00001": b"weights, rank 1", "ckpt.index": b"index, rank 1"}}},
     "import tensorflow as tf\n", "the same bytes"),
    ({"checkpoints": {}}, "import tensorflow as tf\n", "the same bytes"),
    ({"checkpoints": {"cwd-0": _CKPT_18, "cwd-1": {"ckpt.index": b"index"}}}, "import tensorflow as tf\n", "the same bytes"),
    # eleventh review, finding 1: the fixed script's weights compared after every step (the check's own line for 8
    # steps passes); after step 1 and at the end only (worker.STEP_BYTES = 1: "first 1 steps"), a PASS all the same
    ({"seed fixed": (0, _check_18(*[_PASS_18[n] for n in _PASS_18 if n != "same weights as one worker"],
                                  _steps_line_18(*range(1, 9))))}, "import tensorflow as tf\n", None),
    ({"seed fixed": (0, _check_18(*[_PASS_18[n] for n in _PASS_18 if n != "same weights as one worker"],
                                  _steps_line_18(1, 8)))}, "import tensorflow as tf\n", "after each of its first 7 steps"),
    # eleventh review, finding 4: the scope line named the model but not where it was made (the check's "made at ?")
    ({"as written": (1, _as_written_18().replace("(made at train.py:31)", "(made at ?)"))}, "import tensorflow as tf\n",
     "name each planted mistake"),
    # eleventh review, finding 5: the seed mistake's line with no example read by both workers in one step (only over
    # an epoch), or reworded so that its counts are not read
    (_sharding_18(_FAIL_18["input sharding"].replace("7 of the 48", "0 of the 48")),
     "import tensorflow as tf\n", "read by both workers in one step"),
    (_sharding_18("FAIL     input sharding: the workers' shards overlap: each worker shuffled "
                  "differently before a manual shard()"),
     "import tensorflow as tf\n", "read by both workers in one step"),
    # twelfth review, findings 2 and 3: the line as printed before (the per-epoch count in brackets, as if of one step)
    # is no longer read; an epoch in which no example was read by both workers; at B = 4 (1 in one step), as measured
    (_sharding_18("FAIL     input sharding: the workers' shards overlap: over 8 steps, 7 of the 48 "
                  "examples were read by two workers in one step (12 to 13 in each of the 2 epochs), "
                  "and 31 were missing from a step where the one-worker run read them, neither worker "
                  "reading them in it"),
     "import tensorflow as tf\n", "read by both workers in one step"),
    (_sharding_18(_FAIL_18["input sharding"].replace("12 to 13 were", "0 to 13 were")),
     "import tensorflow as tf\n", "in every epoch 12 or 13 of the 48 examples"),
    # thirteenth review, finding W: dataset.shuffle(4, seed=args.seed + task_id) printed "10 to 13": about a quarter
    # (two random halves of 48 share 12 on average) is 12 or 13 with this TensorFlow's shuffle; one count, 12, passes
    (_sharding_18(_FAIL_18["input sharding"].replace("12 to 13 were", "10 to 13 were")),
     "import tensorflow as tf\n", "in every epoch 12 or 13 of the 48 examples"),
    (_sharding_18(_FAIL_18["input sharding"].replace("12 to 13 were", "12 to 14 were")),
     "import tensorflow as tf\n", "in every epoch 12 or 13 of the 48 examples"),
    (_sharding_18(_FAIL_18["input sharding"].replace("12 to 13 were", "12 were")),
     "import tensorflow as tf\n", None),
    (_sharding_18(_FAIL_18["input sharding"].replace("over 8 steps, 7 of the 48 examples were",
                                                     "over 24 steps, 1 of the 48 examples was")),
     "import tensorflow as tf\n", None)],
    ids=["as printed", "shuffle not seen", "compiled, not built", "batch norm fails", "writes not seen",
         "fix not checked", "no 2-worker run", "imports helpers", "only a log shared", "first went on",
         "first another error", "alone wrote nothing", "alone failed", "worker 1 the chief", "base names only",
         "named by keras", "a step ran first", "no step, no raise", "step mark renamed", "raised at the checkpoint",
         "a worker exited early", "a worker left no marks", "weights not kept", "a run failed", "no step of 24", "import os, helpers",
         "importlib", "__import__", "alone had a task", "chief-only write", "worker 1 left a checkpoint",
         "pre-fix: the real run/ written", "notes.txt changed", "run/ gone", "worker 1 in the real run/",
         "a check's write removed later", "run/ not read", "worker 1's run/ a link", "examples compared", "global batch 24", "global batch 24 said 12",
         "traced at the step", "as written ran alone", "as written failed otherwise", "assert with a message",
         "scope fixed: 2 lines only", "scope fixed: no other line", "scope fixed: batch passed", "a check's line missing",
         "fixed: weights parted later", "raised by another assert", "weights differ after the checkpoint fix",
         "weights differ after the scope fix", "rank in the checkpoint", "no checkpoint kept", "worker 1's data missing",
         "weights every step", "weights after step 1 only", "made at ?", "no same-step overlap", "overlap not counted",
         "the line as printed before", "an epoch without overlap", "shuffle(4): 10 to 13", "12 to 14",
         "12 in each epoch", "1 in one step (B = 4)"])
def test_lesson_18_gathering_cell_reads_what_the_checks_printed(tmp_path, changes, script, match):
    """The gathering cell parses the command's own lines: each planted mistake named by its check's FAIL
    line with the planted cause, that check PASS at the next run (the chief's checkpoint at run/ckpt),
    every check PASS at the end; the first stop from its line and the worker's kept marks; the script's
    imports with ast; the run alone's task_id from what it printed, its checkpoint from its directory."""
    import ast
    import re

    changes = dict(changes)
    left = changes.pop("left", {"cwd-0": _CHIEF_LEFT_18, "cwd-1": []})  # what the checkpoint fix's workers left
    ckpts = changes.pop("checkpoints", {"cwd-0": _CKPT_18, "cwd-1": _CKPT_18})  # each worker's run/ckpt (cell 19)
    worker1_own_run = changes.pop("worker1 own run", True)  # worker 1's run/ a directory, not a link
    first_code, first_stderr = changes.pop("first alone", (1, _FIRST_ALONE_18))  # the script as written, run alone
    global_batch, said = changes.pop("global batch", (12, True))
    run_seen = changes.pop("run seen", _run_seen_18())  # the real run/ before and after each check (cell 11)
    files = changes.pop("alone files", ["ckpt.data-00000-of-00001", "ckpt.index"])
    alone_code = changes.pop("alone code", 0)
    alone_stdout = changes.pop("alone stdout", "worker None, epoch 0: loss 1.3427\nworker None, epoch 1: loss 1.0213\n")
    first = changes.pop("marks", None)  # the first check's one worker's marks
    kept = changes.pop("kept", {})  # {label: {marks file: its text, or None: the worker left none}}
    renamed = changes.pop("step mark", None)  # what the check's step mark says instead of "step"
    (tmp_path / "alone").mkdir()
    for name in files:
        (tmp_path / "alone" / name).write_text("")
    (tmp_path / "train.py").write_text(script)
    checks = _checks_18(**changes)
    for label, files in {**kept, **({"as written": {"1-worker/marks-0.txt": first}} if first else {})}.items():
        code, out, marks = checks[label]
        checks[label] = (code, out, {k: v for k, v in {**marks, **files}.items() if v is not None})
    if renamed:
        checks = {label: (code, out, {k: v.replace(" step ", f" {renamed} ") for k, v in marks.items()})
                  for label, (code, out, marks) in checks.items()}
    if said:  # the batch lines as the check prints them for this global batch
        steps = {12: 8, 24: 4}[global_batch]  # 2 epochs of 48 examples
        checks = {label: (c, out.replace("global batch 12: the global batch of a step is 24",
                                         f"global batch {global_batch}: the global batch of a step is {2 * global_batch}")
                          .replace("the first 7 steps too", f"the first {steps - 1} steps too"), marks)
                  for label, (c, out, marks) in checks.items()}
    holds_unless(match, gather_and_prove, "18_your_own_script.ipynb",
                  {"re": re, "ast": ast, "work_dir": tmp_path, "checks": checks, "GLOBAL_BATCH": global_batch,
                   "NOTES": _NOTES_18, "RUN_SEEN": run_seen,
                   "left": left, "ckpts": ckpts, "worker1_own_run": worker1_own_run, "first_alone": SimpleNamespace(returncode=first_code, stderr=first_stderr),
                   "alone": SimpleNamespace(returncode=alone_code, stdout=alone_stdout)})


def _solution_18(number: int, outputs: list[tuple[int, str]], tmp_path: Path) -> None:
    """Lesson 18's solution `number` with `check` answering `outputs` in turn (what the command printed)."""
    import re

    (tmp_path / "train.py").write_text("loss = tf.nn.compute_average_loss(per_example, global_batch_size=args.batch_size)\n"
                                       '    keras.layers.Dense(32, activation="relu"),\n')
    answers = iter(outputs)
    namespace = {"re": re, "work_dir": tmp_path, "check": lambda script="train.py": (*next(answers), {}),
                 "fix": lambda *a, **k: None}
    exec(compile(solution_source("18_your_own_script.ipynb", number), f"18 solution {number}", "exec"), namespace)


def _weights_line_18(far: str, first: str | None) -> str:
    """The line the check itself prints for a first step `first` times one worker's and 8
    steps `far` times (no first step recorded: the line as printed before issue 53): built by
    check-script's own analysis, so its wording reaches the solution (7be35bb changed it and
    solution 1's pattern stopped matching while a hand-written copy here still did)."""
    from helpers.commands.check_script.analysis import Apart, weights_finding

    trail = ([Apart(1, 1.0, 1e-6, float(first))] if first else []) + [Apart(8, 1.0, 1e-6, float(far))]
    return "\n".join(weights_finding(trail, 2, "").lines())


def _with_a_second_mistake_18(far: str, first: str | None) -> str:
    """Solution 1's copy failing a second check too (twelfth review, finding 4: its assert looked for its own FAIL line
    only, so a copy that kept another mistake passed): the weights line, then the shared checkpoint's."""
    return _weights_line_18(far, first) + "\n  " + _FAIL_18["who writes"]


@pytest.mark.parametrize("far,first,line,match", [
    ("1.70", "2.00", _weights_line_18, None), ("2.05", "2.00", _weights_line_18, "times as far"),
    ("0.50", "0.50", _weights_line_18, "times as far"), (None, None, None, "PASS     same weights"),
    # issue 53: the check names the mistake by the first step's ratio (1.4 to 2.6 times as far); 1.45 is named, but
    # is not the doubling the solution says; and the line as the check printed it before, without the first step's
    ("1.70", "1.45", _weights_line_18, "twice as far as one worker"), ("1.70", None, _weights_line_18, "times as far"),
    ("1.70", "2.00", _with_a_second_mistake_18, "FAIL     who writes")],
    ids=["as measured", "2 or more", "averaged twice", "no FAIL line", "first step 1.45", "no first step",
         "a second FAIL line"])
def test_lesson_18_solution_1_holds_the_ratio_under_two(tmp_path, far, first, line, match):
    """Solution 1's comment says the 2 workers move the weights twice as far in the first step and
    less than twice as far over 8 steps; without the FAIL line its ratios come from, it fails its
    assert (second review, finding 8: a TypeError from indexing no match before). The check prints
    that line only when the first step moved the weights 1.4 to 2.6 times as far (issue 53: the
    runs are judged step by step), and "times as far" otherwise only for gradients averaged twice,
    0.35 to 0.65 (fourth review, finding 8: the case of 1.20 was a line the check cannot print)."""
    out = _check_18(line(far, first) if far else _PASS_18["same weights as one worker"])
    holds_unless(match, _solution_18, 1, [(1, out)], tmp_path)


_BN_18 = ("NOT SEEN same weights as one worker: not exact: batch-norm layers batch_normalization normalise each "
          "replica's examples alone; difference {drift} of the update after 8 steps (tolerance 5.7e-04)")


_MOVING_18 = ("FAIL     identical weights on every worker: worker 1's non-trainable weights (e.g. batch norm's moving "
              "statistics) differ from worker 0's by up to 2.49e-02")


_SYNCED_18 = "PASS     batch norm: 1 BatchNormalization layer(s), synchronized"


@pytest.mark.parametrize("drift,identical,synced,match", [
    ("4.4e-01", _MOVING_18, (0, _SYNCED_18), None),
    ("1.0e-03", _MOVING_18, (0, _SYNCED_18), "NOT SEEN same weights"),
    ("4.4e-01", _PASS_18["identical weights on every worker"], (0, _SYNCED_18), "PASS     identical weights"),
    # second review, finding 7: the synchronized copy still fails its batch-norm line, or its weights are not compared
    ("4.4e-01", _MOVING_18, (1, "FAIL     batch norm: layers batch_normalization compute their statistics over each "
                                "replica's batch alone"), "FAIL     batch norm: layers"),
    ("4.4e-01", _MOVING_18, (3, _SYNCED_18, "NOT SEEN same weights as one worker: not compared: ..."),
     "NOT SEEN same weights as one worker: not compared"),
    # issue 53: the synchronized copy's weights parted after a later step (solution 2 at GLOBAL_BATCH = 2): exit 3
    ("4.4e-01", _MOVING_18, (3, _SYNCED_18, _PARTED_18.format(steps=8)), "compared for 3 of 8 steps")],
    ids=["as measured", "within float32 noise", "moving means alike", "synced still fails", "synced not compared",
         "synced parted later"])
def test_lesson_18_solution_2_holds_the_drift_far_above_the_tolerance(tmp_path, drift, identical, synced, match):
    """Solution 2: per-replica batch norm fails its own line, the weights' drift it causes is far
    (over 100x) above the check's tolerance, not a rounding difference, and the workers' moving
    statistics differ."""
    kept = [_PASS_18[n] for n in _PASS_18 if n != "identical weights on every worker"]
    plain = _check_18(*kept, identical, _BN_18.format(drift=drift), "FAIL     batch norm: layers batch_normalization "
                      "compute their statistics over each replica's batch alone")
    code, *lines = synced
    same = [n for n in _PASS_18 if not any(line.split(":")[0].endswith(n) for line in lines)]
    holds_unless(match, _solution_18, 2, [(1, plain), (code, _check_18(*[_PASS_18[n] for n in same], *lines))], tmp_path)


def test_lesson_18_check_stops_at_a_refusal_with_its_one_line(tmp_path):
    """Second review: on a login node the command refuses (exit status 2, one `error:` line) and runs
    nothing; the lesson's `check` stopped only at the next line, with a FileNotFoundError for the
    marks. It raises the command's own line instead."""
    import shutil
    import sys

    refusal = "error: 2 local workers would run multi-worker TensorFlow here, on a machine Slurm schedules from\n"
    run = lambda *a, **k: SimpleNamespace(returncode=2, stdout="", stderr=refusal)  # noqa: E731 - what it printed
    namespace = {"work_dir": tmp_path, "shutil": shutil, "sys": sys, "GLOBAL_BATCH": 12,
                 "subprocess": SimpleNamespace(run=run)}
    exec(compile(cell_defining("18_your_own_script.ipynb", "def check("), "18 check", "exec"), namespace)
    with pytest.raises(RuntimeError, match="^error: 2 local workers would run multi-worker TensorFlow here"):
        namespace["check"]()


def test_make_fullcheck_runs_lesson_18_at_a_global_batch_of_18(tmp_path):
    """Seventh review, finding 10: `make fullcheck` runs lesson 18 at GLOBAL_BATCH = 18 too (48 examples: an epoch's
    last step shorter, 18, 18, 12), not at 2, where solution 2 ends incomplete; the copy it runs says 18."""
    import nbformat

    from helpers.commands.fullcheck import shapes_of, with_parameters

    assert {"GLOBAL_BATCH": 18} in shapes_of(NOTEBOOKS / "18_your_own_script.ipynb")
    assert {"GLOBAL_BATCH": 18} not in shapes_of(NOTEBOOKS / "10_large_batches.ipynb")  # lesson 18's case only
    copy = with_parameters(NOTEBOOKS / "18_your_own_script.ipynb", {"GLOBAL_BATCH": 18}, tmp_path)
    first = next(c for c in nbformat.read(copy, as_version=4).cells if c.cell_type == "code").source
    assert "\nGLOBAL_BATCH = 18 " in first, first


@pytest.mark.parametrize("batch,refused", [(2, True), (3, True), (13, True), (26, True), (4, False), (12, False),
                                           (18, False), (24, False)])
def test_lesson_18_refuses_a_global_batch_it_was_not_run_at(batch, refused):
    """Eighth review, finding 1: at GLOBAL_BATCH = 2 the lesson failed (solution 2 ends incomplete), an odd one cannot
    split over the two workers, and it was run from 4 to 24: its setup cell refuses any other with one line."""
    import ast

    from helpers.errors import CourseError

    tree = ast.parse(cell_defining("18_your_own_script.ipynb", "raise CourseError(f\"GLOBAL_BATCH"))
    guard = next(node for node in tree.body if isinstance(node, ast.If) and "GLOBAL_BATCH" in ast.unparse(node.test))
    namespace = {"CourseError": CourseError, "GLOBAL_BATCH": batch}
    if not refused:
        exec(compile(ast.Module([guard], []), "18 guard", "exec"), namespace)
        return
    with pytest.raises(CourseError, match=rf"^GLOBAL_BATCH = {batch}: give an even number from 4 to 24 \(") as raised:
        exec(compile(ast.Module([guard], []), "18 guard", "exec"), namespace)
    assert "\n" not in str(raised.value)


def test_lesson_18_step_by_step_gives_the_check_s_own_weight_budget():
    """Eleventh review, finding 2: cell 35 said the check compares the weights after every step; it does until the
    recorded weights pass worker.STEP_BYTES (thirteenth review, finding 5: one snapshot beyond it is taken, so a
    5 M-weight model is compared after steps 1 and 2 and at the end; "32 MB" was 32 MiB), and a model of more than STEP_BYTES / 4 float32 weights is compared
    after the first step and at exit only. The figures the cell gives are STEP_BYTES's own."""
    import nbformat

    from helpers.commands.check_script import worker

    cells = nbformat.read(NOTEBOOKS / "18_your_own_script.ipynb", as_version=4).cells
    text = " ".join(next(c.source for c in cells if c.source.startswith("## Step by step")).split())
    assert f"until the recorded weights pass {worker.STEP_BYTES // 2 ** 20} MiB" in text, text
    assert (f"a model of more than {worker.STEP_BYTES / 4 / 1e6:.1f} million trainable weights, after the first step "
            "and at the end only") in text, text
