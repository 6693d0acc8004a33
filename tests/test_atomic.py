"""Results and archives are written under random, exclusive temporary names: a link planted at
the old predictable names (`out.partial`, `.results.json.PID.tmp`) redirects nothing."""

from __future__ import annotations

import json
import os

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
