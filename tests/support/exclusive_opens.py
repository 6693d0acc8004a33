"""The writers' first open of every name in a shared directory, read by an audit hook: each must create
its name exclusively (O_CREAT|O_EXCL fails on a link planted there instead of following it)."""

from __future__ import annotations

import json
import os

# every open() and os.open() in DIR while the writers run, as (name, flags), read by an audit hook
# (the `open` event: builtins.open, io.open and os.open raise it with the path and the open flags)
PROGRAM = """
import json, os, sys
out = os.path.realpath(sys.argv[1])
opened = []
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.realpath(os.fsdecode(args[0]))
        if os.path.dirname(path) == out:
            opened.append((os.path.basename(path), args[2]))
from helpers.data import synth_archive
from helpers.results import write_results
sys.addaudithook(hook)
synth_archive(os.path.join(out, "synthetic.tar.gz"), 20, 10, 0)
write_results({"loss": 1.0}, os.path.join(out, "results.json"))
print("OPENED " + json.dumps(opened))
"""


def first_opens(stdout: str) -> dict[str, int]:
    """Each name's flags at its first open, from PROGRAM's output."""
    opened = json.loads(next(line for line in stdout.splitlines() if line.startswith("OPENED "))[7:])
    first: dict[str, int] = {}
    for name, flags in opened:
        first.setdefault(name, flags)
    return first


def not_exclusive(first: dict[str, int]) -> list[str]:
    """The names first opened without O_CREAT|O_EXCL: a link planted there would be followed."""
    exclusive = os.O_CREAT | os.O_EXCL
    return sorted(name for name, flags in first.items() if flags & exclusive != exclusive)
