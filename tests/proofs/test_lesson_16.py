"""Lesson 16's proof cell (notebooks/16_input_at_scale.ipynb) beyond its cases in tests/support/proof_cases.py:
its gathering cells and solutions on planted raw data (what a run measures, what engines and jobs
return), and real runs with a claim broken, must fail the proof through the cells' own arithmetic,
not a planted final value."""

import math
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from helpers.settings import value as settings_value

from tests.support.proof_cases import OK
from tests.support.proof_cells import (
    assignment_source, cell_defining, function_source, gather_and_prove, holds_unless, run_proof, solution_source,
)

@pytest.mark.parametrize("left", [False, True], ids=["a first run", "over an interrupted run's copy"])
def test_lesson_16_read_on_runs_its_local_workers_on_cpus_only(tmp_path, monkeypatch, left):
    """Tenth review, finding 1: make_strategy makes a replica of every GPU a worker sees, and the lesson's job runs
    one replica a worker on CPUs: read_on's local workers get CUDA_VISIBLE_DEVICES empty, whatever this machine
    shows (here "0,1"). Finding 7: a local copy an interrupted run left (local-2) is replaced, not a
    FileExistsError."""
    import json

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "part-0.tfrecord").write_bytes(b"x")
    if left:
        (tmp_path / "local-2").mkdir()
        (tmp_path / "local-2" / "part-0.tfrecord").write_bytes(b"half")
    seen = []

    def run_local_workers(args, n, deadline_s, env=None):
        seen.append((env or os.environ).get("CUDA_VISIBLE_DEVICES"))
        out = Path(args[args.index("--out") + 1])
        out.mkdir(exist_ok=True)
        for rank in range(n):
            (out / f"worker-{rank}.json").write_text(json.dumps({"rank": rank}))
        return [SimpleNamespace(output="") for _ in range(n)]

    namespace = _read_on(tmp_path, shared, run_local_workers, quiet=True)
    assert [r["rank"] for r in namespace["read_on"](2)] == [0, 1]
    assert seen == [""], f"the local workers should see no GPU (CUDA_VISIBLE_DEVICES empty): {seen}"
    assert namespace["staged_how"] == {2: "a local copytree, no Slurm"}, namespace["staged_how"]  # its STAGED line


def test_lesson_16_job_script_hides_the_node_s_gpus_from_its_steps(tmp_path):
    """Tenth review, finding 1: a job that asks for no GPU still sees the node's GPUs where the centre does not hide
    them, and make_strategy would make a replica of each. Twentieth review, finding 1: the script's `export
    CUDA_VISIBLE_DEVICES=` never reached the workers: Slurm 22.05 unsets it in every step without a GPU, whatever the
    batch script set (tests/test_slurm_job_isolation.py sees it on the local Slurm with GPUs). The script's exports
    and its workers' step, run by bash with CUDA_VISIBLE_DEVICES=0,1 and an srun that unsets it as Slurm does: the
    worker sees it set and empty ("[unset]" with the old export)."""
    import subprocess

    script = cell_defining("16_input_at_scale.ipynb", '%%writefile {job_dir / "read_shards.sbatch"}')
    body = script.split("\n", 1)[1]
    head = body[:body.index(': "${SHARED:?')]
    step = [l for l in body.splitlines() if l.startswith("srun --kill-on-bad-exit=1 ")]
    assert len(step) == 1, step  # the workers' step
    srun = 'srun() { while [ "${1#-}" != "$1" ]; do shift; done; (unset CUDA_VISIBLE_DEVICES; "$@"); }\n'
    reader = tmp_path / "reader"
    reader.write_text('#!/bin/sh\necho "[${CUDA_VISIBLE_DEVICES-unset}]"\n')
    reader.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_ID": "7", "PYTHON": str(reader),
           "SLURM_SUBMIT_DIR": str(tmp_path), "LOCAL": str(tmp_path), "OUT": str(tmp_path)}
    done = subprocess.run(["bash", "-c", head + srun + step[0]], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"the job's workers should see CUDA_VISIBLE_DEVICES empty: {done.stdout!r}"


def test_lesson_16_staging_cell_run_twice_starts_anew(tmp_path):
    """Tenth review, finding 7: the staging cell run again raised (staged_copy makes its copy new, never adds to
    one) and its counts grew by a staging and three epochs. Run twice, it stages anew: one staging and three
    epochs counted."""
    import shutil

    from helpers.shared_fs import SimulatedSharedFS

    shards = _lesson_16_shards(tmp_path / "shared", 64, lambda i: i % 8)
    (tmp_path / "node-local").mkdir()
    names = ("shared every epoch", "cache(filename=...)", "staged")
    run = {"fs": SimulatedSharedFS(tmp_path / "shared", mb_s=1e4, latency_ms=1.0), "shared": tmp_path / "shared",
           "node_local": tmp_path / "node-local", "BATCH": 32, "TIMED": 2, "parse_batch": shards["parse_batch"],
           "shutil": shutil, **{kept: {name: [] for name in names} for kept in ("epochs", "reads", "waits")}}
    exec(function_source("16_input_at_scale.ipynb", "record"), run)
    source = cell_defining("16_input_at_scale.ipynb", 'staged = node_local / "staged"')
    for _ in range(2):
        exec(compile(source, "16 staging", "exec"), run)
    counted = {kept: len(run[kept]["staged"]) for kept in ("epochs", "reads", "waits")}
    assert counted == {"epochs": 3, "reads": 4, "waits": 4}, counted
    assert run["staged_records"] == 64, run["staged_records"]


def test_lesson_16_same_data_fails_when_one_pipeline_is_shorter():
    """zip would stop at the shorter pipeline and call a truncated one the same data: it must raise."""
    line = assignment_source("16_input_at_scale.ipynb", "same_data")
    batches = [(np.arange(4), np.arange(4)), (np.arange(4, 8), np.arange(4, 8))]
    same = {"np": np, "one_pass": None,
            "ways": {"map, then batch": lambda _: iter(batches), "batch, then map": lambda _: iter(batches)}}
    exec(line, same)
    assert same["same_data"] is True
    truncated = {"np": np, "one_pass": None,
                 "ways": {"map, then batch": lambda _: iter(batches), "batch, then map": lambda _: iter(batches[:1])}}
    with pytest.raises(ValueError, match="shorter|longer"):
        exec(line, truncated)


def _in_one_process(argv, **kwargs):
    """subprocess.run, but the worker's program run in this process, one worker after the other (a lock): the
    workers then share one global seed, as the old solution's did (the fourth review's finding)."""
    import contextlib
    import io
    import sys

    with _ONE_AT_A_TIME, contextlib.redirect_stdout(io.StringIO()) as out:
        saved, sys.argv = sys.argv, argv[2:]
        try:
            exec(compile(argv[2], "worker", "exec"), {"__name__": "worker"})
        finally:
            sys.argv = saved
    return SimpleNamespace(returncode=0, stdout=out.getvalue(), stderr="")


_ONE_AT_A_TIME = threading.Lock()


@pytest.mark.parametrize("change,match", [
    (None, None),
    # both workers with one op seed: the trap (differently seeded shuffles clash) would not be shown
    (("[mine(s + rank) for s in range(5)]", "[mine(s) for s in range(5)]"), "should give some file to both workers"),
    # the "fix" with differently seeded shuffles still clashes
    (("[mine(shuffle=False)]", "[mine(rank + 1)]"), "shuffle=False\\) should give each file to one worker"),
    # "one op seed everywhere" that is not one op seed
    (('"op seed 7, no global seed": [mine(7)]', '"op seed 7, no global seed": [mine(7 + rank)]'),
     "one op seed and one global seed"),
    # "one global seed everywhere" that is not one global seed
    (("tf.random.set_seed(42)", "tf.random.set_seed(42 + rank)"), "one op seed and one global seed"),
    # fourth review, finding 1: the global seeds not per worker (one for both, as in one process): the op seed alone
    # would look enough
    (("tf.random.set_seed(g + rank)", "tf.random.set_seed(g)"), "a global seed per worker should give some file"),
    # fourth review, finding 1: the two workers in one process (the old solution's way): they share a global seed,
    # and the second starts with the first's last one (42), not TensorFlow's default
    ("one process", "one op seed and one global seed"),
    # fifth review, finding 5: the fix FILE sharding uses, shard then shuffle, with the shuffle put first
    (('list_files(\n            pattern, shuffle=False).shard(2, rank).shuffle(8, seed=s + rank)',
      'list_files(\n            pattern, shuffle=False).shuffle(8, seed=s + rank).shard(2, rank)'),
     "sharding before the shuffle should give each file to one worker"),
    # twelfth review, finding 3: "a new order every epoch" of the fix by hand, with a shuffle that keeps one order
    (("shuffle(8, seed=rank)", "shuffle(8, seed=rank, reshuffle_each_iteration=False)"),
     "a new order of its files on a later epoch"),
], ids=["as written", "one op seed for both", "no fix", "one op seed, not one", "one global seed, not one",
        "global seed not per worker", "workers in one process", "shuffle before the shard", "one order every epoch"])
def test_lesson_16_solution_2_fails_when_the_manual_shard_trap_is_not_shown(tmp_path, change, match):
    """Solution 2 lists 8 file names on each of two workers, each a process of its own, shuffles them and shards
    by hand: it must show two workers picking one file when their op seeds differ, or their global seeds do, and
    none when the order is one (shuffle=False, or one op seed and one global seed everywhere). Variants that
    break a way, or run both workers in one process, must fail it."""
    import os
    import sys

    for k in range(8):
        (tmp_path / f"part-{k:05d}.tfrecord").write_bytes(b"")
    source = solution_source("16_input_at_scale.ipynb", 2)
    namespace = {"shared": tmp_path, "os": os, "sys": sys, "print": lambda *a, **k: None}
    if change == "one process":
        assert "import subprocess\n" in source
        source = source.replace("import subprocess\n", "")
        namespace["subprocess"] = SimpleNamespace(run=_in_one_process)
    elif change is not None:
        assert source.count(change[0]) == 1, change[0]
        source = source.replace(*change)
    import tensorflow as tf

    tf.random.set_seed(None)  # in one process the workers set this process's global seed: none before, none after
    try:
        holds_unless(match, exec, compile(source, "16 solution 2", "exec"), namespace)
    finally:
        tf.random.set_seed(None)


@pytest.mark.parametrize("reads", ["its copy", "the shared directory"])
def test_lesson_16_a_worker_that_reads_the_shared_directory_fails_the_run(tmp_path, reads):
    """read_on hides the shared directory once the copy is made: a worker that reads it instead of
    its copy finds nothing and writes no report, and read_on raises (as it does for any worker that
    did not report: a cancelled job, say)."""
    import json
    import os

    shared = tmp_path / "shared"
    shared.mkdir()
    for k in range(2):
        (shared / f"part-{k}.tfrecord").write_bytes(b"x")

    def run_local_workers(args, n, deadline_s, env=None):  # stand-in workers: report what they can list
        files, out = args[args.index("--files") + 1], Path(args[args.index("--out") + 1])
        where = str(shared) if reads == "the shared directory" else files
        outcomes = []
        for rank in range(n):
            if os.path.isdir(where) and os.listdir(where):
                out.mkdir(exist_ok=True)
                (out / f"worker-{rank}.json").write_text(json.dumps({"rank": rank, "read_from": where}))
            outcomes.append(SimpleNamespace(output=f"WORKER {rank} read {where}\n"))
        return outcomes

    namespace = _read_on(tmp_path, shared, run_local_workers)
    if reads == "its copy":
        assert [r["rank"] for r in namespace["read_on"](2)] == [0, 1]
        assert namespace["hidden_first"] == {2: True}
    else:
        with pytest.raises(RuntimeError, match="0 of 2 workers reported"):
            namespace["read_on"](2)
    assert sorted(p.name for p in shared.iterdir()) == ["part-0.tfrecord", "part-1.tfrecord"], "shared restored"


@pytest.mark.parametrize("renamed", [True, False], ids=["as written", "without the rename"])
def test_lesson_16_read_on_notes_hidden_only_once_the_shared_directory_is_gone(tmp_path, renamed):
    """Eleventh review, finding 1: read_on set hidden_first from "no report yet" alone, before
    `shared.rename(hidden)`: with the rename deleted the shared directory stayed visible while the workers ran,
    hidden_first was still {2: True} and the proof passed. read_on with stand-in workers that note whether they
    can see the shared directory: as written they cannot, hidden_first is {2: True} and the proof passes; without
    the rename they can, hidden_first is {2: False} and the proof fails."""
    import json

    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "part-0.tfrecord").write_bytes(b"x")
    visible = []

    def run_local_workers(args, n, deadline_s, env=None):
        visible.append(shared.exists())
        out = Path(args[args.index("--out") + 1])
        out.mkdir(exist_ok=True)
        for rank in range(n):
            (out / f"worker-{rank}.json").write_text(json.dumps({"rank": rank}))
        return [SimpleNamespace(output="") for _ in range(n)]

    change = None if renamed else ("            shared.rename(hidden)\n", "")
    namespace = _read_on(tmp_path, shared, run_local_workers, quiet=True, change=change)
    assert [r["rank"] for r in namespace["read_on"](2)] == [0, 1]
    assert visible == [not renamed], visible
    assert shared.is_dir() and not (tmp_path / "shared-hidden").exists(), "shared restored"
    ok = OK["16_input_at_scale.ipynb"]
    holds_unless(None if renamed else "hidden before any worker", run_proof, "16_input_at_scale.ipynb",
                 {**ok, "hidden_first": {**ok["hidden_first"], **namespace["hidden_first"]}, "print": lambda *a, **k: None})
    assert namespace["hidden_first"] == {2: renamed}, namespace["hidden_first"]


