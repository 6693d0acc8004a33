"""JupyterHub for the course: each user's JupyterLab runs as a Slurm job on compute nodes.

A template for a centre to adapt (the course's hub test loads this file and overrides only
what a one-machine test needs). Install the course once where every compute node sees it, as
root (or a course account named in COURSE_HUB_INSTALL_OWNER): every learner's server runs only
a course Python that root, that account or the learner owns (docs/gpu-class.md):

    git clone ... /opt/tf-hpc-course && cd /opt/tf-hpc-course && make install EXTRA=gpu

then run the hub with this file (`jupyterhub -f slurm/jupyterhub/jupyterhub_config.py`)
behind the centre's HTTPS front end. Everything site-specific is an environment variable (each
declared in helpers/settings.py; all of them, with defaults: docs/settings.md):

    COURSE_DIR             the course checkout (default: two levels above this file)
    COURSE_HUB_IP          the hub API address compute nodes can reach (default: this host's
                           address on their network; never all interfaces)
    COURSE_HUB_PARTITION   partition for the servers (default: the site's default)
    COURSE_HUB_TIME        time limit of a server (default 02:00:00)
    COURSE_HUB_OPTIONS     extra #SBATCH options (default: the layout's, below), e.g.
                           "--nodes=2 --ntasks-per-node=4 --gpus-per-task=1 --exclusive"
    COURSE_HUB_GPUS_PER_NODE  GPUs on each node of that partition (default: what sinfo shows;
                           0 on CPU nodes): a node layout server asks for all of them
    COURSE_HUB_INSTALL_OWNER  the course account that owns COURSE_DIR and its .venv, if not root

For a class (docs/offering.md, "Running a class"):

    COURSE_CLASS_LAYOUT     node (default): a node per learner, every server job --exclusive
                            with the node's GPUs ("--nodes=1 --ntasks=N --gres=gpu:N", N GPUs);
                            gpu: a GPU per learner, servers share nodes ("--nodes=1 --ntasks=2
                            --gpus=1"), the learner's engines share its GPU with memory limits
                            and RING collectives (helpers.gpus); classmates on one node can reach
                            each other's TensorFlow ports (docs/security.md)
    COURSE_MODE, COURSE_EPOCHS, COURSE_MAX_STEPS, COURSE_JOB_GPUS_PER_TASK
                            class-wide settings passed to every learner's server, kernels and
                            engines (the list: helpers.class_settings; each value checked here)

    COURSE_HUB_RESERVATION  a Slurm reservation made for the day: servers run in it, and so do
                            the engines' and batch jobs learners submit from their server
                            (SBATCH_RESERVATION and SALLOC_RESERVATION are set for them)
    COURSE_HUB_SPAWN_LIMIT  servers starting at once (default 20); the rest are told to retry
    COURSE_HUB_IDLE_TIMEOUT seconds without activity before a server is stopped (default 3600;
                            0 turns the culler off)
    COURSE_HUB_START_TIMEOUT seconds a server may wait in the queue and start (default 300)
    COURSE_PULL_REPO       the course repository a pull link may pull (`class link`); unset: none
    COURSE_PULL_BRANCH     its branch (default main); COURSE_PULL_DIR its directory (tf-hpc-course)

Stopping or restarting the hub leaves the learners' servers running (they are Slurm jobs); the
hub finds them again from its database. `python -m helpers class who` lists who is where, and
`python -m helpers class end` stops every learner's server and jobs.

The server runs in the job's batch step (`req_srun = ""`), so the notebook can start the
course's engines as an `srun` step of the same allocation (COURSE_ENGINES=auto, set for it,
does so whenever the job has two or more tasks and enough of them for the engines; a lesson that
starts more engines than the job has tasks, lesson 12's parameter-server cluster, gets local
processes on the server's node): ask for as many tasks as a lesson has workers (one per GPU). A server whose job has one
task can still start engines in a separate job (`start_engines(n, slurm=True)` from outside
an allocation needs the hub server *not* to be in one; see docs/offering.md).
"""

import os
from pathlib import Path

c = get_config()  # noqa: F821 - provided by JupyterHub

# The hub's database and cookie secret let anyone who reads them act as a user: everything the
# hub writes is readable by its owner only (the servers' batch script sets its own umask).
os.umask(0o077)


