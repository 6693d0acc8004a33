"""The recorder the class-layout test reads (tests/recorder/sitecustomize.py) sees an NCCL choice when a
process makes one: else that test's "no process asked for NCCL" would prove nothing. Needs no Slurm, so it
runs in a local stream (it was the class-layout test's last step, in the Slurm stream, until 2026-11-29)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT
from tests.support.records import RECORDER, nccl_choices, read_records

ASKS_FOR_NCCL = ("import tensorflow as tf\n"
                 "tf.distribute.experimental.CommunicationOptions(implementation='NCCL')\n"
                 "tf.distribute.NcclAllReduce()")


def test_the_recorder_sees_a_process_ask_for_nccl(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{RECORDER}{os.pathsep}{ROOT}", "TEST_RECORD_DIR": str(tmp_path),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    probe = subprocess.run([sys.executable, "-c", ASKS_FOR_NCCL], env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert [r["implementation"] for r in nccl_choices(read_records(tmp_path))] == ["NCCL", "NcclAllReduce"]
