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
from tests.support import exclusive_opens


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




def test_every_name_the_writers_create_in_a_shared_directory_is_created_exclusively(tmp_path):
    """A link can be planted at any name another user can guess, not only at the old ones: the first
    open of each name the writers use must create it exclusively (a fixed `.{name}.tmp` opened with
    open(..., "w") follows a link planted there; the planted-link test above never tries that name)."""
    out = tmp_path / "shared"
    out.mkdir()
    done = subprocess.run([sys.executable, "-c", exclusive_opens.PROGRAM, str(out)], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    first = exclusive_opens.first_opens(done.stdout)
    assert len(first) >= 2, first  # the archive's temporary and the results' temporary
    bad = exclusive_opens.not_exclusive(first)
    assert not bad, f"created without O_EXCL (a planted link there is followed): {bad}"
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "synthetic.tar.gz"]
