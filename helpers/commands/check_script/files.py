"""check-script's "who writes": the paths each worker wrote, and the files that changed that no worker's Python calls explain.

The workers record what the script writes through Python (`record`, `watch`),
including the destinations TensorFlow's C++ writes below (a checkpoint prefix, a SavedModel or
log directory, a dataset cache). Each worker stands in a working directory of its own
(`cwd.private_cwd`): whatever creates a file at a relative path, its worker is known,
and two workers creating the same relative path are named. What C++ code or another program
writes at an absolute path no wrapper sees: the command therefore lists the files under the
directories a run writes to (the working directory, the script's, and those its path options
name) before and after each run, directories with their modification times, and a path that
changed, appeared or went without a recorded write that covers it is named: the check cannot tell
which worker wrote it, so "who writes" is NOT SEEN instead of PASS. A directory's time tells what
names alone do not: a file created and removed again during a run (issue 53).
"""

from __future__ import annotations

import os
from pathlib import Path

from .findings import Finding
from .launch import Run

MAX_FILES = 20000  # per watched directory: a home directory is not walked whole
PREFIX_KINDS = ("tf.train.Checkpoint", "Dataset.cache", "Dataset.save", "Dataset.snapshot")  # C++ adds suffixes


def watched_roots(script: Path, args: list[str], cwd: Path, skip: Path) -> list[Path]:
    """The directories whose files a run may change: the working directory (small: `cwd.tree`
    refuses one of more than 1,000 entries; never a home), the script's, and the nearest existing
    directory of every option that looks like a path (relative ones from `cwd`)."""
    roots = [cwd.resolve(), script.resolve().parent]
    for arg in args:
        value = arg.split("=", 1)[-1] if arg.startswith("--") else arg
        if not value or value.startswith("-") or (os.sep not in value and not (cwd / value).exists()
                                                   and "." not in value):
            continue
        path = (cwd / value).resolve()
        while not path.is_dir() and path != path.parent:
            path = path.parent
        roots.append(path)
    unique: list[Path] = []
    for root in sorted({r.resolve() for r in roots}, key=lambda p: len(p.parts)):
        if root == Path(root.anchor) or root == Path.home() or any(root.is_relative_to(u) for u in unique):
            continue  # never the whole file system or home; nothing twice
        unique.append(root)
    return [r for r in unique if not r.is_relative_to(skip.resolve())]


def snapshot(roots: list[Path], skip: Path) -> dict[str, tuple]:
    """{file: (size, mtime_ns, inode)} and {directory: ("dir", mtime_ns, inode)} under `roots`,
    without `skip` (the command's own directory), hidden directories (.git, .venv) and __pycache__.
    A directory's mtime changes with every entry made, removed or renamed in it: a file written
    and removed again leaves that trace, and no other."""
    files: dict[str, tuple] = {}
    skip_text = str(skip.resolve())
    for root in roots:
        count = 0
        for folder, dirs, names in os.walk(root):
            try:
                st = os.stat(folder)
                files[folder] = ("dir", st.st_mtime_ns, st.st_ino)
            except OSError:
                pass
            dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")
                       and not os.path.join(folder, d).startswith(skip_text)]
            for name in names:
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path, follow_symlinks=False)
                except OSError:
                    continue
                files[path] = (st.st_size, st.st_mtime_ns, st.st_ino)
                count += 1
            if count > MAX_FILES:
                dirs[:] = []
    return files


