"""Lesson 16's SIMULATED shared file system: TFRecord batches that wait for their bytes, counted by where their files are.

This machine's disk is local and fast, so a read of a file under the shared directory is made
to wait as long as its bytes would take at a stated bandwidth, plus a latency per request. Every
batch read through `records` is counted by the real location of its files (each path resolved),
not by the name of the directory it was asked for: a "node-local copy" that is a link to the
shared files counts in `batches["shared"]`. A pass also counts the elements it gave (`given`): a
`cache` above the reader gives its later passes' elements from its own file, which no read counts.
The seconds of each wait asked for are kept too (`waited_s`): a busy machine leaves them as they
are, unlike the clock's seconds, which other jobs stretch. `staged_copy` copies the files through
the same reader, so that a staged copy holds exactly what its counted, waited-for reads gave.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from .errors import CourseError

LOCATIONS = ("shared", "node-local")


@dataclass(frozen=True)
class Pass:
    """One pass over a pipeline: its seconds on the clock, what it read by location, and the simulated wait in it."""

    seconds: float  # the clock's: the waits, the reading and parsing, and whatever else the machine ran meanwhile
    batches: dict[str, int]  # batches read, by where their files are
    records: dict[str, int]  # records read, by where their files are
    waited_s: float  # the simulated waits asked for (shared reads only): the same under any load
    given: int  # elements the pass gave: beyond the batches read, a cache's replay of its file


class SimulatedSharedFS:
    """The files under `root` stand for the shared file system; every other file for node-local disk."""

    def __init__(self, root: Path, mb_s: float, latency_ms: float):
        self.root = Path(root).resolve()
        self.mb_s, self.latency_ms = mb_s, latency_ms
        self.batches = dict.fromkeys(LOCATIONS, 0)  # batches read so far, by location
        self.records_read = dict.fromkeys(LOCATIONS, 0)  # records read so far, by location
        self.waited_s = 0.0  # seconds of simulated wait asked for so far

    def location(self, path: str) -> str:
        """Where a file really is: a link to the shared files counts as shared."""
        return "shared" if Path(path).resolve().is_relative_to(self.root) else "node-local"

    def records(self, directory: Path, batch: int, batches: int | None = None):
        """`batches` batches of serialized records from the .tfrecord files in `directory`, in file order,
        repeated as needed (`batches` None: one pass, every record once); one request at a time, each batch
        counted where its files are, and made to wait when that is the shared files."""
        return self._batches(self._files(directory), batch, batches)

    def staged_copy(self, directory: Path, destination: Path, batch: int):
        """Copy the .tfrecord files in `directory` into `destination` (made new) through this reader: each file's
        records read once, in batches counted and waited for as `records` does, and written in their order to a
        file of the same name (the same bytes: a TFRecord file is its records, framed). Yields each batch once
        written, so that `timed_pass` of it is the copy's pass."""
        import tensorflow as tf

        files = self._files(directory)
        if Path(destination).exists():
            raise CourseError(f"{destination} exists: a staged copy is made new, never added to")
        Path(destination).mkdir(parents=True)
        for name in files:
            with tf.io.TFRecordWriter(str(Path(destination) / Path(name).name)) as writer:
                for records in self._batches([name], batch):
                    for record in records.numpy():
                        writer.write(record)
                    yield records

    def _files(self, directory: Path) -> list[str]:
        files = sorted(str(p) for p in Path(directory).glob("*.tfrecord"))
        if not files:
            raise CourseError(f"no .tfrecord file in {directory}")
        return files

    def _batches(self, files: list[str], batch: int, batches: int | None = None):
        """The files' records in batches (`records`), counted and made to wait where the files are."""
        import tensorflow as tf

        places = {self.location(f) for f in files}  # resolved now: the files a pass will open
        if len(places) > 1:
            raise CourseError(f"{Path(files[0]).parent}: some .tfrecord files are on the shared file system, some not")
        place = places.pop()

        def read(records):
            done = tf.py_function(lambda size, count: self._read(place, size, count),
                                  [tf.reduce_sum(tf.strings.length(records)), tf.size(records)], tf.bool)
            with tf.control_dependencies([done]):  # the records come after the wait
                return tf.identity(records)

        data = tf.data.TFRecordDataset(files)
        data = data.batch(batch) if batches is None else data.repeat().batch(batch).take(batches)
        return data.map(read)

    def _read(self, place: str, size, count) -> bool:
        """Count one batch of `count` records where its files are; on the shared files, wait for its bytes."""
        self.batches[place] += 1
        self.records_read[place] += int(count)
        if place == "shared":
            wait = self.latency_ms / 1000 + int(size) / (self.mb_s * 1e6)
            self.waited_s += wait
            time.sleep(wait)
        return True

    def timed_pass(self, data) -> Pass:
        """One pass over `data` (a pipeline of `records`, or `staged_copy`): its seconds on the clock, the batches
        and records it read from each location, the seconds of simulated wait in it, and the elements it gave."""
        batches, records, waited, began = dict(self.batches), dict(self.records_read), self.waited_s, time.perf_counter()
        given = sum(1 for _ in data)
        return Pass(time.perf_counter() - began, {k: self.batches[k] - batches[k] for k in LOCATIONS},
                    {k: self.records_read[k] - records[k] for k in LOCATIONS}, self.waited_s - waited, given)
