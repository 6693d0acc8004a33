"""Lesson 16's simulated shared file system counts batches by where their files really are, only shared reads wait,
the waits are kept as asked for, and a staged copy is made through the same reader."""

import pytest

from helpers.errors import CourseError
from helpers.shared_fs import SimulatedSharedFS


def _files(directory, n=2, records=8, size=1000):
    import tensorflow as tf

    directory.mkdir()
    for k in range(n):
        with tf.io.TFRecordWriter(str(directory / f"part-{k}.tfrecord")) as writer:
            for _ in range(records):
                writer.write(b"x" * size)
    return directory


def test_batches_are_counted_by_the_files_real_location_and_shared_reads_wait_for_their_bytes(tmp_path):
    shared = _files(tmp_path / "shared")
    local = _files(tmp_path / "local")
    (tmp_path / "link").symlink_to(shared)  # a "local" path that reaches the shared files
    fs = SimulatedSharedFS(shared, mb_s=1.0, latency_ms=100.0)  # 4 records of 1 kB: 104 ms a batch
    local_pass = fs.timed_pass(fs.records(local, 4, 4))
    assert local_pass.batches == {"shared": 0, "node-local": 4} and local_pass.waited_s == 0, local_pass
    done = fs.timed_pass(fs.records(shared, 4, 4))
    assert done.batches == {"shared": 4, "node-local": 0} and done.records == {"shared": 16, "node-local": 0}, done
    assert done.waited_s == pytest.approx(4 * 0.104) and done.seconds >= done.waited_s, done
    assert fs.timed_pass(fs.records(tmp_path / "link", 4, 4)).batches == {"shared": 4, "node-local": 0}


def test_the_waits_kept_are_those_asked_for_however_long_the_machine_takes(tmp_path, monkeypatch):
    """A busy machine stretches a pass on the clock (here each sleep takes 50 ms more), not its waits: the
    proof of lesson 16 reads the waits."""
    import time

    from helpers import shared_fs

    shared = _files(tmp_path / "shared")
    fs = SimulatedSharedFS(shared, mb_s=1.0, latency_ms=10.0)  # 4 records of 1 kB: 14 ms a batch
    idle = fs.timed_pass(fs.records(shared, 4, 4))
    sleep = time.sleep
    monkeypatch.setattr(shared_fs.time, "sleep", lambda s: sleep(s + 0.05))
    loaded = fs.timed_pass(fs.records(shared, 4, 4))
    assert loaded.seconds >= loaded.waited_s + 4 * 0.05 and loaded.waited_s == pytest.approx(idle.waited_s), (idle, loaded)


def test_a_pass_counts_what_it_gave_and_a_caches_later_passes_give_without_a_read(tmp_path):
    """Lesson 16's cache proof: a pipeline cached to a file gives every later pass's batches from that file, which
    no read counts; `given` counts them (the first pass: 4 read, 4 given; later: 0 read, 4 given), so an empty
    replay (a cache that gave nothing) is told apart from a full one."""
    shared = _files(tmp_path / "shared")
    fs = SimulatedSharedFS(shared, mb_s=1e6, latency_ms=0.0)
    cached = fs.records(shared, 4, 4).cache(str(tmp_path / "cache"))
    passes = [fs.timed_pass(cached) for _ in range(3)]
    assert [(p.batches["shared"], p.given) for p in passes] == [(4, 4), (0, 4), (0, 4)], passes
    assert fs.timed_pass(cached.take(0)).given == 0

def test_a_staged_copy_holds_what_its_counted_reads_gave_byte_for_byte(tmp_path):
    """staged_copy reads each file once through the reader (counted, waited for) and writes the records it read:
    the copy is the shared files byte for byte, every record once; a destination that exists is refused."""
    shared = _files(tmp_path / "shared", n=3, records=5)
    fs = SimulatedSharedFS(shared, mb_s=1e6, latency_ms=1.0)
    done = fs.timed_pass(fs.staged_copy(shared, tmp_path / "local" / "copy", 4))
    assert done.records == {"shared": 15, "node-local": 0} and done.batches == {"shared": 6, "node-local": 0}, done
    assert done.waited_s >= 6 * 0.001, done
    assert {p.name: p.read_bytes() for p in (tmp_path / "local" / "copy").iterdir()} == \
        {p.name: p.read_bytes() for p in shared.iterdir()}
    with pytest.raises(CourseError, match="exists"):
        fs.timed_pass(fs.staged_copy(shared, tmp_path / "local" / "copy", 4))


def test_records_come_in_file_order_and_repeat_to_the_batches_asked_for(tmp_path):
    shared = _files(tmp_path / "shared", n=2, records=3)
    fs = SimulatedSharedFS(shared, mb_s=1e6, latency_ms=0.0)
    sizes = [len(batch) for batch in fs.records(shared, 4, 3).as_numpy_iterator()]
    assert sizes == [4, 4, 4]  # 6 records, repeated to 3 batches of 4


def test_without_a_count_of_batches_records_are_one_pass_every_record_once(tmp_path):
    shared = _files(tmp_path / "shared", n=2, records=3)
    fs = SimulatedSharedFS(shared, mb_s=1e6, latency_ms=0.0)
    sizes = [len(batch) for batch in fs.records(shared, 4).as_numpy_iterator()]
    assert sizes == [4, 2] and fs.batches == {"shared": 2, "node-local": 0}, (sizes, fs.batches)  # 6 records, once


def test_a_directory_without_tfrecord_files_is_a_one_line_error(tmp_path):
    with pytest.raises(CourseError, match="no .tfrecord file"):
        SimulatedSharedFS(tmp_path, 1.0, 1.0).records(tmp_path, 4, 1)


def test_a_directory_with_files_on_both_sides_is_refused(tmp_path):
    shared = _files(tmp_path / "shared", n=1)
    mixed = _files(tmp_path / "mixed", n=1)
    (mixed / "part-9.tfrecord").symlink_to(shared / "part-0.tfrecord")
    with pytest.raises(CourseError, match="some not"):
        SimulatedSharedFS(shared, 1.0, 1.0).records(mixed, 4, 1)
