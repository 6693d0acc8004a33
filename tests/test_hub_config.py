"""The JupyterHub template a centre adapts: the hub API on one address, private files by default."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets.config import Config

from helpers.errors import CourseError

CONFIG = Path(__file__).resolve().parents[1] / "slurm" / "jupyterhub" / "jupyterhub_config.py"


def _load(monkeypatch, **env) -> Config:
    """The shipped config as the hub loads it, with `env`; GPUs per node 0 (CPU nodes) unless given,
    so that no test here asks a Slurm for its partition's."""
    from helpers.class_settings import CLASS_SETTINGS

    for name in ("COURSE_HUB_IP", "COURSE_CONTROLLER_IP", "COURSE_HUB_RESERVATION", "COURSE_HUB_IDLE_TIMEOUT",
                 "COURSE_HUB_SPAWN_LIMIT", "COURSE_HUB_OPTIONS", "COURSE_HUB_PARTITION", "COURSE_HUB_INSTALL_OWNER",
                 *CLASS_SETTINGS):
        monkeypatch.delenv(name, raising=False)
    env = {"COURSE_HUB_GPUS_PER_NODE": "0", **env}
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    config = Config()
    monkeypatch.setattr("os.umask", lambda mask: 0o022)  # the file sets the hub's umask: not this test's
    exec(compile(CONFIG.read_text(), str(CONFIG), "exec"), {"get_config": lambda: config, "__file__": str(CONFIG)})
    return config


def test_hub_api_defaults_to_the_cluster_address_never_all_interfaces(monkeypatch):
    config = _load(monkeypatch, COURSE_CONTROLLER_IP="10.9.8.7")  # what the route to the nodes gives
    assert config.JupyterHub.hub_ip == "10.9.8.7"
    assert _load(monkeypatch, COURSE_HUB_IP="10.1.1.1").JupyterHub.hub_ip == "10.1.1.1"
    for wildcard in ("", "0.0.0.0"):
        with pytest.raises(CourseError, match="every interface"):
            _load(monkeypatch, COURSE_HUB_IP=wildcard)


def test_server_files_are_private_and_no_proxy_reaches_grpc(monkeypatch):
    from helpers.environment import PROXY_VARIABLES

    script = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1").SlurmSpawner.batch_script
    assert "umask 077" in script and "umask 022" not in script  # the text; a no-op line (`: umask 077`) passes here:
    # the modes a real learner's server writes, under a hub at umask 022, are test_hub_class's to check
    unset = next(line for line in script.splitlines() if line.startswith("unset ") and "proxy" in line)
    assert set(unset.split()[1:]) == set(PROXY_VARIABLES), unset


def test_a_class_reservation_reaches_the_servers_and_what_learners_submit(monkeypatch):
    config = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_RESERVATION="course-day1")
    assert config.SlurmSpawner.req_reservation == "course-day1"
    env = config.Spawner.environment
    assert env["SBATCH_RESERVATION"] == env["SALLOC_RESERVATION"] == "course-day1"
    assert "#SBATCH --reservation={{reservation}}" in config.SlurmSpawner.batch_script
    with pytest.raises(CourseError, match="not a Slurm name"):
        _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_RESERVATION="day1\n#SBATCH --uid=0")
    assert "SBATCH_RESERVATION" not in _load(monkeypatch, COURSE_HUB_IP="10.1.1.1",
                                             COURSE_HUB_RESERVATION="").Spawner.environment


def test_class_defaults_spawn_limit_culler_and_servers_outlive_the_hub(monkeypatch):
    config = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1")
    assert config.JupyterHub.spawner_class == "course_hub.spawner.CourseSlurmSpawner"
    assert config.JupyterHub.concurrent_spawn_limit == 20 and config.JupyterHub.cleanup_servers is False
    (culler,) = config.JupyterHub.services
    assert "--timeout=3600" in culler["command"]
    assert {"delete:servers", "read:users:activity"} <= set(config.JupyterHub.load_roles[0]["scopes"])
    config = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_IDLE_TIMEOUT="0", COURSE_HUB_SPAWN_LIMIT="5")
    assert "services" not in config.JupyterHub and config.JupyterHub.concurrent_spawn_limit == 5


def test_servers_are_exclusive_kernels_on_private_sockets_and_the_python_checked(monkeypatch):
    config = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1")
    assert "--exclusive" in config.SlurmSpawner.req_options.split()
    script = config.SlurmSpawner.batch_script
    assert '--KernelManager.transport=ipc --KernelManager.ip="$KERNELS/kernel"' in script
    assert 'KERNELS=$(mktemp -d' in script  # mode 700: only the learner enters it
    assert ': "${ADDRESS:?' in script  # no address: the job stops, it never listens everywhere
    root = str(CONFIG.parents[2])
    assert f'for path in "{root}" "{root}/.venv" "{root}/.venv/bin"' in script and "@COURSE_DIR@" not in script


