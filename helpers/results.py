"""Results of training runs and of the bench, as JSON files: written atomically, read leniently.

The batch program (`python -m helpers train --results FILE`) and the bench write them; notebook
07 and `python -m helpers results` read them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_results(results: dict, path: str | os.PathLike) -> Path:
    """Write one run's results as JSON, atomically (temporary name, then rename)."""
    from .atomic import write_text

    return write_text(path, json.dumps(results, indent=2))


def load_results(directory: str | os.PathLike) -> list[dict]:
    """The results files of batch runs in `directory` (what notebook 07 and the sweep show).

    Files that are not run results (half-written ones never are: see `write_results`) are
    skipped with a note, so one stray file does not hide the others.
    """
    runs = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            run = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"skipped {path.name}: not JSON ({exc})")
            continue
        if isinstance(run, dict) and {"images_per_s", "workers", "replicas"} <= run.keys():
            runs.append({**run, "file": path.name})
    return runs


def results_table(runs: list[dict]) -> str:
    """A plain-text table of batch runs, sorted by workers."""
    header = f"{'file':<28} {'model':<9} {'workers':>7} {'replicas':>8} {'images/s':>10} {'step s':>8} {'accuracy':>8}"
    lines = [header, "-" * len(header)]
    for r in sorted(runs, key=lambda r: (r["model"], r["workers"], r["replicas"])):
        accuracy = "-" if r.get("test_accuracy") is None else f"{r['test_accuracy']:.3f}"
        step = "-" if r.get("median_step_s") is None else f"{r['median_step_s']:.3f}"
        lines.append(f"{r['file'][:28]:<28} {r['model']:<9} {r['workers']:>7} {r['replicas']:>8} "
                     f"{r['images_per_s']:>10.1f} {step:>8} {accuracy:>8}")
    return "\n".join(lines)


def parse_result_lines(text: str) -> list[dict]:
    """The RESULT lines that workers printed, in order."""
    return [json.loads(line[len("RESULT "):]) for line in text.splitlines() if line.startswith("RESULT ")]


def load_table(directory: str | os.PathLike) -> dict | None:
    """The bench.json `python -m helpers bench` wrote in `directory`, or None; `plots.bench` draws it
    (no lesson shows it: docs/measured.md's tables are made from it, by `helpers.commands.bench_report`)."""
    path = Path(directory) / "bench.json"
    return json.loads(path.read_text()) if path.is_file() else None