def _setting(name: str, default: str = "") -> str:
    """The COURSE_* setting `name` (each is declared in helpers.settings, docs/settings.md) as set
    in the hub's environment, else `default`."""
    from helpers.settings import value

    found = value(name)
    return default if found is None else found


def _whole(name: str, default: int) -> int:
    """A whole-number setting, else `default`: a bad value stops the hub with one line naming it."""
    from helpers.settings import whole_number

    return whole_number(name, default)


HERE = Path(__file__).resolve().parent
COURSE_DIR = Path(_setting("COURSE_DIR", str(HERE.parents[1])))
VENV_BIN = COURSE_DIR / ".venv" / "bin"

# batchspawner's SlurmSpawner, with squeue failures, early job ends and queue waits handled
c.JupyterHub.spawner_class = "course_hub.spawner.CourseSlurmSpawner"
c.JupyterHub.bind_url = "http://127.0.0.1:8000"  # the public side, behind the centre's HTTPS proxy

def _hub_ip() -> str:
    """Where servers on compute nodes call the hub: one address, never every interface (the hub
    API would then answer anyone on any network this host is on)."""
    from helpers.slurm.nodes import checked_controller_ip, controller_ip

    from helpers.settings import value

    given = value("COURSE_HUB_IP")
    return checked_controller_ip(given) if given is not None else controller_ip(value("COURSE_HUB_PARTITION"))


c.JupyterHub.hub_ip = _hub_ip()

# The single-user server: the course's Python, JupyterLab, the course's notebooks.
c.Spawner.cmd = [str(VENV_BIN / "jupyterhub-singleuser")]
c.SlurmSpawner.batchspawner_singleuser_cmd = str(VENV_BIN / "batchspawner-singleuser")
c.Spawner.default_url = "/lab"
c.Spawner.env_keep = ["PATH", "LANG", "LC_ALL", "SLURM_CONF", "COURSE_DATA_DIR"]
c.Spawner.environment = {
    "COURSE_ENGINES": "auto",         # engines as the server job's tasks when it has enough, else local
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # any TensorFlow the course did not plan (a kernel importing it directly) takes GPU memory as it
    # needs it, not nearly all of every GPU its engines need; the course's plans set their own
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
}
# what a pull link may pull into a learner's home (course_server/pull.py): nothing else
c.Spawner.environment.update({name: _setting(name) for name in
                              ("COURSE_PULL_REPO", "COURSE_PULL_BRANCH", "COURSE_PULL_DIR")})


def _class_settings() -> dict:
    """The trainer's class-wide COURSE_* settings in the hub's environment, each checked (a bad
    value stops the hub with one line): they reach every learner's server, kernels and engines."""
    from helpers.class_settings import class_settings

    return class_settings(os.environ)


CLASS = _class_settings()
c.Spawner.environment.update(CLASS)
LAYOUT = CLASS.get("COURSE_CLASS_LAYOUT", "node")

def _install_uid() -> str:
    """The uid of the course account that owns the class's install (COURSE_HUB_INSTALL_OWNER), which
    every server trusts beside root and the learner; root's (0) alone when unset. An account the
    hub's host does not know stops the hub with one line."""
    import pwd

    from helpers.errors import CourseError

    name = _setting("COURSE_HUB_INSTALL_OWNER").strip()
    try:
        return str(pwd.getpwnam(name).pw_uid) if name else "0"
    except KeyError:
        raise CourseError(f"COURSE_HUB_INSTALL_OWNER={name!r}: no such user on this host") from None


def _batch_script() -> str:
    from helpers.environment import PROXY_VARIABLES  # the one list of them

    return ((HERE / "server.sbatch.j2").read_text().replace("@PROXY_VARIABLES@", " ".join(PROXY_VARIABLES))
            .replace("@COURSE_DIR@", str(COURSE_DIR)).replace("@INSTALL_UID@", _install_uid()))


c.SlurmSpawner.batch_script = _batch_script()
c.SlurmSpawner.req_srun = ""  # server in the batch step: `srun` from the notebook gets the job's CPUs
c.SlurmSpawner.req_runtime = _setting("COURSE_HUB_TIME", "02:00:00")
c.SlurmSpawner.req_partition = _setting("COURSE_HUB_PARTITION")


