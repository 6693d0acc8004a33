"""Results and archives are written under random, exclusive temporary names: a link planted at
the old predictable names (`out.partial`, `.results.json.PID.tmp`) redirects nothing, and every name
the writers create in the shared directory, whatever it is, is created exclusively (O_CREAT|O_EXCL,
which fails on a planted link instead of following it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.data import synth_archive
from helpers.results import write_results


def test_planted_links_at_predictable_names_redirect_nothing(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the learner's file")
    out = tmp_path / "shared"
    out.mkdir()
    (out / "synthetic.tar.gz.partial").symlink_to(victim)
    (out / f".results.json.{os.getpid()}.tmp").symlink_to(victim)

    synth_archive(out / "synthetic.tar.gz", 20, 10, 0)
    write_results({"loss": 1.0}, out / "results.json")

    assert victim.read_text() == "the learner's file"
    assert json.loads((out / "results.json").read_text()) == {"loss": 1.0}
    assert (out / "synthetic.tar.gz").stat().st_size > 0
    left = sorted(p.name for p in out.iterdir())
    assert left == sorted([".results.json.%d.tmp" % os.getpid(), "results.json", "synthetic.tar.gz",
                           "synthetic.tar.gz.partial"]), left  # the planted links, untouched; no temporary left


# every open() and os.open() in DIR while the writers run, as (name, flags), read by an audit hook
# (the `open` event: builtins.open, io.open and os.open raise it with the path and the open flags)
_OPENS = """
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


def test_every_name_the_writers_create_in_a_shared_directory_is_created_exclusively(tmp_path):
    """A link can be planted at any name another user can guess, not only at the old ones: the first
    open of each name the writers use must create it exclusively (a fixed `.{name}.tmp` opened with
    open(..., "w") follows a link planted there; the planted-link test above never tries that name)."""
    out = tmp_path / "shared"
    out.mkdir()
    done = subprocess.run([sys.executable, "-c", _OPENS, str(out)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    opened = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("OPENED "))[7:])
    first: dict[str, int] = {}
    for name, flags in opened:
        first.setdefault(name, flags)
    assert len(first) >= 2, opened  # the archive's temporary and the results' temporary
    exclusive = os.O_CREAT | os.O_EXCL
    not_exclusive = sorted(name for name, flags in first.items() if flags & exclusive != exclusive)
    assert not not_exclusive, f"created without O_EXCL (a planted link there is followed): {not_exclusive}"
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "synthetic.tar.gz"]
