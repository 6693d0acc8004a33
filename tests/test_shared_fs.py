"""Lesson 16's simulated shared file system counts batches by where their files really are, and only shared reads wait."""

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
    assert fs.timed_pass(fs.records(local, 4, 4))[1] == {"shared": 0, "node-local": 4}
    seconds, read = fs.timed_pass(fs.records(shared, 4, 4))
    assert read == {"shared": 4, "node-local": 0} and seconds >= 4 * 0.104, (read, seconds)
    assert fs.timed_pass(fs.records(tmp_path / "link", 4, 4))[1] == {"shared": 4, "node-local": 0}


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
