"""What one check-script worker records: its state, its progress marks, the script line of a call, the files it writes.

The worker (`worker`) and the wrappers it puts on TensorFlow and Keras (`watch`)
write here; at exit the worker turns STATE into OUT/worker-RANK.json. Nothing here imports
TensorFlow.
"""

from __future__ import annotations

import os
import re
import sys
import time

from .cwd import COPY_SUFFIX, own_copy

SEED = 1234
STATE: dict = {}
WHERE = {"out": "", "rank": 0, "script": "", "private_cwd": "", "real_cwd": ""}
# TensorFlow's atomic writes go to NAME.tmp<32 hex digits>, then are renamed to NAME (recorded then)
_ATOMIC_TEMP = re.compile(r"\.tmp[0-9a-f]{32}$")
_STDLIB = os.path.dirname(os.__file__)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def start(out: str, rank: int, script: str, real_cwd: str = "") -> None:
    """A fresh record for the worker of `rank`, writing into `out`, watching `script`; when the
    worker runs in a working directory of its own standing for `real_cwd`, paths are recorded as
    they would be in `real_cwd` (where the script, run for real, writes them)."""
    WHERE.update(out=os.path.abspath(out), rank=rank, script=os.path.abspath(script),
                 private_cwd=os.getcwd() if real_cwd else "", real_cwd=real_cwd)
    STATE.clear()
    STATE.update(marks=0, writes=[], made_dirs=[], summary_dirs=[], inputs=[], fed=[], models=[], metrics=[], strategies=[],
                 dropout_off=[], not_seen=[], notes=[], runs=0, reduces=0, exception=None, exit_code=0,
                 running=False, phase=[])


def mark(text: str) -> None:
    """One progress line, written through at once (a worker killed with SIGKILL keeps it)."""
    STATE["marks"] = STATE.get("marks", 0) + 1
    with open(os.path.join(WHERE["out"], f"marks-{WHERE['rank']}.txt"), "a") as f:
        f.write(f"{time.time():.3f} {text}\n")


def note_not_seen(text: str) -> None:
    """Something the worker could not look at (said once)."""
    if text not in STATE["not_seen"]:
        STATE["not_seen"].append(text)


def script_line() -> str:
    """Where in the user's script the current call comes from (file:line), or '?'."""
    frame = sys._getframe(1)
    while frame is not None:
        if os.path.abspath(frame.f_code.co_filename) == WHERE["script"]:
            return f"{os.path.basename(WHERE['script'])}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def called_by_script() -> bool:
    """Whether the call being watched comes from the user's code: the first caller above
    check-script's wrappers, the constructors of the class and its bases (`__init__` frames in a
    library) and autograph (a traced function's calls go through it) is outside TensorFlow, Keras
    and the standard library. Keras making its own objects (compile's metrics, those a model.save
    rebuilds) or TensorFlow reducing for itself (a checkpoint) is not the script."""
    library = (os.sep + "keras" + os.sep, os.sep + "tensorflow" + os.sep, os.sep + "tf_keras" + os.sep)
    autograph = os.sep + "autograph" + os.sep
    here = os.path.dirname(os.path.abspath(__file__))
    frame = sys._getframe(1)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        in_library = any(part in name for part in library)
        if not (name.startswith(here) or autograph in name
                or (in_library and frame.f_code.co_name == "__init__")):
            return not in_library and "site-packages" not in name and not name.startswith(_STDLIB) \
                and not frame.f_code.co_filename.startswith("<")
        frame = frame.f_back
    return False


def phase() -> str:
    """What the script is in: 'fit', 'fit>evaluate' (validation), 'evaluate', 'predict', or '' (its own code)."""
    return ">".join(STATE.get("phase", []))


def record_write(path: str | os.PathLike, how: str) -> None:
    """A path the script wrote (or a checkpoint prefix / SavedModel / log directory TensorFlow
    writes below in C++), with the API that wrote it."""
    try:
        seen = os.path.abspath(os.fspath(path))
    except TypeError:
        return
    if how == "open" and os.path.isdir(seen):
        return  # an anonymous temporary file (O_TMPFILE) opens its directory
    private = WHERE["private_cwd"]
    if private and (seen == private or seen.startswith(private + os.sep)) and not seen.endswith(COPY_SUFFIX):
        own_copy(seen)  # before the write: a link to the learner's file becomes the worker's copy
    seen = _as_run_for_real(seen)
    entry = [seen, how]
    if seen and entry not in STATE["writes"]:
        STATE["writes"].append(entry)


def record_made_dir(path: str | os.PathLike) -> None:
    """A directory the script made (os.mkdir, os.makedirs, tf.io.gfile.makedirs): not a write of a
    file, so never a path two workers share (`os.makedirs(out, exist_ok=True)` on every worker is
    right), but what explains a directory that appeared, or the time of the one it was made in."""
    try:
        seen = _as_run_for_real(os.path.abspath(os.fspath(path)))
    except TypeError:
        return
    if seen and seen not in STATE["made_dirs"]:
        STATE["made_dirs"].append(seen)


def _as_run_for_real(seen: str) -> str:
    """An absolute path as the script, run for real, would have it: one in the worker's own
    working directory given in the real one; '' for what is not the script's (the command's own
    files, devices, own_copy's copies, TensorFlow's temporary names, traced code, compiled modules)."""
    private = WHERE["private_cwd"]
    if private and (seen == private or seen.startswith(private + os.sep)):
        if seen.endswith(COPY_SUFFIX):
            return ""
        seen = WHERE["real_cwd"] + seen[len(private):]
    elif seen.startswith((WHERE["out"], "/dev/", "/proc/", "/sys/")):
        return ""
    if _ATOMIC_TEMP.search(seen) or os.path.basename(seen).startswith("__autograph_generated") \
            or f"{os.sep}__pycache__{os.sep}" in seen:
        return ""
    return seen


def audit(event: str, args: tuple) -> None:
    """Python's `open` (an audit hook): every file the script opens for writing; `os.mkdir`: every
    directory it makes."""
    if event == "os.mkdir" and STATE.get("running") and args and not isinstance(args[0], int):
        record_made_dir(args[0])
    if event != "open" or not STATE.get("running"):
        return
    path, mode, flags = (tuple(args) + (None, None, None))[:3]
    if isinstance(path, int) or path is None:
        return
    writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
    if writing:
        record_write(path, "open")
