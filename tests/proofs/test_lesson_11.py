"""Lesson 11's proof cell (notebooks/11_checkpoints_requeue.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

import pytest

from tests.support.proof_cases import OK
from tests.support.proof_cells import assignment_source, cell_defining, code_cells, holds_unless, run_proof, solution_source


def test_lesson_11_proof_on_slurm_passes_without_exit_statuses_but_not_without_the_logged_stops():
    """On Slurm the notebook sees no task's exit status (srun returns the highest): the proof then holds
    on the logged stops and ends, and still fails when a worker did not log its stop."""
    name = "11_checkpoints_requeue.ipynb"
    on_slurm = {run: {**summary, "exit statuses": None} if "exit statuses" in summary else summary
                for run, summary in OK[name]["result"].items()}
    run_proof(name, {"result": on_slurm, "use_slurm": True})
    with pytest.raises(AssertionError, match="every worker should log its stop"):
        run_proof(name, {"result": {**on_slurm, "custom, warned": {**on_slurm["custom, warned"], "stopped ranks": [0]}},
                    "use_slurm": True})


def _event(event: str, t: float, rank: int = 0, **fields) -> dict:
    return {"event": event, "time": t, "rank": rank, **fields}


def test_lesson_11_summary_reads_a_requeued_fit_from_its_events():
    """The gathering cell itself, on planted job events: a fit of 2 epochs of 32 steps warned in
    epoch 1, stopped at its checkpoint 16 steps in (optimizer step 48), resumed at epoch 1 with the
    optimizer at step 48 (so 16 steps repeated: 80 in the end), both workers stopping and finishing together, the
    chief alone warned.
    Worker 1 logs its stop before the chief logs its save: the chief's save is still the one before the stop."""
    warned = [_event("start", 0, r, run=0, epoch=0, batch=0, weights="init", iterations=0) for r in (0, 1)]
    # worker 1 logs its save and its stop before the chief logs its save (as seen on Slurm)
    warned += [_event("saved", 1.8 if r == 0 else 1, r, epoch=1, batch=16, weights="s", iterations=48) for r in (0, 1)]
    # the chief alone warned (it warns itself); worker 1 stopped on the agreement, its own note empty
    warned += [_event("stopped", 2 if r == 0 else 1.5, r, warnings=["SIGUSR1"] if r == 0 else [], weights="s", iterations=48)
               for r in (0, 1)]
    warned += [_event("start", 3, r, run=1, epoch=1, batch=0, weights="s", iterations=48) for r in (0, 1)]
    warned += [_event("finished", 4, r, warnings=[], weights="f", iterations=80) for r in (0, 1)]
    warned.sort(key=lambda e: e["time"])  # as the notebook orders them
    never = [_event("start", 0, r, run=0, epoch=0, batch=0, weights="init", iterations=0) for r in (0, 1)]
    never += [_event("finished", 4, r, warnings=[], weights="g", iterations=64) for r in (0, 1)]
    plan = {"epochs": 2, "steps_per_epoch": 32}
    namespace = {"events": {"fit, warned": warned, "fit, never warned": never}, "runs": {}, "print": lambda *a: None,
                 "statuses": {"fit, warned": [[3, 3], [0, 0]]},
                 "plans": {"fit, warned": plan, "fit, never warned": plan}}
    exec(compile(cell_defining("11_checkpoints_requeue.ipynb", "def summary(name)"), "11", "exec"), namespace)
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
    assert got["warned ranks"] == [0], got
    assert got["exit statuses"] == [[3, 3], [0, 0]] and reference["exit statuses"] is None, (got, reference)
    run_proof("11_checkpoints_requeue.ipynb", {"result": {
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
    source = solution_source("11_checkpoints_requeue.ipynb", 1)
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    holds_unless(match, exec, compile(source, "11 solution 1", "exec"), {"print": lambda *a, **k: None})


def test_lesson_11_gives_each_run_a_deadline_that_grows_with_the_predicted_training():
    """Review finding 4: the runs' deadline was a fixed 900 s, which full mode on a CPU (about 27 minutes of training
    predicted, most of it a run's) would pass: the deadline is 15 minutes or three times the predicted training,
    whichever is longer, and it is what every run of workers and every job is given."""
    import ast
    from types import SimpleNamespace

    from helpers.mode import mode_sizes
    from helpers.training_time import lesson_work, seconds

    name = "11_checkpoints_requeue.ipynb"
    full_on_cpu = seconds(lesson_work("11", mode_sizes("full"), 2), 0, 2)
    for predicted, expected in ((4.5, 900), (full_on_cpu, round(3 * full_on_cpu))):
        namespace = {"stopwatch": SimpleNamespace(predicted_s=predicted), "print": lambda *a, **k: None}
        exec(assignment_source(name, "run_deadline"), namespace)
        assert namespace["run_deadline"] == expected, (predicted, namespace["run_deadline"])
    assert full_on_cpu > 900, full_on_cpu  # the case the fixed deadline failed
    calls = [node for cell in code_cells(name) if not cell.lstrip().startswith("%")
             for node in ast.walk(ast.parse(cell)) if isinstance(node, ast.Call)
             and getattr(node.func, "id", None) in ("run_local_workers", "follow_job")]
    assert len(calls) == 2, len(calls)
    for call in calls:
        given = {k.arg: ast.unparse(k.value) for k in call.keywords}
        assert given.get("deadline_s") == "run_deadline", (ast.unparse(call), given)


def test_lesson_11_stopwatch_counts_every_start_of_the_lessons_workers():
    """Review finding 5: the stopwatch counted the kernel and 3 jobs (5 first steps) where the lesson starts its
    workers 8 times: each warned run twice (before and after its requeue), each never-warned run once; the kernel
    starts no TensorFlow while the clock runs (its solutions import it after the report)."""
    from helpers.training_time import KERNEL_TF_OFF_THE_CLOCK, LESSON_STARTS

    name = "11_checkpoints_requeue.ipynb"
    namespace: dict = {}
    exec(assignment_source(name, "runs"), namespace)
    starts = sum(1 if "never" in run else 2 for run in namespace["runs"])
    assert starts == 8, namespace["runs"]
    engines, local_runs, jobs, first_steps = LESSON_STARTS["11"]
    assert (engines, local_runs, jobs, first_steps) == (0, 0, starts, starts), LESSON_STARTS["11"]
    assert "11" in KERNEL_TF_OFF_THE_CLOCK
    cells = code_cells(name)
    clock = next(i for i, c in enumerate(cells) if "time_lesson(" in c)
    report = next(i for i, c in enumerate(cells) if "stopwatch.report()" in c)
    in_kernel = [c for c in cells[clock:report] if not c.lstrip().startswith("%%writefile")]  # not the program's cells
    assert not any("import tensorflow" in c or "import_tensorflow" in c or "import keras" in c for c in in_kernel)


def _fit_stopped_twice(make_backup, root) -> list[tuple[int, int]]:
    """Three fits of 3 epochs of 4 steps with one backup directory, a backup every step: the first stopped after 6
    steps (epoch 1, 2 steps in), the second (resumed) 2 steps into its first epoch, the third to the end. Each run's
    (epoch it starts at, optimizer steps at its start), and the third's steps at its end."""
    import numpy as np
    from helpers.host import import_tensorflow

    import_tensorflow()  # quietly
    import keras

    seen = []
    for stop_after in (6, 2, 0):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")

        class Stop(keras.callbacks.Callback):
            steps = 0

            def on_epoch_begin(self, epoch, logs=None):
                if self.steps == 0:  # after the backup's restore
                    seen.append((epoch, int(self.model.optimizer.iterations.numpy())))

            def on_train_batch_end(self, batch, logs=None):
                self.steps += 1
                self.model.stop_training = self.steps == stop_after

        model.fit(np.zeros((32, 4)), np.zeros((32, 1)), batch_size=8, epochs=3, callbacks=[make_backup(root), Stop()],
                  verbose=0)
    return [*seen, int(model.optimizer.iterations.numpy())]


@pytest.mark.parametrize("change", [None, ("self._current_epoch = epoch", "pass")], ids=["as written", "stock callback"])
def test_lesson_11_fit_backup_keeps_the_epoch_when_a_resumed_run_stops_in_its_first_epoch(change, tmp_path, monkeypatch):
    """Second review this round, finding 1: Keras 3.15's BackupAndRestore counts epochs from 0 in every run and moves on
    only at an epoch's end, so the backups a resumed fit writes before its first epoch ends say epoch 0: a job stopped
    again there started fit over at epoch 0 (and trained 20 steps in all instead of 12 + the 4 repeated twice = 16).
    The program's epoch_keeping_backup must resume the third run at epoch 1 with the optimizer at step 8."""
    from helpers.take_home import MODULE
    from tests.support.notebooks import written_program

    source = written_program("11_checkpoints_requeue.ipynb", "{program}")
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    monkeypatch.syspath_prepend(str(MODULE.parent))  # the program imports mwms_slurm, beside it in the lesson
    namespace: dict = {"__name__": "train_requeue"}
    exec(compile(source, "train_requeue.py", "exec"), namespace)
    got = _fit_stopped_twice(lambda root: namespace["epoch_keeping_backup"](str(root / "backup"), 1), tmp_path)

    def check():
        assert got == [(0, 0), (1, 6), (1, 8), 16], got

    holds_unless(None if change is None else r"\(0, 8\), 20\]", check)