def test_lesson_16_read_on_run_again_counts_only_the_new_run_s_reports(tmp_path):
    """Fifth review, finding 2: cell 20 run twice kept the first run's worker-*.json in run-W, so a second run whose
    workers wrote nothing returned the old reports (and the proof said the shared directory was hidden after a
    report). read_on clears its run directory first: the second run, with workers that report nothing, raises."""
    import json

    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "part-0.tfrecord").write_bytes(b"x")
    reporting = [True, False]  # the first run's workers report, the second's do not

    def run_local_workers(args, n, deadline_s, env=None):
        out = Path(args[args.index("--out") + 1])
        if reporting.pop(0):
            out.mkdir(exist_ok=True)
            for rank in range(n):
                (out / f"worker-{rank}.json").write_text(json.dumps({"rank": rank}))
        return [SimpleNamespace(output="") for _ in range(n)]

    namespace = _read_on(tmp_path, shared, run_local_workers, quiet=True)
    assert [r["rank"] for r in namespace["read_on"](2)] == [0, 1]
    with pytest.raises(RuntimeError, match="0 of 2 workers reported"):
        namespace["read_on"](2)
    assert namespace["hidden_first"] == {2: True}


@pytest.mark.parametrize("seen", ["staged, no report yet", "gone before the kernel looked", "reports before STAGED",
                                  "staged, never renamed"])
def test_lesson_16_run_job_notes_whether_it_hid_the_shared_directory_before_any_report(tmp_path, seen, monkeypatch):
    """On Slurm the kernel hides the shared directory when the job's log says STAGED: only a job seen
    in the queue with STAGED in its log and no worker report yet counts as hidden first; a job that
    left the queue before the kernel looked, or whose workers reported first, must not. The wait is
    the package's (`wait_for_job`), its squeue answered here. Eleventh review, finding 1: hide_once_staged
    set hidden_first from "no report yet" before it renamed the shared directory, so with the rename deleted
    (the shared directory visible while the workers ran) it still noted {2: True} and the proof passed; it
    notes hidden only once the shared directory is gone and the hidden one there: the proof fails that run."""
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
    source = function_source("16_input_at_scale.ipynb", "run_job")
    if seen == "staged, never renamed":
        assert source.count("            shared.rename(hidden)\n") == 1, source
        source = source.replace("            shared.rename(hidden)\n", "")
    exec(source, namespace)
    assert "STAGED" in namespace["run_job"](2, out)
    hidden = seen == "staged, no report yet"
    ok = OK["16_input_at_scale.ipynb"]
    holds_unless(None if hidden else "hidden before any worker", run_proof, "16_input_at_scale.ipynb",
                 {**ok, "hidden_first": {**ok["hidden_first"], **namespace["hidden_first"]}, "print": lambda *a, **k: None})
    assert namespace["hidden_first"] == {2: hidden}, (seen, namespace["hidden_first"])


