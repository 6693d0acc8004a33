import json
import socket

import pytest

from helpers.errors import CourseError
from helpers import resolver


def test_make_tf_config_round_trips():
    config = resolver.make_tf_config(["a:10001", "b:10002"], 1)
    assert config == {"cluster": {"worker": ["a:10001", "b:10002"]}, "task": {"type": "worker", "index": 1}}
    assert resolver.validate_tf_config(json.dumps(config)) == config


@pytest.mark.parametrize("text, words", [
    ("{not json", "not valid JSON"),
    ('{"task": {"type": "worker", "index": 0}}', "no \"cluster\""),
    ('{"cluster": {"worker": ["h:1", "h:1"]}, "task": {"type": "worker", "index": 0}}', "more than once"),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 3}}', "not in the cluster"),
    ('{"cluster": {"worker": ["nohostport"]}, "task": {"type": "worker", "index": 0}}', "not host:port"),
])
def test_bad_tf_config_is_one_clear_line(text, words):
    with pytest.raises(CourseError, match=words) as info:
        resolver.validate_tf_config(text)
    assert "\n" not in str(info.value)


def test_port_range_parsing(monkeypatch):
    monkeypatch.setenv(resolver.PORT_RANGE_ENV, "12000-12010")
    assert resolver.port_range() == (12000, 12010)
    assert 12000 <= resolver.free_port() <= 12010
    monkeypatch.setenv(resolver.PORT_RANGE_ENV, "bad")
    with pytest.raises(CourseError, match="LOW-HIGH"):
        resolver.port_range()
    monkeypatch.setenv(resolver.PORT_RANGE_ENV, "20-10")
    with pytest.raises(CourseError, match="1024-65535"):
        resolver.port_range()


def test_port_outside_range_or_in_use(monkeypatch):
    monkeypatch.delenv(resolver.PORT_RANGE_ENV, raising=False)
    with pytest.raises(CourseError, match="outside the allowed range"):
        resolver.check_port(80)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setenv(resolver.PORT_RANGE_ENV, f"{port}-{port}")
        with pytest.raises(CourseError, match="already in use"):
            resolver.check_port(port)


@pytest.mark.parametrize("spec, expected", [("2(x3)", 2), ("4,2", 4), ("1", 1), ("3(x2),1", 3)])
def test_max_tasks_per_node(spec, expected):
    assert resolver._max_tasks_per_node(spec) == expected


def _slurm_env(monkeypatch, procid="1"):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, value in {"SLURM_JOB_ID": "7", "SLURM_PROCID": procid, "SLURM_STEP_NUM_TASKS": "4",
                        "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}.items():
        monkeypatch.setenv(name, value)


def test_slurm_resolver_on_cpu_nodes(monkeypatch):
    _slurm_env(monkeypatch)
    monkeypatch.setenv(resolver.PORT_RANGE_ENV, "15000-15100")
    res = resolver.slurm_resolver(gpus_per_node=0)
    spec = res.cluster_spec().as_dict()
    assert spec == {"worker": ["node1:15000", "node1:15001", "node2:15000", "node2:15001"]}
    assert (res.task_type, res.task_id) == ("worker", 1)
    assert res.num_accelerators() == {"GPU": 0}  # upstream would claim one GPU per task
    described = resolver.describe(res)
    assert described["rank"] == 1 and described["address"] == "node1:15001"
    assert resolver.cluster_resolver() is not None  # auto-detected from the step


def test_slurm_malformed_variables(monkeypatch):
    _slurm_env(monkeypatch, procid="one")
    with pytest.raises(CourseError, match="SLURM_PROCID='one' is not a whole number"):
        resolver.slurm_resolver(gpus_per_node=0)
    _slurm_env(monkeypatch)
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "two")
    with pytest.raises(CourseError, match="malformed"):
        resolver.slurm_resolver(gpus_per_node=0)


def test_no_slurm_step(monkeypatch):
    for name in ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(CourseError, match="not inside a Slurm step"):
        resolver.slurm_resolver()
    assert resolver.cluster_resolver() is None