def _gpus_per_node() -> int:
    """GPUs on each node of the servers' partition: COURSE_HUB_GPUS_PER_NODE, else what sinfo shows
    (the fewest of its GPU nodes; 0 for CPU nodes). A hub that cannot tell stops with one line."""
    from helpers.errors import CourseError
    from helpers.settings import text
    from helpers.slurm.nodes import partition_shape

    if text("COURSE_HUB_GPUS_PER_NODE"):
        return _whole("COURSE_HUB_GPUS_PER_NODE", 0)
    try:
        return partition_shape(_setting("COURSE_HUB_PARTITION") or None)[1]
    except CourseError as exc:
        raise CourseError(f"cannot tell the GPUs per node of the servers' partition ({exc}): set "
                          "COURSE_HUB_GPUS_PER_NODE (0 on CPU nodes) or COURSE_HUB_OPTIONS") from None


def _server_options(layout: str) -> str:
    """The learner's server job in the class's layout.

    node: a whole node, --exclusive (no other user's job on a learner's node, where the lessons'
    TensorFlow workers open unauthenticated gRPC ports, docs/security.md), and all its GPUs as
    GRES, a task per GPU. --exclusive alone gives the job the node's GPUs but none to its steps:
    on Slurm 22.05 the batch step saw CUDA_VISIBLE_DEVICES=0,1,2,3 while an srun step (the
    engines) saw none, and with ConstrainDevices could not open them; --gres=gpu:N gives every
    step the node's N GPUs. gpu: one GPU and two tasks (the engines) per learner, nodes shared."""
    if layout == "gpu":
        return "--nodes=1 --ntasks=2 --gpus=1"
    gpus = _gpus_per_node()
    return f"--nodes=1 --ntasks={gpus} --gres=gpu:{gpus} --exclusive" if gpus else "--nodes=1 --ntasks=2 --exclusive"


# the centre's own options win; otherwise the layout's (a partition reserved for the class, one user
# per node with ExclusiveUser=YES, serves the node layout as well)
c.SlurmSpawner.req_options = _setting("COURSE_HUB_OPTIONS") or _server_options(LAYOUT)
# a busy partition; the page shows the job as pending with Slurm's reason, then says it waited
c.SlurmSpawner.start_timeout = _whole("COURSE_HUB_START_TIMEOUT", 300)
c.SlurmSpawner.http_timeout = 120
# one squeue a second per starting server, not two (batchspawner's 0.5 s: at the spawn limit of
# 20, forty sudo+squeue calls a second on the hub and the controller)
c.SlurmSpawner.startup_poll_interval = 1.0
# Submit as the user. With sudo rules in place use the default ("sudo -E -u {username}");
# a hub running as root without sudo can use runuser:
c.SlurmSpawner.exec_prefix = _setting("COURSE_HUB_EXEC_PREFIX", "sudo -E -u {username}")

# --- a class ---------------------------------------------------------------------------------
RESERVATION = _setting("COURSE_HUB_RESERVATION")
if RESERVATION:
    from helpers.slurm.commands import checked_word

    c.SlurmSpawner.req_reservation = checked_word("COURSE_HUB_RESERVATION", RESERVATION)
    # what learners submit from their server (engines' job, batch jobs) lands in it too
    c.Spawner.environment.update({"SBATCH_RESERVATION": RESERVATION, "SALLOC_RESERVATION": RESERVATION})
# a whole class logging in at once: at most this many servers start together, the others get
# "too many users trying to log in right now, try again" (HTTP 429) instead of slowing everyone
c.JupyterHub.concurrent_spawn_limit = _whole("COURSE_HUB_SPAWN_LIMIT", 20)
# the servers are Slurm jobs: a hub restart must not stop them (it finds them in its database)
c.JupyterHub.cleanup_servers = False

IDLE = _whole("COURSE_HUB_IDLE_TIMEOUT", 3600)
if IDLE > 0:
    import sys

    c.JupyterHub.services = [{
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={IDLE}",
                    f"--cull-every={max(5, min(300, IDLE // 4))}"],
    }]
    c.JupyterHub.load_roles = [{
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    }]