@pytest.mark.parametrize("where,held", [("its copy", True), ("the shared directory", False),
                                        ("a link to it", False), ("a bind mount of it", False),
                                        ("a copy with other bytes", False), ("one file not opened", False),
                                        ("one file opened twice", False),
                                        ("the shared directory, from another machine", False)])
def test_lesson_16_a_copy_is_told_from_the_shared_files_by_path_and_by_inode(tmp_path, where, held):
    """staged_everywhere reads the files each worker's pipeline opened, as read_shards.py reports them (path, links
    resolved; device and inode; SHA-256): a file under the shared directory, reached through a link to it, or the
    same file under another name (a bind mount: another path, a shared file's inode) is not a copy, nor a shared
    file read on another machine (its device numbers are that machine's: the path tells); nor is a copy with other
    bytes; and a run's workers must open every shared file once (a worker that kept no names, or two
    that read one file, fail)."""
    import hashlib
    import os

    shared, copy = tmp_path / "shared", tmp_path / "copy"
    shared.mkdir(), copy.mkdir()
    for name in ("a.tfrecord", "b.tfrecord"):
        (shared / name).write_bytes(b"shared bytes of " + name.encode())
        (copy / name).write_bytes(b"shared bytes of " + name.encode())
    (tmp_path / "link").symlink_to(shared)
    folder = {"a link to it": tmp_path / "link"}.get(where, shared if where.startswith("the shared") else copy)
    opened = []
    for name in ("a.tfrecord", "b.tfrecord")[:1 if where == "one file not opened" else 2]:
        path = os.path.realpath(folder / name)  # the worker resolves links
        stat = os.stat(shared / name if where == "a bind mount of it" else path)
        read = b"other bytes" if where == "a copy with other bytes" else (shared / name).read_bytes()
        device = stat.st_dev + 1000 * where.endswith("another machine")  # its device numbers are its machine's
        opened.append({"path": path, "id": [device, stat.st_ino], "sha256": hashlib.sha256(read).hexdigest()})
    reports = [{"opened": opened[:1]}, {"opened": opened[1:] + opened[:where == "one file opened twice"]}]
    namespace = {"os": os, "hashlib": hashlib, "shared": shared, "SHARDS": 8, "reports": {2: reports}}
    for name in ("shared_ids", "shared_files", "opened", "staged_everywhere"):
        exec(assignment_source("16_input_at_scale.ipynb", name), namespace)
    assert namespace["staged_everywhere"] == {2: held}


def _lesson_16_shards(directory: Path, train_size: int, file_of) -> dict:
    """`train_size` records as lesson 16 writes them, example i into file file_of(i) of 8; shards.py's names."""
    import tensorflow as tf

    from tests.support.notebooks import written_programs

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


@pytest.mark.parametrize("change,match", [
    (None, None),
    # fifteenth review, finding 1: a pipeline that lists one file fewer, or reads one file twice, must fail cell 11
    (("files = tf.data.Dataset.list_files(pattern, shuffle=shuffle)",
      "files = tf.data.Dataset.list_files(pattern, shuffle=shuffle).take(7)"), "exactly once"),
    (("files = tf.data.Dataset.list_files(pattern, shuffle=shuffle)",
      "files = tf.data.Dataset.list_files(pattern, shuffle=False); files = files.concatenate(files.take(1))"),
     "exactly once"),
], ids=["as written", "one file fewer", "one file twice"])
def test_lesson_16_one_pass_check_fails_when_a_file_is_missed_or_read_twice(tmp_path, change, match, monkeypatch):
    """Cell 11 asserts one pass of shards.py's pipeline gives every example exactly once; with the pipeline changed
    to skip a file or read one twice it must fail (the counts alone, 2,048 = 8 x 256, would not tell the first)."""
    import sys

    shards = _lesson_16_shards(tmp_path / "shared", 2048, lambda i: i % 8)
    if change is not None:
        from tests.support.notebooks import written_programs

        program = written_programs("16_input_at_scale.ipynb")['"shards.py"}']
        assert change[0] in program
        shards = {}
        exec(program.replace(*change), shards)
    monkeypatch.setitem(sys.modules, "shards", SimpleNamespace(**shards))
    source = cell_defining("16_input_at_scale.ipynb", "one pass should give every example exactly once")
    holds_unless(match, exec, compile(source, "16 cell 11", "exec"),
                 {"shared": tmp_path / "shared", "train_size": 2048, "print": lambda *a, **k: None})


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
    source = solution_source("16_input_at_scale.ipynb", 1)
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    namespace = {"tf": tf, "shared": tmp_path / "shared", "SHARDS": 8, "train_size": 2048,
                 "parse_batch": shards["parse_batch"], "print": lambda *a, **k: None}
    holds_unless(match, exec, compile(source, "16 solution 1", "exec"), namespace)
    if match is None:
        assert len(namespace["indices"]) == 512


