"""Lesson 16's SIMULATED shared file system: TFRecord batches that wait for their bytes, counted by where their files are.

This machine's disk is local and fast, so a read of a file under the shared directory is made
to wait as long as its bytes would take at a stated bandwidth, plus a latency per request. Every
batch read through `records` is counted by the real location of its files (each path resolved),
not by the name of the directory it was asked for: a "node-local copy" that is a link to the
shared files counts in `batches["shared"]`.
"""

from __future__ import annotations

import time
from pathlib import Path

from .errors import CourseError

LOCATIONS = ("shared", "node-local")


class SimulatedSharedFS:
    """The files under `root` stand for the shared file system; every other file for node-local disk."""

    def __init__(self, root: Path, mb_s: float, latency_ms: float):
        self.root = Path(root).resolve()
        self.mb_s, self.latency_ms = mb_s, latency_ms
        self.batches = dict.fromkeys(LOCATIONS, 0)  # batches read so far, by location

    def location(self, path: str) -> str:
        """Where a file really is: a link to the shared files counts as shared."""
        return "shared" if Path(path).resolve().is_relative_to(self.root) else "node-local"

    def records(self, directory: Path, batch: int, batches: int | None = None):
        """`batches` batches of serialized records from the .tfrecord files in `directory`, in file order,
        repeated as needed (`batches` None: one pass, every record once); one request at a time, each batch
        counted where its files are, and made to wait when that is the shared files."""
        import tensorflow as tf

        files = sorted(str(p) for p in Path(directory).glob("*.tfrecord"))
        if not files:
            raise CourseError(f"no .tfrecord file in {directory}")
        places = {self.location(f) for f in files}  # resolved now: the files a pass will open
        if len(places) > 1:
            raise CourseError(f"{directory}: some .tfrecord files are on the shared file system, some not")
        place = places.pop()

        def read(records):
            done = tf.py_function(lambda size: self._read(place, size), [tf.reduce_sum(tf.strings.length(records))],
                                  tf.bool)
            with tf.control_dependencies([done]):  # the records come after the wait
                return tf.identity(records)

        data = tf.data.TFRecordDataset(files)
        data = data.batch(batch) if batches is None else data.repeat().batch(batch).take(batches)
        return data.map(read)

    def _read(self, place: str, size) -> bool:
        """Count one batch where its files are; on the shared files, wait for its bytes."""
        self.batches[place] += 1
        if place == "shared":
            time.sleep(self.latency_ms / 1000 + int(size) / (self.mb_s * 1e6))
        return True

    def timed_pass(self, data) -> tuple[float, dict[str, int]]:
        """One pass over `data`: its seconds, and the batches it read from each location."""
        before, began = dict(self.batches), time.perf_counter()
        for _ in data:
            pass
        return time.perf_counter() - began, {k: self.batches[k] - before[k] for k in LOCATIONS}