def test_the_server_script_as_batchspawner_renders_it_is_valid_bash(monkeypatch, tmp_path):
    """A quoting slip in the template fails every learner's job at once (`unexpected EOF`)."""
    import subprocess

    import jinja2

    script = jinja2.Template(_load(monkeypatch, COURSE_HUB_IP="10.1.1.1").SlurmSpawner.batch_script).render(
        homedir="/home/learner", keepvars="PATH,SLURM_CONF", cmd="/opt/course/.venv/bin/jupyterhub-singleuser",
        options="--nodes=1 --ntasks=2 --exclusive", prologue="", epilogue="", srun="", runtime="02:00:00",
        reservation="day1")
    (tmp_path / "server.sbatch").write_text(script)
    checked = subprocess.run(["bash", "-n", str(tmp_path / "server.sbatch")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_a_starting_server_is_polled_once_a_second_not_twice(monkeypatch):
    """batchspawner's 0.5 s made forty sudo+squeue calls a second at a spawn limit of 20."""
    config = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1")
    assert config.SlurmSpawner.startup_poll_interval >= 1.0


def test_the_class_settings_reach_the_servers_checked(monkeypatch):
    """Every class-wide setting the hub is given goes to every server's environment (the sbatch
    --export list is the environment's keys); a bad value stops the hub with one line."""
    from helpers.class_settings import CLASS_SETTINGS

    given = {"COURSE_MODE": "Workshop", "COURSE_EPOCHS": "2", "COURSE_MAX_STEPS": "50", "COURSE_CLASS_LAYOUT": "gpu",
             "COURSE_JOB_GPUS_PER_TASK": "1"}
    assert set(given) == set(CLASS_SETTINGS), "the test names every class-wide setting"
    env = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", **given).Spawner.environment
    assert {k: env[k] for k in given} == {**given, "COURSE_MODE": "workshop"}
    assert "COURSE_EPOCHS" not in _load(monkeypatch, COURSE_HUB_IP="10.1.1.1").Spawner.environment
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"  # TensorFlow the course did not plan: memory as needed
    for name, bad in (("COURSE_EPOCHS", "2; rm -rf ~"), ("COURSE_MODE", "fast"), ("COURSE_CLASS_LAYOUT", "gpus"),
                      ("COURSE_MAX_STEPS", "0"), ("COURSE_JOB_GPUS_PER_TASK", "$(id)")):
        with pytest.raises(CourseError, match=name):
            _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", **{name: bad})


def test_the_layout_picks_the_server_job(monkeypatch):
    """node: a whole node per learner (--exclusive); gpu: one GPU and two tasks, nodes shared."""
    node = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1").SlurmSpawner.req_options.split()
    gpu = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_CLASS_LAYOUT="gpu").SlurmSpawner.req_options.split()
    assert "--exclusive" in node and "--gpus=1" not in node
    assert "--exclusive" not in gpu and {"--gpus=1", "--ntasks=2", "--nodes=1"} <= set(gpu)
    mine = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_CLASS_LAYOUT="gpu", COURSE_HUB_OPTIONS="--gpus=2")
    assert mine.SlurmSpawner.req_options == "--gpus=2"  # the centre's own options win


def test_the_node_layout_asks_for_the_nodes_gpus(monkeypatch):
    """Finding 4 of issue 56: `--exclusive` alone gives the job the node's GPUs but none to its
    steps (the engines); the node layout's server asks for them all as GRES, a task per GPU, from
    COURSE_HUB_GPUS_PER_NODE or, unset, from sinfo; CPU nodes keep the 2-task whole node."""
    import helpers.slurm.nodes as nodes

    asked = []
    monkeypatch.setattr(nodes, "partition_shape", lambda partition=None: asked.append(partition) or (2, 4))
    options = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_GPUS_PER_NODE=None,
                    COURSE_HUB_PARTITION="a100").SlurmSpawner.req_options
    assert options == "--nodes=1 --ntasks=4 --gres=gpu:4 --exclusive" and asked == ["a100"], (options, asked)
    given = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_GPUS_PER_NODE="8").SlurmSpawner.req_options
    assert given == "--nodes=1 --ntasks=8 --gres=gpu:8 --exclusive" and asked == ["a100"], "no sinfo when given"
    monkeypatch.setattr(nodes, "partition_shape", lambda partition=None: (3, 0))  # a CPU partition
    cpu = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_GPUS_PER_NODE=None).SlurmSpawner.req_options
    assert cpu == "--nodes=1 --ntasks=2 --exclusive", cpu
    gpu = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_GPUS_PER_NODE=None, COURSE_CLASS_LAYOUT="gpu")
    assert gpu.SlurmSpawner.req_options == "--nodes=1 --ntasks=2 --gpus=1"


def test_a_hub_that_cannot_tell_the_gpus_per_node_stops_with_one_line(monkeypatch):
    import helpers.slurm.nodes as nodes

    def no_slurm(partition=None):
        raise CourseError("sinfo: not found")

    monkeypatch.setattr(nodes, "partition_shape", no_slurm)
    with pytest.raises(CourseError, match="COURSE_HUB_GPUS_PER_NODE .0 on CPU nodes. or COURSE_HUB_OPTIONS") as caught:
        _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_GPUS_PER_NODE=None)
    assert "\n" not in str(caught.value) and "sinfo: not found" in str(caught.value)
    mine = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_GPUS_PER_NODE=None, COURSE_HUB_OPTIONS="--gres=gpu:2")
    assert mine.SlurmSpawner.req_options == "--gres=gpu:2"  # the centre's options: Slurm not asked
    with pytest.raises(CourseError, match="COURSE_HUB_GPUS_PER_NODE='four' must be a whole number"):
        _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_GPUS_PER_NODE="four")


def test_a_course_account_owning_the_install_is_trusted_by_uid(monkeypatch):
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    script = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_INSTALL_OWNER="nobody").SlurmSpawner.batch_script
    assert f'[ "$owner" != "{nobody}" ]' in script and "@INSTALL_UID@" not in script
    alone = _load(monkeypatch, COURSE_HUB_IP="10.1.1.1").SlurmSpawner.batch_script
    assert '[ "$owner" != "0" ]' in alone  # unset: root alone (and the learner)
    with pytest.raises(CourseError, match="COURSE_HUB_INSTALL_OWNER='no-such-course-user': no such user"):
        _load(monkeypatch, COURSE_HUB_IP="10.1.1.1", COURSE_HUB_INSTALL_OWNER="no-such-course-user")
