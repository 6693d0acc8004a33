"""A check-script worker's working directory of its own: the real one's directories made anew, its files linked, a linked file copied before it is written.

Each worker stands in such a directory (`launch`, `worker`), so the script reads the
files it would (not those in hidden directories, left out), and whatever creates a file at a
relative path, Python or C++, creates it in that worker's directory alone: two workers creating
one path are seen doing so (`files`), and one run never finds what the run before it wrote.
A directory is never linked: a link to the learner's `run/` took every write below it into the
real `run/`, in both runs (lesson 18's third review). A file is linked, and a write the worker
records (Python's `open`, `tf.io.gfile`, a checkpoint or a save the check wraps:
`record.record_write`) first replaces the links it may write through by copies
(`own_copy`): a file changed in place ("a", "r+", a checkpoint's index) changes the worker's
copy. What C++ no wrapper sees writes in place through a link reaches the learner's file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...errors import CourseError

# repeated per worker: the course's checkout (3,973 entries, hidden ones aside) made a check of 13 s take 62 s
# here (2 cores at a load of 16); 71,566 links alone took 47 s at a load of 7
MAX_ENTRIES = 1000
COPY_SUFFIX = ".check-script-copy"  # the copy's name while it is made (not the script's write)


def tree(real: Path, skip: Path) -> tuple[list[str], list[str]]:
    """(directories, files) below `real`, relative to it, what each worker's directory repeats;
    directories behind links are followed (a link to a data directory is a directory the script can
    write to), not into themselves. Left out: hidden directories (.git, .venv: tens of thousands of
    files a script does not read at a relative path, and a link would pass its writes on) and `skip`
    (the check's own directory). Refused past MAX_ENTRIES, in one line: each is made again for
    every worker."""
    real, skip = Path(os.path.realpath(real)), Path(os.path.realpath(skip))
    dirs: list[str] = []
    files: list[str] = []
    for folder, subdirs, names in os.walk(real, followlinks=True):
        here = os.path.realpath(folder)
        subdirs[:] = [d for d in subdirs if not d.startswith(".")
                      and not _cycle_or_skipped(os.path.join(folder, d), here, skip)]
        rel = os.path.relpath(folder, real)
        dirs += [os.path.normpath(os.path.join(rel, d)) for d in subdirs]
        files += [os.path.normpath(os.path.join(rel, n)) for n in names]
        if len(dirs) + len(files) > MAX_ENTRIES:
            raise CourseError(f"{real} holds more than {MAX_ENTRIES} files and directories (hidden ones aside), and "
                              "each worker stands in a copy of that tree (new directories, a link to each file) so "
                              "that nothing the script writes there reaches yours: run the check in a directory that "
                              "holds the script and little else (its large data given as absolute paths)")
    return dirs, files


def _cycle_or_skipped(path: str, here: str, skip: Path) -> bool:
    target = Path(os.path.realpath(path))
    return target == skip or target.is_relative_to(skip) or Path(here).is_relative_to(target)


def private_cwd(out: Path, rank: int, real: Path) -> Path:
    """The working directory of the worker of `rank` standing for `real`: its directories made
    anew and a link to each of its files, under the run's directory `out` (whose parent, the
    check's own directory, is not repeated). Returns it."""
    own = out / f"cwd-{rank}"
    own.mkdir(exist_ok=True)
    dirs, files = tree(real, out.parent)
    for rel in dirs:
        (own / rel).mkdir(exist_ok=True)
    for rel in files:
        link = own / rel
        if not os.path.lexists(link):
            os.symlink(os.path.join(real, rel), link)
    return own


def own_copy(path: str) -> None:
    """Before the worker writes `path` (in its own directory): each link to a real file at `path`,
    named after it (a checkpoint's `PREFIX.index`, which TensorFlow's merge writes in place through
    a link) or below it (a SavedModel's directory) becomes a copy of that file, so the write
    changes the copy, never the learner's."""
    folder, name = os.path.split(path)
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(name)]
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink():
            _copy_over(entry.path)
        elif entry.is_dir():
            for below, _, names in os.walk(entry.path):
                for n in names:
                    _copy_over(os.path.join(below, n))


def _copy_over(link: str) -> None:
    if os.path.islink(link) and os.path.isfile(link):
        copy = link + COPY_SUFFIX
        shutil.copy2(link, copy)
        os.replace(copy, link)