def changed(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """Files and directories new or changed between two snapshots, and those removed from a
    directory listed in both (one a truncated walk left out is not taken for removed)."""
    gone = [path for path in before if path not in after and os.path.dirname(path) in after]
    return sorted([path for path, facts in after.items() if before.get(path) != facts] + gone)


def unexplained(run: Run) -> list[str]:
    """The paths that changed during `run` that no worker's recorded write covers: a file or
    directory at or below a recorded path, or a directory in which a recorded path was made (the
    path itself, or its first directory below it that did not exist before the run); a directory
    the script made (`record.record_made_dir`), when it did not exist before (a makedirs of one
    that did, exist_ok, makes nothing), explains itself and where it was made."""
    recorded: list[tuple[str, str]] = []
    made: list[str] = []
    for report in run.reports.values():
        recorded += [(path, kind) for path, kind in report.get("writes", [])]
        recorded += [(path, "tf.summary") for path in report.get("summary_dirs", [])]
        made += report.get("made_dirs", [])
    return [path for path in run.changed
            if not any(covers(p, kind, path) or _made_in(path, p, run.existed) for p, kind in recorded)
            and not any(d not in run.existed and (path == d or _made_in(path, d, run.existed)) for d in made)]


def _made_in(folder: str, recorded: str, existed: set) -> bool:
    """Whether writing `recorded` made an entry in `folder`: `recorded` lies below it, and its
    first step below it is `recorded` itself or a directory the run made."""
    base = folder.rstrip(os.sep) + os.sep
    if not recorded.startswith(base):
        return False
    first = base + recorded[len(base):].split(os.sep, 1)[0]
    return first == recorded or first not in existed


def covers(recorded: str, kind: str, path: str) -> bool:
    """Whether a write recorded at `recorded` by `kind` accounts for the file `path`: the path
    itself, a file below a directory, or a file named after a checkpoint or cache prefix."""
    return path == recorded or path.startswith(recorded.rstrip(os.sep) + os.sep) \
        or (kind in PREFIX_KINDS and path.startswith(recorded))


def write_findings(run: Run) -> list[Finding]:
    """Whether any path was written by two workers; NOT SEEN when a file changed unexplained."""
    by_path: dict[str, set] = {}
    how: dict[str, set] = {}
    for rank, report in run.reports.items():
        for path, kind in report.get("writes", []):
            by_path.setdefault(path, set()).add(rank)
            how.setdefault(path, set()).add(kind)
        for path in report.get("summary_dirs", []):
            by_path.setdefault(path, set()).add(rank)
            how.setdefault(path, set()).add("TensorBoard logs (tf.summary)")
    for rank, files in run.created.items():  # relative paths, each worker in a directory of its own
        own = [(p, kind) for p in by_path if rank in by_path[p] for kind in how[p]]
        for name in files:
            path = os.path.join(run.cwd, name)
            if not any(covers(p, kind, path) for p, kind in own):
                by_path.setdefault(path, set()).add(rank)
                how.setdefault(path, set()).add("created in the working directory")
    if len(run.reports) < run.workers:
        return [Finding("NOT SEEN", "who writes", "not every worker wrote its report",
                        to_see="a run in which every worker ends")]
    shared = {p: r for p, r in by_path.items() if len(r) > 1}
    if shared:
        path, ranks = next(iter(shared.items()))
        more = f" (and {len(shared) - 1} more shared paths)" if len(shared) > 1 else ""
        return [Finding("FAIL", "who writes", f"workers {', '.join(map(str, sorted(ranks)))} all write {path} "
                        f"({', '.join(sorted(how[path]))}){more}: they overwrite each other's files",
                        "write only on the chief (strategy.extended.should_checkpoint: True on the chief and in a run "
                        "alone, where task_id is None) and give the other workers a path of their own (e.g. a "
                        "temporary directory, as TensorFlow's tutorial's write_filepath does)")]
    unseen = unexplained(run)
    if unseen:
        return [Finding("NOT SEEN", "who writes", f"{len(unseen)} path(s) changed, made or removed that no worker "
                        f"wrote through a call the check watches ({_short(unseen, run.cwd)}; a directory's time "
                        "changes with each entry made or removed in it, even when the names are back): written by "
                        "C++ code, another program or a call the check does not watch, so which worker wrote them "
                        "is not known",
                        to_see="write through Python, tf.io.gfile or a TensorFlow/Keras save the check names "
                        "(docs/check-your-script.md), or write those files only on the chief")]
    if not by_path:
        return [Finding("NOT SEEN", "who writes", "the script wrote no file the command observes",
                        to_see="let the script write what it writes at full size (a checkpoint, a model, logs)")]
    chief = sorted(p for p, r in by_path.items() if 0 in r)
    others = sorted(p for p, r in by_path.items() if 0 not in r)
    return [Finding("PASS", "who writes", f"no file is written by two workers; the chief wrote {len(chief)} path(s) "
                    f"({_short(chief, run.cwd)}), "
                    + (f"the others only paths of their own ({_short(others, run.cwd)})" if others else "the others none"))]


def _short(paths: list[str], cwd: str) -> str:
    """The first paths, each relative to the working directory when below it (`run/ckpt`: which
    of two paths with the same last name the chief wrote is what the line must tell)."""
    shown = [os.path.relpath(p, cwd) if cwd and p.startswith(cwd.rstrip(os.sep) + os.sep) else p
             for p in paths[:3]]
    return ", ".join(shown) + (", ..." if len(paths) > 3 else "")
