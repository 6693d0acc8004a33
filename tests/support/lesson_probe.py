"""Lesson 03's start-up as a short probe notebook: the lesson's own cells up to its strategy, then one
all-reduce over every worker and a line of figures per engine.

The lesson's cells up to the strategy are its whole start-up on engines: the mode and the data, the
engines started (or found: COURSE_CLUSTER), each worker's rank and TF_CONFIG, the cluster resolver
(Slurm's inside a step) and MultiWorkerMirroredStrategy, whose constructor waits for every worker. The
paths that only start or find the engines another way (ipcmagic, ipcluster with the course profile, the
Open OnDemand app's job, the hub's server job, a learner's server job shaped like each class layout) run this
instead of the whole lesson: lesson 03 runs whole on Slurm engines in a plain 2-task allocation
(test_lessons_in_class_layouts), and on local engines in the nbval pass. Its last line (DONE) is what a
browser waits for.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from tests.conftest import ROOT

LESSON = ROOT / "notebooks" / "03_multiworker_ipyparallel.ipynb"
STRATEGY = "tf.distribute.MultiWorkerMirroredStrategy("  # the lesson's start-up ends with the cell that makes it
DONE = "PROBED the start-up of lesson 03"  # the probe's last line, after every check and the engines' stop
PROBE = """%%px
import socket
from helpers.environment import output_dir

all_reduced = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
probe = {"rank": resolver.task_id, "in_sync": strategy.num_replicas_in_sync, "all_reduced": float(all_reduced),
         "host": socket.gethostname(), "output_dir": str(output_dir())}
"""
# the kernel's side: the figures kept for the test, then the lesson proof's first two claims on them
GATHER = """import json
from pathlib import Path

probes = sorted(engines.view.pull("probe", block=True), key=lambda p: p["rank"])
Path({report!r}).write_text(json.dumps(probes))
assert len(probes) >= 2 and [p["rank"] for p in probes] == list(range(len(probes))), f"ranks: {{probes}}"
assert all(p["in_sync"] == p["all_reduced"] == probes[0]["in_sync"] >= len(probes) for p in probes), \\
    f"the workers did not form one cluster whose all-reduce reaches every replica: {{probes}}"
print(engines.finish())
print({done!r}, "on", [p["host"] for p in probes])
"""


def startup_end() -> int:
    """The index of lesson 03's first cell after its start-up (the cell that makes the strategy)."""
    cells = nbformat.read(LESSON, as_version=4).cells
    return 1 + next(i for i, c in enumerate(cells) if c.cell_type == "code" and STRATEGY in c.source)


def write_probe(directory: Path) -> tuple[Path, Path]:
    """The probe notebook in `directory`, and the file its last cell writes every engine's figures to."""
    nb = nbformat.read(LESSON, as_version=4)
    report = directory / "probe.json"
    nb.cells = nb.cells[:startup_end()] + [nbformat.v4.new_code_cell(PROBE),
                                           nbformat.v4.new_code_cell(GATHER.format(report=str(report), done=DONE))]
    path = directory / "03_startup_probe.ipynb"
    nbformat.write(nb, path)
    return path, report


def read_probe(report: Path) -> list[dict]:
    """Every engine's figures, by rank: rank, replicas in sync, the all-reduce's sum, host, output directory."""
    return json.loads(report.read_text()) if report.exists() else []
