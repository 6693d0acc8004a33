"""What tests/recorder/sitecustomize.py wrote: its JSON lines read back, and the all-reduces among them that
asked for NCCL (tests/test_lessons_in_class_layouts.py reads a lesson's; tests/test_recorder.py shows the
recorder sees such a choice when a process makes one)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT

RECORDER = ROOT / "tests" / "recorder"  # on PYTHONPATH, with TEST_RECORD_DIR set: every process records


def read_records(directory: Path) -> list[dict]:
    """Every record of every process that wrote into `directory`, a process's in the order it wrote them."""
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]


def nccl_choices(records: list[dict]) -> list[dict]:
    """The records of an all-reduce that asked for NCCL (CommunicationOptions, or NcclAllReduce itself)."""
    return [r for r in records if r["kind"] == "collective" and r["implementation"] in ("NCCL", "NcclAllReduce")]