def _reports_16(tmp_path: Path, workers: int, train_size: int, *, shards_of=None, repeat_first=False,
                same_order=False, bind_mounted=False, copy_altered=False, orders_all=False, stopped=False,
                spread=False, front_cut=False, files=8, per_worker=1, device="CPU", nodes=2) -> list[dict]:
    """Each worker's report as lesson 16's read_shards.py writes it, worker r of W on node r x nodes // W + 1 (Slurm's
    block distribution over min(W, nodes) nodes: 2 workers on 2 nodes one a node, 3 on 2 two and one):
    the files r, r + W, ... (FILE sharding of `files` files), their examples (i in file i % files) in
    steps as MultiWorkerMirroredStrategy gives them (a global batch of 2 x W of its own examples, W pieces
    of it one a step, each cut as TensorFlow's legacy rebatch cuts it; a worker that ran out steps on with
    empty batches), the order of its files on two passes, the files its pipeline opened in its node-local
    copy (path, device and inode, SHA-256). front_cut: the last, partial global batch cut into pieces of 2 from the front (a
    pipeline that ends in .batch(G): 2, 2, 0), not as TensorFlow's legacy rebatch cuts it. per_worker: each worker's
    replicas (R): a global batch of 2 x W x R cut into W x R pieces, a worker's R of them a step; device: their device
    type, as strategy.extended.worker_devices names them."""
    import hashlib

    names = sorted(p.name for p in (tmp_path / "shared").glob("*.tfrecord"))
    global_batch, replicas = 2 * workers * per_worker, workers * per_worker
    ranks = [shards_of(r) if shards_of else [k for k in range(files) if k % workers == r] for r in range(workers)]
    held = [sum(i % files in mine for i in range(train_size)) for mine in ranks]
    steps = workers * math.ceil(max(held) / global_batch)  # W steps per global batch of the fullest worker's
    reports = []
    for rank in range(workers):
        mine = ranks[rank]
        copy = tmp_path / f"node{rank + 1}-local" / f"shards-7.{workers}"
        copy.mkdir(parents=True)
        opened = []
        for k in mine:
            (copy / names[k]).write_bytes((tmp_path / "shared" / names[k]).read_bytes())
            bind = bind_mounted and rank == 0 and k == mine[0]  # a bind mount: another path, the shared file's inode
            where = os.stat(tmp_path / "shared" / names[k] if bind else copy / names[k])
            read = b"other bytes" if copy_altered and rank == 0 and k == mine[0] else (copy / names[k]).read_bytes()
            opened.append({"path": str((copy / names[k]).resolve()), "id": [where.st_dev, where.st_ino],
                           "sha256": hashlib.sha256(read).hexdigest()})
        indices = [i for i in range(train_size) if i % files in mine]
        chunk = lambda n: -(-n // replicas)  # TensorFlow's legacy rebatch: ceil(n / (W x R)) from the front
        pieces = [[max(0, min(chunk(n), n - chunk(n) * j)) for j in range(replicas)]
                  for n in (len(indices[start:start + global_batch]) for start in range(0, len(indices), global_batch))]
        full = [sum(cut[s * per_worker:(s + 1) * per_worker]) for cut in pieces for s in range(workers)]  # R a step
        if front_cut:  # each global batch cut into pieces of 2 (the per-replica batch) from the front
            full = [max(0, min(2, len(indices[start:start + global_batch]) - 2 * j))
                    for start in range(0, len(indices), global_batch) for j in range(workers)]
        if spread and len(full) < steps:  # its examples spread over every step: no empty batch at the end
            full = [len(indices) // steps] * steps
        batches = full + [0] * (steps - len(full)) * (not stopped)  # stopped: no empty batches, fewer steps
        reports.append({"rank": rank, "host": f"node{rank * min(workers, nodes) // workers + 1}", "opened": opened,
                        "global_batch": global_batch,
                        "replicas": replicas,
                        "devices": [f"/job:worker/replica:0/task:{rank}/device:{device}:{j}" for j in range(per_worker)],
                        "indices": indices + indices[:1] * (repeat_first and rank == 0), "batches": batches,
                        "orders": [list(range(files)) if orders_all else mine,
                                   (list(range(files)) if orders_all else mine)[::1 if same_order else -1]]})
    return reports


@pytest.mark.parametrize("changes,match", [
    ({}, None),
    ({"workers_3": 2}, "not every worker reported"),  # a worker of the second run wrote no report
    # shuffled lists sharded by hand with two seeds: file 4 to both workers, file 1 to none
    ({"shards_of": lambda r: [[0, 2, 4, 6], [3, 4, 5, 7], [1]][r]}, "FILE sharding should give"),
    ({"repeat_first": True}, "disjoint and cover"),  # one example read twice, from the right files
    ({"same_order": True}, "should be shuffled"),  # every worker's files in one order on both passes
    ({"bind_mounted": True}, "should be a copy of a shared file"),  # a file: another path, the shared file's inode
    ({"copy_altered": True}, "should be a copy of a shared file"),  # a file a worker read with other bytes
    # the passes that show the new orders read every file (AutoShardPolicy.OFF there; the review's broken copy)
    ({"orders_all": True}, "its own on every pass"),
    ({"stopped": True}, "as many steps"),  # the worker that ran out stopped instead of stepping on
    ({"spread": True}, "empty batches"),  # the worker with fewer global batches (16 vs 24 at 6): last batch not empty
    # seventh review, finding P1: the last global batch cut from the front (read_shards.py with unbatch().batch(G)
    # before experimental_distribute_dataset). 12 files: workers 1 and 2 of 3 hold 21 examples, a last global batch
    # of 3 cut 2, 1, 0 from the front where TensorFlow's legacy rebatch gives 1, 1, 1 (eighth review: at 8 files the
    # last 4 is 2, 2, 0 either way)
    ({"front_cut": True, "files": 12}, "as TensorFlow cuts them"),
    # fifth review, finding 1: 12 files on 3 workers, 22, 21 and 21 examples, 4 global batches of 6 each: nobody
    # runs out, and a last batch not empty is correct (the old proof failed it: fewer examples, not empty)
    ({"files": 12}, None),
    # ninth review, finding 3: 2 replicas a worker, 12 files: a last 9 is cut over 6 replicas in sync (2, 2, 2, 2, 1, 0),
    # so the worker's steps are 4, 4, 1, where a cut over its 3 workers would expect 3, 3, 3; tenth review,
    # finding 1: the lesson's job runs one replica a worker, so the proof, past the cut, fails it there
    ({"files": 12, "per_worker": 2}, "one replica a worker"),
    # eleventh review, finding 2: one GPU a worker (make_strategy makes one GPU replica where a worker sees one GPU):
    # one replica a worker, W in sync, and the old proof (in sync only) passed it
    ({"device": "GPU"}, "on a CPU"),
    # 14th review, finding 1: both runs' workers on one node (a job of --nodes=1): the hosts were printed, not asserted
    ({"nodes": 1}, "should run on min"),
    # the second staged epoch read half its batches from the shared files (counted per pass)
    ({"staged_reads": [(128, 0), (0, 64), (32, 32), (0, 64)]}, "staged epochs should read nothing from the shared"),
    # fourth review, finding 5: the cache's later epochs read nothing from the shared files, and gave nothing either
    ({"cache_given": (64, 0, 0)}, "give all their batches from its file"),
    # this kernel's staged copy: half the files copied, or a file whose bytes differ from the shared one's
    ({"copied": 4}, "byte for byte"), ({"altered": True}, "byte for byte")],
    ids=["as run", "a worker missing", "manual shard", "an example twice", "no reshuffle", "bind mount",
         "a worker's file altered", "orders of every file", "stopped early", "no empty batch at the end",
         "last batch cut from the front", "12 files", "2 replicas a worker", "a GPU a worker", "one node",
         "staged epoch reads shared", "empty cache replay", "half copied", "copy altered"])
def test_lesson_16_gathering_cell_counts_files_and_examples_from_the_workers_reports(tmp_path, changes, match):
    """From the workers' raw reports (two runs, 2 and 3 workers, each worker on its own node) and
    the simulated reads' counts per pass: the files, the examples, the orders and the copies each
    worker read, and where each pass's batches came from, must fail the proof through the cells'
    own counting when one of them is broken."""
    (tmp_path / "shared").mkdir()
    changes = dict(changes)
    workers_3 = changes.pop("workers_3", 3)
    files = changes.get("files", 8)
    copied, altered = changes.pop("copied", files), changes.pop("altered", False)
    staged_reads = changes.pop("staged_reads", [(128, 0), (0, 64), (0, 64), (0, 64)])
    cache_given = changes.pop("cache_given", (64, 64, 64))  # the cache's later epochs: its file's batches
    staged = _shared_and_staged_16(tmp_path, files, copied, altered)
    reports = {2: _reports_16(tmp_path, 2, 64, **changes), 3: _reports_16(tmp_path, 3, 64, **changes)[:workers_3]}
    holds_unless(match, gather_and_prove, "16_input_at_scale.ipynb",
                 _gathering_16(tmp_path, reports, files, staged, staged_reads, cache_given))


def _shared_and_staged_16(tmp_path: Path, files: int, copied: int, altered: bool) -> Path:
    """`files` small shared files and this kernel's staged copy of the first `copied` (file 3 a byte short if
    `altered`); the staged directory."""
    staged = tmp_path / "node-local" / "staged"
    staged.mkdir(parents=True)
    for k in range(files):
        name = f"cifar10-train-{k:05d}-of-{files:05d}.tfrecord"
        (tmp_path / "shared" / name).write_bytes(bytes([k]) * 100)
        if k < copied:
            (staged / name).write_bytes(bytes([k]) * (99 if altered and k == 3 else 100))
    return staged


def _legacy_split_16() -> dict:
    """legacy_split as the lesson defines it (cell 16, where it is checked against TensorFlow's own cut)."""
    namespace = {}
    exec(function_source("16_input_at_scale.ipynb", "legacy_split"), namespace)
    return {"legacy_split": namespace["legacy_split"]}


def _gathering_16(tmp_path: Path, reports: dict, files: int, staged: Path, staged_reads: list, cache_given: tuple,
                  **more) -> dict:
    """What lesson 16's gathering cell reads: the workers' raw reports, the simulated reads' counts per pass
    (read_from computed by the lesson's own cell), the rest as a correct run has it; `more` on top."""
    ok = OK["16_input_at_scale.ipynb"]
    raw = {**{k: v for k, v in ok.items() if k not in ("took", "expected", "counts", "covered", "staged_everywhere",
                                                        "reshuffled", "read_from", "copy_complete", "staged_files",
                                                        "shared_files", "orders_own", "steps", "ran_out", "split_even")},
           "reports": reports, "SHARDS": files, "train_size": 64, "staged_records": 64, "shared": tmp_path / "shared",
           "staged": staged, "os": os, **_legacy_split_16(),
           "print": lambda *a, **k: None,
           "reads": {name: [{"shared": shared, "node-local": local, "given": given} for shared, local, given in passes]
                     for name, passes in {"shared every epoch": [(64, 0, 64)] * 3,
                                          "cache(filename=...)": list(zip((64, 0, 0), (0, 0, 0), cache_given)),
                                          "staged": [(*r, sum(r)) for r in staged_reads]}.items()}, **more}
    # fs.timed_pass's counts, pass by pass: batches read by where, and the batches each pass gave
    exec(compile(cell_defining("16_input_at_scale.ipynb", "read_from = {name:"), "16 read_from", "exec"), raw)
    return raw


def test_lesson_16_at_one_worker_the_split_check_says_not_shown(tmp_path, capsys):
    """Eighth review, finding 4: at NODES = 1 the run of one worker cuts nothing (each global batch goes whole to its
    one replica), and in quick mode the run of 2 has no last, partial global batch (1,024 examples each, 8 of 128):
    the split check passed on nothing there, and the gathering printed [True] for the run of 1. The lesson's
    gathering cell and proof on the workers' reports of runs of 1 and 2 (64 examples in 8 files, 32 each, whole
    global batches of 4): the proof passes, says NOT SHOWN at one worker and NOT SHOWN (no partial global batch),
    and the gathering prints NOT SHOWN for the run of 1; a run of 2 and 3 (quick mode's NODES = 2) says neither."""
    (tmp_path / "shared").mkdir()
    staged = _shared_and_staged_16(tmp_path, 8, 8, False)
    reads = [(128, 0), (0, 64), (0, 64), (0, 64)]
    one = {1: _reports_16(tmp_path, 1, 64, nodes=1), 2: _reports_16(tmp_path, 2, 64, nodes=1)}
    gather_and_prove("16_input_at_scale.ipynb", _gathering_16(tmp_path, one, 8, staged, reads, (64, 64, 64), NODES=1,
                                                              hidden_first={1: True, 2: True}, print=print))
    out = capsys.readouterr().out
    assert "NOT SHOWN at one worker: the run of 1 worker cut nothing" in out, out
    assert "cut over W steps as TensorFlow cuts it: {1: 'NOT SHOWN at one worker', 2: [True, True]}" in out, out
    assert "NOT SHOWN (no partial global batch): examples per worker {1: [64], 2: [32, 32]}" in out, out
    run_proof("16_input_at_scale.ipynb", {**OK["16_input_at_scale.ipynb"], "print": print})
    out = capsys.readouterr().out
    assert "NOT SHOWN" not in out and "FILE sharding gave each of 2 and 3 workers" in out, out


@pytest.mark.parametrize("shards", [8, 4, 16])
def test_lesson_16_workers_make_enough_passes_that_one_order_by_chance_stays_below_one_in_a_million(shards):
    """read_shards.py's passes: for every NODES the lesson allows (SHARDS >= NODES + 1), the chance that
    every worker's shuffled file list came in one order on all its passes, on both runs, is below 1e-6
    (7 workers on 8 files: one worker has two files, 21 passes, 2**-20); two passes, the old count, are
    not enough there."""
    import re

    from tests.support.notebooks import written_programs

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


def test_lesson_16_proof_reads_the_counts_not_the_clock_nor_the_simulated_waits(capsys):
    """Second review, finding 1: other jobs on a busy machine stretch a pass's seconds on the clock (a staged
    epoch 1.2 s, slower than a shared one; the cache's second epoch 1.0 s): the proof must pass that run. Third
    review, P1: the simulated waits follow from the counts by helpers/shared_fs.py's construction (it sleeps exactly
    when a batch's files are shared; tests/test_shared_fs.py checks it): the proof prints them, proves nothing
    with them, and passes whatever they are."""
    ok = OK["16_input_at_scale.ipynb"]
    loaded = {**ok, "epochs": {**ok["epochs"], "staged": [0.03, 1.2, 0.02], "cache(filename=...)": [0.97, 1.0, 0.02]},
              "waits": {**ok["waits"], "staged": [1.8, 0.02, 0.0, 0.0], "shared every epoch": [0.3, 0.3, 0.3]}}
    run_proof("16_input_at_scale.ipynb", loaded)
    assert "their later epochs never (simulated waits: the staging 1.8 s, a shared epoch 0.3 s)" in capsys.readouterr().out


def _one_node_16() -> dict:
    """A correct run at NODES = 1: 8 files over 1 worker, then 2 (4 each): every run even, nothing runs out."""
    files = {1: [list(range(8))], 2: [[0, 2, 4, 6], [1, 3, 5, 7]]}
    return {**OK["16_input_at_scale.ipynb"], "NODES": 1, "reports": {1: [{}], 2: [{}, {}]}, "expected": files,
            "hidden_first": {1: True, 2: True}, "orders_own": {1: True, 2: True}, "steps": {1: [32], 2: [16]}, "fills": {1: [32], 2: [8, 8]},
            "ran_out": {1: [], 2: []}, "counts": {1: [2048], 2: [1024, 1024]}, "covered": {1: True, 2: True},
            "partial": {1: [0], 2: [0, 0]}, "device_types": {1: [["CPU"]], 2: [["CPU"], ["CPU"]]},
            "hosts": {1: ["node1"], 2: ["node1"]},  # NODES = 1: both runs on one node
            "staged_everywhere": {1: True, 2: True}}


def test_lesson_16_proof_says_not_shown_where_no_run_is_uneven(capsys):
    """Second review, finding 3: at NODES = 1 no run is uneven, so no worker runs out and the empty-batch check
    looks at nobody: the proof must say NOT SHOWN, and its last line must not claim it; at NODES = 2 (a run
    of 3 workers on 8 files: 3, 3 and 2) it says nothing of the kind."""
    run_proof("16_input_at_scale.ipynb", _one_node_16())
    out = capsys.readouterr().out
    assert "NOT SHOWN (no uneven run)" in out and "ran out stepped on" not in out, out
    assert "NOT SHOWN at one worker" in out, out  # eighth review, finding 4: the run of 1 cut nothing
    # third review, finding 7: with one worker nothing is split
    assert "each of 2 workers its own files (the 1 worker read all 8 files)" in out and "each of 1 and" not in out, out
    run_proof("16_input_at_scale.ipynb", OK["16_input_at_scale.ipynb"])
    out = capsys.readouterr().out
    assert "NOT SHOWN" not in out and "(a worker that ran out stepped on with empty batches)" in out, out
    assert "FILE sharding gave each of 2 and 3 workers its own files, every example once" in out, out


def test_lesson_16_proof_says_the_job_scripts_staging_is_not_shown_without_slurm(capsys):
    """13th review, finding 3: without Slurm the copy the workers read is read_on's shutil.copytree stand-in, and
    read_shards.sbatch's staging (mktemp, tar, sbcast) never runs (tests/test_slurm.py runs it): the proof must say
    NOT SHOWN there and its last line name the copy read; on Slurm it says neither. The closing line's staged copy
    that read the shared file system once is this kernel's (fs.staged_copy), named so either way."""
    stand_in = "NOT SHOWN without Slurm: the job script's staging did not run; the copy checked is read_on's local stand-in"
    run_proof("16_input_at_scale.ipynb", {**OK["16_input_at_scale.ipynb"], "use_slurm": False})
    out = capsys.readouterr().out
    assert stand_in in out and "read from read_on's local stand-in for the job script's copy;" in out, out
    # 14th review, finding 1: the hosts are asserted on Slurm only; without it every worker ran here
    assert "NOT SHOWN without Slurm: every worker ran on this machine" in out, out
    assert "the job script's staged copy" not in out, out
    run_proof("16_input_at_scale.ipynb", OK["16_input_at_scale.ipynb"])
    out = capsys.readouterr().out
    assert "NOT SHOWN" not in out and "read from the job script's staged copy (one sbcast of a tar);" in out, out
    assert "this kernel's staged copy (fs.staged_copy) read the shared file system once" in out, out
    # 14th review, finding 2: on Slurm with one directory for all nodes (this course's local Slurm without
    # COURSE_NODE_LOCAL) the job script copies with cp, and its sbcast path never runs (making sbcast exit 1 passed):
    # the proof says NOT SHOWN for it, and its last line names the cp
    cp = "one cp, one directory for all nodes"
    run_proof("16_input_at_scale.ipynb", {**OK["16_input_at_scale.ipynb"], "staged_how": {2: cp, 3: cp}})
    out = capsys.readouterr().out
    assert "NOT SHOWN (one node, or nodes that share one directory): the job script copied with cp" in out, out
    assert f"read from the job script's staged copy ({cp});" in out, out


@pytest.mark.parametrize("train_size,batch,steps,said", [
    (2048, 32, 64, ""),  # quick mode: the whole split, in whole batches
    (50_000, 128, 390, "whole batches: 391 with the last, partial one"),  # workshop: not cut, 390.6 batches
    # third review, finding 6: "reading 32 batches per epoch (epochs cut by COURSE_MAX_STEPS ...)" at a cap of 4
    (50_000, 128, 4, "COURSE_MAX_STEPS=4 cuts the epochs of 391 batches; read here: TIMED = max(COURSE_MAX_STEPS, 32) = 32"),
    (50_000, 128, 100, "COURSE_MAX_STEPS=100 cuts the epochs of 391 batches; read here: TIMED = max(COURSE_MAX_STEPS, 32) = 100")])
def test_lesson_16_figure_title_says_the_epochs_are_cut_only_when_they_are(train_size, batch, steps, said):
    """Second review, finding 6: the title said "epochs cut" in workshop mode, whose epochs are whole (390 whole
    batches of 50,000 images; 391 with the last, partial one): it says "cut" only when COURSE_MAX_STEPS cut them."""
    spec = {"train_size": train_size, "BATCH": batch, "STEPS": steps, "TIMED": max(steps, 32)}
    exec(assignment_source("16_input_at_scale.ipynb", "ALL"), spec)
    exec(assignment_source("16_input_at_scale.ipynb", "cut"), spec)
    assert (said in spec["cut"]) and bool(spec["cut"]) == bool(said), spec["cut"]


@pytest.mark.parametrize("change,match", [
    (None, None),
    # an epoch's TIMED batches read for the staging (32 of 32 here: ALL too), the copy made apart from the reads;
    # the batches' count is the split's, the records are not (1,024 read of 1,000: 24 twice)
    (("staging = fs.timed_pass(fs.staged_copy(shared, staged, BATCH))",
      "staging = fs.timed_pass(fs.records(shared, BATCH, TIMED)); shutil.copytree(shared, staged)"), "every record"),
    # staged twice: the split read once more after the copy
    (("fs.timed_pass(fs.staged_copy(shared, staged, BATCH))",
      "fs.timed_pass(itertools.chain(fs.staged_copy(shared, staged, BATCH), fs.records(shared, BATCH)))"), "every record"),
    # no staging read: the files copied beside the reader, nothing read or timed
    (("staging = fs.timed_pass(fs.staged_copy(shared, staged, BATCH))",
      "staging = fs.timed_pass([]); shutil.copytree(shared, staged)"), "every record"),
], ids=["as written", "an epoch's batches", "staged twice", "no staging read"])
def test_lesson_16_staging_reads_every_record_once_into_the_copy(tmp_path, change, match):
    """Second review, finding 2: with TIMED == ALL (quick mode's 64 and 64) a staging that read an epoch's batches
    passed the batch count. The notebook's staging cell, run for real through the simulated file system on
    1,000 records in 8 files at batch 32 (TIMED = ALL = 32): the proof counts the records staged (the split's,
    once) and this kernel's copy byte for byte; an epoch's batches (1,024 records), the split twice, or no
    staging read must fail it."""
    import itertools
    import shutil

    from helpers.shared_fs import SimulatedSharedFS

    shards = _lesson_16_shards(tmp_path / "shared", 1000, lambda i: i % 8)
    source = cell_defining("16_input_at_scale.ipynb", 'staged = node_local / "staged"')
    if change is not None:
        assert change[0] in source
        source = source.replace(*change)
    (tmp_path / "node-local").mkdir()
    ok = OK["16_input_at_scale.ipynb"]
    run = {"fs": SimulatedSharedFS(tmp_path / "shared", mb_s=1e4, latency_ms=1.0), "shared": tmp_path / "shared",
           "node_local": tmp_path / "node-local", "BATCH": 32, "TIMED": 32, "parse_batch": shards["parse_batch"],
           "shutil": shutil, "itertools": itertools, "epochs": {name: list(ok["epochs"][name]) for name in ok["epochs"]},
           "reads": {name: [] for name in ok["epochs"]}, "waits": {name: [] for name in ok["epochs"]}}
    exec(function_source("16_input_at_scale.ipynb", "record"), run)
    run["epochs"]["staged"] = []
    exec(compile(source, "16 staging", "exec"), run)
    reads = {name: run["reads"][name] or [{"shared": n, "node-local": 0, "given": n} for n in ok["read_from"][name]["shared"]]
             for name in run["reads"]}
    waits = {name: run["waits"][name] or ok["waits"][name] for name in run["waits"]}
    raw = {**{k: v for k, v in ok.items() if k not in ("took", "read_from", "copy_complete", "staged_files", "shared_files")},
           "reports": {2: _reports_16(tmp_path, 2, 1000), 3: _reports_16(tmp_path, 3, 1000)}, "train_size": 1000,
           "TIMED": 32, "replayed": 32, "uncached": 32, "staged_records": run["staged_records"], "staging_s": run["staging_s"], "staged": run["staged"],
           "shared": tmp_path / "shared", "epochs": {**ok["epochs"], "staged": run["epochs"]["staged"]}, "reads": reads,
           "waits": waits, "SHARED_LATENCY_MS": 1.0, "os": os, "print": lambda *a, **k: None, **_legacy_split_16()}
    exec(compile(cell_defining("16_input_at_scale.ipynb", "read_from = {name:"), "16 read_from", "exec"), raw)
    raw["read_from"] = {**raw["read_from"],
                        "cache(filename=...)": {"shared": [32, 0, 0], "node-local": [0] * 3, "cache file": [0, 32, 32]},
                        "shared every epoch": {"shared": [32] * 3, "node-local": [0] * 3, "cache file": [0] * 3}}
    holds_unless(match, gather_and_prove, "16_input_at_scale.ipynb", raw)
    if match is None:
        assert run["staged_records"] == 1000 and run["reads"]["staged"][0]["shared"] == 8 * math.ceil(125 / 32)


@pytest.mark.parametrize("first_done,lock_kept", [(False, False), (True, False), (False, True)],
                         ids=["while the first writes", "after the first finished", "a lock kept after the clash"])
def test_lesson_16_a_second_pipeline_under_one_cache_name_stops_only_while_the_first_writes(tmp_path, first_done,
                                                                                             lock_kept):
    """Second review, finding 4: the clash is shown, not said: the lesson's cell, run for real, gets
    AlreadyExistsError from the second pipeline while the first is writing its cache; once the first has
    finished (its whole pass read) the second reads that cache, the error is gone, and the proof fails.
    Twelfth review, finding 3: the failed second deletes the lock it found (a killed job's, or here the first's),
    so a third pipeline under the name writes its own cache; a lock left in place (planted after the clash, as a
    TensorFlow that kept it would leave it) stops the third, and the proof fails."""
    import os

    import tensorflow as tf

    source = cell_defining("16_input_at_scale.ipynb", 'one_name = str(node_local / "one-name")')
    if first_done:
        assert "next(first)  #" in source
        source = source.replace("next(first)  #", "list(first)  #")
    if lock_kept:
        assert source.count("try:  # a third") == 1
        source = source.replace("try:  # a third", 'open(one_name + "_0.lockfile", "w").close()\ntry:  # a third')
    run = {"tf": tf, "os": os, "node_local": tmp_path, "print": lambda *a, **k: None}
    exec(compile(source, "16 clash", "exec"), run)
    assert run["clash"].startswith("AlreadyExistsError") != first_done, run["clash"]
    # twelfth review, finding 1: while the first writes, the failed second's end deletes the first's lock and cache
    # file, so the first, read on, stops too (NotFoundError); after the first finished, nothing is left to read
    assert run["first_then"].startswith("NotFoundError") != first_done, run["first_then"]
    # after the first finished, the third reads the first's cache (0-7), not its own data; with the lock kept it stops
    assert run["after_clash"].startswith("gave [0, 1, 2, 3, 4, 5, 6, 7]" if first_done else
                                         "AlreadyExistsError: There appears to be a concurrent caching iterator"
                                         if lock_kept else "wrote its own cache"), run["after_clash"]
    match = ("should stop with AlreadyExistsError" if first_done else "should write its own cache" if lock_kept
             else None)
    holds_unless(match, run_proof, "16_input_at_scale.ipynb",
                 {**OK["16_input_at_scale.ipynb"], "clash": run["clash"], "first_then": run["first_then"],
                  "after_clash": run["after_clash"]})


@pytest.mark.parametrize("cleaned", [True, False], ids=["as written", "without its clean-up"])
def test_lesson_16_the_clash_cell_run_twice_shows_the_clash_again(tmp_path, cleaned):
    """Twentieth review, finding 3: the clash cell run twice in one kernel: its third pipeline only read the first
    run's cache under the name (10-17, the first run's third's), and `after_clash == "wrote its own cache"` passed. As
    written (the name's files removed first), the second run gives the first run's three outcomes and the proof
    passes; without that clean-up, the third found a finished cache under the name before it, which after_clash now
    says, and the proof fails (on the clash, which the earlier cache hides, and on after_clash)."""
    import os

    import tensorflow as tf

    source = cell_defining("16_input_at_scale.ipynb", 'one_name = str(node_local / "one-name")')
    if not cleaned:
        line = 'for old in node_local.glob("one-name*"):'
        assert source.count(line) == 1, line
        source = source.replace(line, "for old in []:")
    run = {"tf": tf, "os": os, "node_local": tmp_path, "print": lambda *a, **k: None}
    outcomes = []
    for _ in range(2):
        exec(compile(source, "16 clash", "exec"), run)
        outcomes.append((run["clash"][:19], run["first_then"][:13], run["after_clash"]))
    assert outcomes[0] == ("AlreadyExistsError:", "NotFoundError", "wrote its own cache"), outcomes
    if cleaned:
        assert outcomes[1] == outcomes[0], outcomes
    else:
        assert outcomes[1][2] == "gave [10, 11, 12, 13, 14, 15, 16, 17] (a finished cache was under the name before it)", \
            outcomes
    ok = OK["16_input_at_scale.ipynb"]
    holds_unless(None if cleaned else "should stop with AlreadyExistsError", run_proof, "16_input_at_scale.ipynb",
                 {**ok, "clash": run["clash"], "first_then": run["first_then"], "after_clash": run["after_clash"]})
    holds_unless(None if cleaned else "should write its own cache", run_proof, "16_input_at_scale.ipynb",
                 {**ok, "after_clash": run["after_clash"]})


@pytest.mark.parametrize("memory_on_top,runs,match", [(False, 1, None), (True, 1, "its files removed"), (False, 2, None)],
                         ids=["as written", "a memory cache on top", "its cells run twice"])
def test_lesson_16_the_cache_s_later_epochs_come_from_its_file(tmp_path, memory_on_top, runs, match):
    """Sixth review, finding 8: a memory cache on top of the file cache (`.cache(name).cache()`) gave the same counts
    (the first epoch from the shared files, the later ones from the cache, a later run under the name its batches),
    so the proof passed it. The lesson's cache cells, run for real through the simulated file system (256 records,
    64 batches of 4 an epoch): with the cache's files removed, the same pipeline's next pass reads all 64 batches
    from the shared files again; the variant's reads none, and the proof fails. Finding 10: the cells run a second
    time (the first cell made the directory once and kept the earlier passes) give the same figures."""
    import tensorflow as tf

    from helpers.shared_fs import SimulatedSharedFS

    shards = _lesson_16_shards(tmp_path / "shared", 256, lambda i: i % 8)
    made = cell_defining("16_input_at_scale.ipynb", 'node_local = job_dir / "node-local"')
    if memory_on_top:
        assert made.count('.cache(str(node_local / "cache"))') == 1
        made = made.replace('.cache(str(node_local / "cache"))', '.cache(str(node_local / "cache")).cache()')
    cells = [made] + [cell_defining("16_input_at_scale.ipynb", m) for m in ("later_run = later_run.cache(", "uncached = ")]
    ok = OK["16_input_at_scale.ipynb"]
    run = {"fs": SimulatedSharedFS(tmp_path / "shared", mb_s=1e4, latency_ms=1.0), "shared": tmp_path / "shared",
           "job_dir": tmp_path, "BATCH": 4, "TIMED": 64, "parse_batch": shards["parse_batch"], "tf": tf,
           "print": lambda *a, **k: None, **{kept: {name: [] for name in ok["epochs"]} for kept in ("epochs", "reads", "waits")}}
    exec(function_source("16_input_at_scale.ipynb", "record"), run)
    for _ in range(runs):
        for n, source in enumerate(cells):
            exec(compile(source, f"16 cache cell {n}", "exec"), run)
    way = "cache(filename=...)"  # the cache's passes, counted by the lesson's cell; the other ways' as a run has them
    counted = {"reads": {way: run["reads"][way]}, "epochs": {way: run["epochs"][way]}, "waits": {way: run["waits"][way]},
               "staging_s": ok["staging_s"], "print": lambda *a, **k: None}
    exec(compile(cell_defining("16_input_at_scale.ipynb", "read_from = {name:"), "16 read_from", "exec"), counted)
    assert counted["read_from"][way] == ok["read_from"][way], counted["read_from"]
    assert run["replayed"] == 64 and run["cache_files"] == ok["cache_files"], (run["replayed"], run["cache_files"])
    holds_unless(match, run_proof, "16_input_at_scale.ipynb", {**ok, "read_from": {**ok["read_from"], **counted["read_from"]},
                                                                "uncached": run["uncached"], "replayed": run["replayed"]})
    assert run["uncached"] == (0 if memory_on_top else 64), run["uncached"]


def test_lesson_16_figure_draws_the_staging_bar_on_its_job_start_tick(tmp_path, monkeypatch):
    """Third review, finding 6: the staging bar was drawn at x = -1 + width (-0.75), off its "job start" tick at -1.
    The figure's cell, run on a correct run's figures: the staging bar stands on the tick. Fourth review, finding 2:
    the bar was the staging's seconds on the clock, this kernel's record-by-record copy included: its solid part is
    now the simulated wait (1.8 s here), the rest of the clock (0.1 s) hatched on top of it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    monkeypatch.setenv("COURSE_FIGURES_DIR", str(tmp_path))
    ok = OK["16_input_at_scale.ipynb"]
    run = {"epochs": ok["epochs"], "staging_s": ok["staging_s"], "waits": ok["waits"], "staged_records": 4096, "training_s": 0.5,
           "TIMED": 64, "step_s": 0.008, "train_size": 4096, "BATCH": 32, "STEPS": 128, "SHARED_MB_S": 25.0,
           "SHARED_LATENCY_MS": 10.0, "dataset": SimpleNamespace(label="synthetic")}
    exec(compile(cell_defining("16_input_at_scale.ipynb", 'plots.save(fig, "16_shared_file_system")'), "16 figure",
                 "exec"), run)
    bars = {c.get_label(): [p.get_x() + p.get_width() / 2 for p in c.patches] for c in run["ax"].containers}
    staging = next(x for label, x in bars.items() if label.startswith("staging"))
    ticks = dict(zip((t.get_text() for t in run["ax"].get_xticklabels()), run["ax"].get_xticks()))
    spans = [(p.get_y(), p.get_height()) for c in run["ax"].containers if c.get_label().startswith("staging")
             for p in c.patches]
    plt.close(run["fig"])
    assert staging == [pytest.approx(ticks["job start"])] and ticks["job start"] == -1, (staging, ticks)
    assert spans == [(0, pytest.approx(1.8)), (pytest.approx(1.8), pytest.approx(0.1))], spans
    assert bars["staged"] == [pytest.approx(e + 0.25) for e in range(3)], bars  # the epochs' bars as they were


@pytest.mark.parametrize("device", ["CPU", "GPU"])
def test_lesson_16_reading_against_training_names_the_step_s_device(device):
    """Twentieth review, finding 2: the print said "every way reads faster than this CPU trains" whatever device the
    step ran on, and in workshop mode on a GPU machine the kernel's step runs on its GPU. The cell, run on a correct
    run's figures with the step's device as cell 44 names it, says that device."""
    ok = OK["16_input_at_scale.ipynb"]
    said = []
    run = {"np": np, "epochs": ok["epochs"], "waits": ok["waits"], "TIMED": 64, "step_s": 0.5, "training_s": 32.0,
           "step_device": f"this kernel's {device}", "print": lambda *a, **k: said.append(" ".join(map(str, a)))}
    exec(compile(cell_defining("16_input_at_scale.ipynb", "shared_per_batch_s, shared_wait_per_batch_s ="),
                 "16 reading against training", "exec"), run)
    assert len(said) == 1 and "CPU" not in said[0].replace(device, "") and "GPU" not in said[0].replace(device, ""), said
    assert f"a training step 500 ms on this kernel's {device}," in said[0], said
    assert said[0].endswith(f"every way reads faster than this kernel's {device} trains"), said


@pytest.mark.parametrize("reads,match", [("its copy", None), ("$SHARED", "should be a copy of a shared file")])
def test_lesson_16_workers_report_the_files_their_pipeline_opened(tmp_path, reads, match):
    """Third review, finding 2: each worker reported the directory it was handed (--files), resolved, and the
    checksums of the files in it, not what its pipeline read: a read_shards.py that globbed $SHARED instead (a
    Slurm job's environment carries it) passed the proof. The program as the lesson writes it, run for real as one
    worker (MWMS alone) with SHARED set in its environment and its copy as --files; its report goes through the
    lesson's gathering cell and proof: as written it opened its copy's 8 files, each a copy, and the proof passes;
    the variant that reads $SHARED opened the shared files, and the proof fails."""
    import json
    import shutil
    import subprocess
    import sys

    from helpers.take_home import copy_beside
    from tests.support.notebooks import written_programs

    programs = written_programs("16_input_at_scale.ipynb")
    program = programs['"read_shards.py"}']
    if reads == "$SHARED":
        line = 'pattern = os.path.join(args.files, "*.tfrecord")'
        assert program.count(line) == 1, line
        program = program.replace(line, 'pattern = os.path.join(os.environ.get("SHARED", args.files), "*.tfrecord")')
    (tmp_path / "read_shards.py").write_text(program)
    (tmp_path / "shards.py").write_text(programs['"shards.py"}'])
    copy_beside(tmp_path)
    shared, copy = tmp_path / "shared", tmp_path / "node-local" / "copy"
    _lesson_16_shards(shared, 64, lambda i: i % 8)
    shutil.copytree(shared, copy)
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("SLURM_")}
    done = subprocess.run([sys.executable, str(tmp_path / "read_shards.py"), "--files", str(copy), "--out",
                           str(tmp_path / "out"), "--per-replica-batch", "4"],
                          env={**env, "SHARED": str(shared), "TF_CPP_MIN_LOG_LEVEL": "2"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "worker-0.json").read_text())
    assert [d.rsplit("/", 1)[-1] for d in report["devices"]] == ["device:CPU:0"], report["devices"]  # its one replica
    ok = OK["16_input_at_scale.ipynb"]
    raw = {**{k: v for k, v in ok.items() if k not in ("expected", "counts", "covered", "staged_everywhere", "reshuffled",
                                                        "copy_complete", "staged_files", "shared_files", "orders_own",
                                                        "steps", "ran_out", "split_even")},
           "NODES": 1, "reports": {1: [report]}, "hidden_first": {1: True}, "SHARDS": 8, "train_size": 64,
           "staged_records": 64, "shared": shared, "staged": copy, "os": os, **_legacy_split_16()}
    holds_unless(match, gather_and_prove, "16_input_at_scale.ipynb", raw)
    folders = {os.path.dirname(f["path"]) for f in report.get("opened", [])}
    assert folders == {str((shared if reads == "$SHARED" else copy).resolve())}, folders


@pytest.mark.parametrize("env", [{"COURSE_JOB_GPUS_PER_TASK": "1"}, {"SLURM_GPUS_ON_NODE": "4"},
                                 {"COURSE_JOB_GPUS_PER_TASK": "2", "COURSE_CLASS_LAYOUT": "gpu"}],
                         ids=["one GPU a task", "a GPU server (auto)", "two GPUs a task, gpu layout"])
def test_lesson_16_submits_its_job_without_gpus(env, monkeypatch):
    """Ninth review, finding 2: the job took the class's options (job_options), which add --gpus-per-task=N on a
    GPU class, so read_shards.py ran on GPUs there, the case the lesson says was never run. The lesson's `added`
    keeps the class's other options (node sharing) and drops every GPU request."""
    from helpers.slurm.submit import job_options

    for name in ("COURSE_JOB_GPUS_PER_TASK", "COURSE_CLASS_LAYOUT", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS",
                 "SLURM_STEP_GPUS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    given = job_options()
    assert any(o.startswith("--gpus") for o in given), given  # the class's options ask for GPUs here
    namespace = {"job_options": job_options, "use_slurm": True}
    exec(assignment_source("16_input_at_scale.ipynb", "added"), namespace)
    assert namespace["added"] == [o for o in given if not o.startswith("--gpus")], (given, namespace["added"])


@pytest.mark.parametrize("rule,match", [
    (None, None),
    # an even split (np.array_split's), not TensorFlow's cut from the front: 4 over 3 as 2, 1, 1
    ("    c = -(-n // replicas)\n    return [max(0, min(c, n - c * j)) for j in range(replicas)]",
     "the proof's rule"),
], ids=["as written", "an even split"])
def test_lesson_16_cell_16_checks_the_proof_s_cut_against_tensorflow_s(rule, match):
    """Ninth review, finding 8: cell 16 printed TensorFlow's cut (128 over 3: 43, 43, 42 ...) and asserted nothing;
    the proof's rule (legacy_split) was never compared with it. The cell, run for real, asserts each cut equals
    legacy_split: a rule that splits evenly (4 over 3 as 2, 1, 1) fails it."""
    import tensorflow as tf

    source = cell_defining("16_input_at_scale.ipynb", "_LegacyRebatchDataset(")
    assert "def legacy_split(n, replicas)" in source, "cell 16 defines the proof's rule"
    if rule is not None:
        assert source.count(rule) == 1, rule
        source = source.replace(rule, "    return [len(p) for p in __import__('numpy').array_split(range(n), replicas)]")
    holds_unless(match, exec, compile(source, "16 cut", "exec"), {"tf": tf, "print": lambda *a, **k: None})


def _read_on(tmp_path: Path, shared: Path, run_local_workers, quiet: bool = False, change=None) -> dict:
    """The namespace of lesson 16's `read_on`, defined from its cell, with local (not Slurm) workers stood in for;
    `change`: (old, new), an edit of its source (old once in it)."""
    import json
    import shutil
    import sys
    import time

    namespace = {"use_slurm": False, "job_dir": tmp_path, "shared": shared, "hidden": tmp_path / "shared-hidden",
                 "hidden_first": {}, "staged_how": {}, "run_local_workers": run_local_workers, "shutil": shutil, "time": time,
                 "json": json, "sys": sys, "os": os}
    if quiet:
        namespace["print"] = lambda *a, **k: None
    source = function_source("16_input_at_scale.ipynb", "read_on")
    if change is not None:
        assert source.count(change[0]) == 1, change[0]
        source = source.replace(*change)
    exec(source, namespace)
    return namespace


@pytest.mark.parametrize("names", [False, True], ids=["the lesson's pipeline", "with names, as read_shards.py"])
def test_lesson_16_compute_batch_size_is_hidden_by_the_map_after_batch(tmp_path, names):
    """Eighteenth review, finding 3: cell 14 says TensorFlow cannot read a batch size off `sharded_dataset`
    because `parse_batch` is mapped after `batch`. compute_batch_size (distribute.py, lines 395-396) hands an
    unknown batch dimension to the C++ op ComputeBatchSize, which walks back through the ops that keep a batch's
    size (prefetch among them) to the batch and gives -1 at any other op: the lesson's pipeline gives -1, the same
    pipeline with that map taken out (prefetch kept) gives its batch, 192. Twenty-fourth review: with
    batch(drop_remainder=True) the map still hides it (parse_batch reshapes the images to (-1, 32, 32, 3)): -1 too."""
    from tensorflow.python.data.experimental.ops.distribute import compute_batch_size

    from tests.support.notebooks import written_programs

    _lesson_16_shards(tmp_path / "shared", 256, lambda i: i % 8)
    program = written_programs("16_input_at_scale.ipynb")['"shards.py"}']
    mapped = ".map(parse_batch, num_parallel_calls=tf.data.AUTOTUNE)"
    assert program.count(mapped) == 1
    whole = program.replace("records.batch(batch)", "records.batch(batch, drop_remainder=True)")
    assert whole != program
    for source, size in ((program, -1), (program.replace(mapped, ""), 192), (whole, -1)):
        shards = {}
        exec(compile(source, "16 shards.py", "exec"), shards)
        data = shards["sharded_dataset"](str(tmp_path / "shared" / "*.tfrecord"), 192, names=names)
        assert int(compute_batch_size(data)) == size, (size, source == program)
