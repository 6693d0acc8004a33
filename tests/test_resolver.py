"""TF_CONFIG and the course's Slurm resolver (helpers.resolver): round trips, port ranges, ports in use named, malformed Slurm variables."""

import json
import socket

import pytest

from helpers.errors import CourseError
from helpers import resolver
from tests.support.slurm_step import free_pair, slurm_env, step_range


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


@pytest.mark.parametrize("cpu_build, expected", [(True, 0), (False, 2)])
def test_slurm_resolver_counts_only_gpus_tensorflow_can_use(monkeypatch, cpu_build, expected):
    """Two tasks a node sharing 4 GPUs: each plans 2. The CPU wheel can use none of them (the local
    Slurm's simulated GPUs): MWMS would make 2 replicas on GPUs that do not exist, and lesson 03's fit
    waited for ever in its first collective (a node-layout server job, tests/test_lessons_in_class_layouts.py)."""
    slurm_env(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "4")
    monkeypatch.setattr(resolver, "tensorflow_is_cpu_build", lambda: cpu_build)
    # the plan, not this process's state: an earlier test in the same pytest process may have started
    # TensorFlow, and gpus.apply then refuses to change CUDA_VISIBLE_DEVICES (CI's stream did)
    monkeypatch.setattr("helpers.host.tensorflow_initialised", lambda: False)
    step_range(monkeypatch)
    res = resolver.slurm_resolver()
    assert res.gpu_plan.replicas == 2 and res.num_accelerators() == {"GPU": expected}


def test_slurm_resolver_on_cpu_nodes(monkeypatch):
    slurm_env(monkeypatch)
    port = step_range(monkeypatch)
    res = resolver.slurm_resolver()
    assert (res.task_type, res.task_id) == ("worker", 1)  # before cluster_spec(): lesson 03 asks first
    spec = res.cluster_spec().as_dict()
    # job 7, step 0: block 7*16 of 2 ports -> LOW + (112 % 50) * 2 = LOW + 24
    assert spec == {"worker": [f"node1:{port}", f"node1:{port + 1}", f"node2:{port}", f"node2:{port + 1}"]}
    assert (res.task_type, res.task_id) == ("worker", 1)
    assert res.num_accelerators() == {"GPU": 0}  # upstream would claim one GPU per task
    described = resolver.describe(res)
    assert described["rank"] == 1 and described["address"] == f"node1:{port + 1}"
    assert described["gpus"] == "CPU"
    assert resolver.cluster_resolver() is not None  # auto-detected from the step


def test_slurm_engines_tf_config_is_the_slurm_resolvers(monkeypatch):
    """Slurm engines get a TF_CONFIG built from their step (TensorFlow's no-argument strategy reads
    only TF_CONFIG): the workers and rank of `slurm_resolver`. `cluster_resolver` still takes the
    Slurm resolver for it (its GPU plan); a TF_CONFIG naming other workers wins, as before."""
    from helpers.engines import on_engine

    slurm_env(monkeypatch)
    port = step_range(monkeypatch)
    config = on_engine.slurm_tf_config()
    workers = [f"node1:{port}", f"node1:{port + 1}", f"node2:{port}", f"node2:{port + 1}"]
    assert config == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    chosen = resolver.cluster_resolver()
    assert type(chosen).__name__ == "CourseSlurmClusterResolver"
    assert resolver.describe(chosen)["workers"] == workers and chosen.task_id == 1
    other = resolver.make_tf_config([f"localhost:{port}", f"localhost:{port + 1}"], 1)
    monkeypatch.setenv("TF_CONFIG", json.dumps(other))
    assert not resolver.is_step_tf_config(other)
    assert type(resolver.cluster_resolver()).__name__ == "TFConfigClusterResolver"
    monkeypatch.setenv("SLURM_PROCID", "2")  # the step's workers, another rank's index: not this task's
    assert not resolver.is_step_tf_config(config)


def test_slurm_port_in_use_is_named(monkeypatch):
    """The port a step derives is checked free on this node before TensorFlow would bind it."""
    import subprocess
    import sys

    slurm_env(monkeypatch, procid="0")
    port = step_range(monkeypatch)
    # another process (another job's worker) holds it; a port this process holds is its own server's
    holder = subprocess.Popen([sys.executable, "-c", "import socket, sys, time; s = socket.socket(); "
                               "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(); print('held', flush=True); time.sleep(60)",
                               str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CourseError, match=rf"port {port} on 0.0.0.0 is already in use.*job 7 step 0, rank 0"):
            resolver.slurm_resolver()
    finally:
        holder.kill()
        holder.wait()
    with socket.socket() as mine:  # held by this process: resolving again after its server started
        mine.bind(("0.0.0.0", port))
        mine.listen()
        assert resolver.describe(resolver.slurm_resolver())["address"] == f"node1:{port}"


def test_slurm_malformed_variables(monkeypatch):
    slurm_env(monkeypatch, procid="one")
    with pytest.raises(CourseError, match="SLURM_PROCID='one' is not a whole number"):
        resolver.slurm_resolver()
    slurm_env(monkeypatch)
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "two")
    with pytest.raises(CourseError, match="malformed"):
        resolver.slurm_resolver()


def test_no_slurm_step(monkeypatch):
    for name in ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(CourseError, match="not inside a Slurm step"):
        resolver.slurm_resolver()
    assert resolver.cluster_resolver() is None


def test_tf_config_port_outside_the_range_or_in_use_is_named(monkeypatch):
    """The worker's own path (cluster_resolver with TF_CONFIG) checks its port before TensorFlow binds it."""
    import json

    port = step_range(monkeypatch, avoid=33561)
    low, high = resolver.port_range()
    # the user's own ports are theirs (the ZIH guide's example uses 33561-33562): a warning names the range
    monkeypatch.setenv("TF_CONFIG", json.dumps(resolver.make_tf_config(["localhost:33561", "localhost:33562"], 0)))
    with pytest.warns(UserWarning, match=rf"port 33561 is outside COURSE_PORT_RANGE={low}-{high}.*firewall"):
        assert resolver.cluster_resolver() is not None
    with pytest.raises(CourseError, match="outside the allowed range"):  # the course's own choice: refused
        resolver.check_port(33561)
    monkeypatch.setenv("TF_CONFIG", json.dumps(resolver.make_tf_config([f"localhost:{port}", f"localhost:{port + 1}"], 1)))
    with socket.socket() as other:  # bound by another process in real life; by a plain socket here
        other.bind(("0.0.0.0", port + 1))
        with pytest.raises(CourseError, match=rf"port {port + 1} on 0.0.0.0 is already in use"):
            resolver.cluster_resolver()
    assert resolver.describe(resolver.cluster_resolver())["address"] == f"localhost:{port + 1}"


def test_a_port_whose_last_worker_just_ended_is_free_a_listening_one_is_not():
    """A requeued job's next run gets the same ports; its first run's connections linger in
    TIME_WAIT for a minute. TensorFlow's server binds with SO_REUSEADDR and can use the port, so the
    check must not call it taken (it did: the requeue lesson's second run failed); a listener must."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    assert not resolver.port_is_free(port), "a listening socket must count as taken"
    accepted.close()  # the server side closes first: its connection stays in TIME_WAIT on `port`
    client.close()
    server.close()
    with socket.socket() as plain:  # what the check did before: a bind without SO_REUSEADDR
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    assert resolver.port_is_free(port), "only TIME_WAIT connections are left on the port"
