"""Engines capped at a number of GPUs (`gpus.at_most`, `setup_multiworker(most_gpus=...)`): lesson 12's
parameter-server workers take one GPU each, since `ParameterServerStrategy` makes a replica of every GPU
a worker has and the lesson's counters refuse an update from one of several replicas. No GPU here: the
decision is tested, and the engine side with CUDA_VISIBLE_DEVICES set, not TensorFlow's use of it."""

import json
import os
import subprocess
import sys

import pytest

from helpers import gpus
from helpers.errors import CourseError
from tests.conftest import ROOT

EIGHT = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}


def test_four_engines_on_eight_gpus_take_one_each_of_their_two():
    """8 GPUs shared by 4 engines give 2 each (gpus.py, `_equal_share`); capped at one, each keeps the
    first of its own 2, no two engines the same, and the note names the idle one."""
    plans = [gpus.plan_for_local_worker(4, i, EIGHT) for i in range(4)]
    assert [p.gpus for p in plans] == [("0", "1"), ("2", "3"), ("4", "5"), ("6", "7")]
    capped = [gpus.at_most(p, 1) for p in plans]
    assert [p.gpus for p in capped] == [("0",), ("2",), ("4",), ("6",)]
    assert all(p.replicas == 1 and "1 of its 2 GPUs stay idle" in p.note for p in capped)
    assert capped[1].env()["CUDA_VISIBLE_DEVICES"] == "2"


@pytest.mark.parametrize("visible,most", [("0,1,2,3,4,5,6,7", None), ("0,1,2,3", 1), ("", 1)],
                         ids=["no cap", "one GPU each already", "CPU"])
def test_a_plan_within_the_cap_is_left_as_it_is(visible, most):
    plan = gpus.plan_for_local_worker(4, 1, {"CUDA_VISIBLE_DEVICES": visible})
    assert gpus.at_most(plan, most) == plan


def test_a_cap_below_one_gpu_is_refused_in_one_line():
    with pytest.raises(CourseError, match="at most 0 GPUs per process"):
        gpus.at_most(gpus.plan_for_local_worker(4, 1, EIGHT), 0)


_CONFIGURE = """
import json, os, sys
from helpers.engines import on_engine
got = {}
for most in (None, 1):
    os.environ["CUDA_VISIBLE_DEVICES"] = "0,1,2,3,4,5,6,7"
    got[str(most)] = on_engine.configure(2, None, (4, 2), most)["gpus"]  # engine of rank 2, third of 4 on its host
sys.__stdout__.write("RESULT " + json.dumps(got) + chr(10))
"""


def test_an_engine_configured_with_most_gpus_sees_one_gpu():
    """`on_engine.configure`, as `setup_multiworker` calls it on each engine: the third of 4 engines on a host
    of 8 GPUs sees GPUs 4 and 5, and with most_gpus=1 only GPU 4 (its CUDA_VISIBLE_DEVICES, before TensorFlow starts)."""
    done = subprocess.run([sys.executable, "-c", _CONFIGURE], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "COURSE_CLASS_LAYOUT": "node"})
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))[7:])
    assert got == {"None": "4,5", "1": "4"}
