"""The helpers' CPU defaults are in place where the course creates strategies, and
`COURSE_TUNING=off` gives TensorFlow's own (what `helpers bench` compares against)."""

import json

import pytest

from conftest import run_python
from helpers import tuning
from helpers.strategy import workers_on_my_host


def test_threads_share_the_cores_between_replicas():
    assert tuning.threads_for(2, cpus=2) == (1, 2)
    assert tuning.threads_for(2, cpus=16) == (8, 2)
    assert tuning.threads_for(4, cpus=2) == (1, 2)  # never zero threads


def test_ring_gets_packs_and_off_means_tensorflow_defaults(monkeypatch):
    assert tuning.pack_bytes("RING") == 4 * 1024 * 1024 and tuning.pack_bytes("NCCL") == 0
    monkeypatch.setenv("COURSE_TUNING", "off")
    assert not tuning.enabled() and tuning.pack_bytes("RING") == 0


def test_workers_sharing_a_host_are_counted():
    me = {"address": "localhost:2001", "workers": ["localhost:2000", "localhost:2001", "node2:2000"]}
    assert workers_on_my_host(me) == 2
    assert workers_on_my_host({"address": "node2:2000", "workers": me["workers"]}) == 1


SETTINGS = """
import json
from helpers.environment import split_cpu
from helpers.strategy import make_strategy
split_cpu(2)
strategy = make_strategy("mirrored")
import tensorflow as tf
print(json.dumps({"intra": tf.config.threading.get_intra_op_parallelism_threads(),
                  "inter": tf.config.threading.get_inter_op_parallelism_threads(),
                  "grappler_off": tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False),
                  "replicas": strategy.num_replicas_in_sync}))
"""


@pytest.mark.parametrize("setting", ["on", "off"])
def test_mirrored_on_cpu_gets_the_defaults_unless_turned_off(setting):
    from helpers.host import cpu_count

    done = run_python(SETTINGS, env={"COURSE_TUNING": setting, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["replicas"] == 2
    if setting == "on":
        assert got == {"intra": max(1, cpu_count() // 2), "inter": 2, "grappler_off": True, "replicas": 2}
    else:
        assert got == {"intra": 0, "inter": 0, "grappler_off": False, "replicas": 2}
