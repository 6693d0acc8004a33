"""Every COURSE_* setting, declared once: its name, what it takes, its default, what reads it, one line of help.

The course reads environment variables in many places (lessons, engines, the hub's config, the
batch scripts, the tests). This table is the one list: `python -m helpers settings` prints each
with its value here and where that came from, docs/settings.md is generated from it, and
tests/test_settings.py fails on a COURSE_* name used anywhere in the repository that is not
declared here. Python code reads a setting through `value()` or `text()` (never
`os.environ[...]` directly), so an undeclared name is a KeyError at its first read.

The checks of the class-wide settings (those a hub or Open OnDemand passes to every learner,
scope `class`) live here too: a word from a list or a whole number in a range, nothing that could
reach a shell. Every other setting keeps its check beside the code that uses it, named in `check`
("module:function", which reads the setting and raises a CourseError naming it on a bad value).

Importing this module imports nothing but the standard library and `errors`.
"""

from __future__ import annotations

import os
from dataclasses import KW_ONLY, dataclass
from typing import Mapping

from .errors import CourseError

SCOPES = {
    "class": "class-wide: the hub or the Open OnDemand app passes it to every learner, checked (helpers.class_settings)",
    "learner": "a learner, trainer or centre sets it for a session, a shell or the hub's servers",
    "hub": "the hub's configuration (slurm/jupyterhub/jupyterhub_config.py) or `python -m helpers class`",
    "script": "read by a shell script (slurm/, the Open OnDemand app, the Apptainer recipe), not by Python",
    "internal": "set by the course for the processes it starts; not for users to set",
    "test": "read by the tests and `make test` only",
}


@dataclass(frozen=True)
class Setting:
    """One COURSE_* environment variable: what it takes, its default, who reads it, and why."""

    name: str
    kind: str  # what it takes, in words
    default: str  # what applies when it is unset, in words ("" : nothing, the feature is off)
    readers: tuple[str, ...]  # repository paths of the files that read it
    help: str  # one line
    _: KW_ONLY  # the rest by name in the table: scope="hub", check=..., bad=...
    scope: str = "learner"
    check: str = ""  # "module:function" that reads it and raises a CourseError naming it on a bad value
    bad: str = ""  # a value that check refuses (tried by tests/test_settings.py)
    secret: bool = False  # its value is never printed
    choices: tuple[str, ...] = ()  # class scope: the words it accepts
    number: bool = False  # class scope: also a whole number from low to high
    low: int = 1
    high: int = 1_000_000


def _s(*args, **kwargs) -> Setting:
    """A row of the table: name, what it takes, default, readers and help in that order, the rest by name."""
    return Setting(*args, **kwargs)


_ALL = (
    # -- class-wide: the hub and the Open OnDemand app pass these to every learner --------------------------------
    _s("COURSE_MODE", "quick, workshop, full or auto", "auto (workshop where a GPU is visible, else quick)",
       ("helpers/mode.py", "helpers/commands/course_run.py", "slurm/jupyterhub/jupyterhub_config.py"),
       "every lesson's size", scope="class", check="helpers.mode:mode_sizes", bad="fast",
       choices=("auto", "quick", "workshop", "full")),
    _s("COURSE_EPOCHS", "a whole number >= 1", "the mode's epochs", ("helpers/mode.py",),
       "epochs of most lessons' trainings (lesson by lesson: docs/modes-and-data.md, Class overrides)",
       scope="class", check="helpers.mode:mode_sizes", bad="0", number=True),
    _s("COURSE_MAX_STEPS", "a whole number >= 1", "no cap", ("helpers/mode.py",),
       "steps per epoch at most, in most lessons (lesson by lesson: docs/modes-and-data.md, Class overrides)",
       scope="class", check="helpers.mode:mode_sizes", bad="0", number=True),
    _s("COURSE_CLASS_LAYOUT", "node or gpu", "node", ("helpers/slurm/submit.py", "slurm/jupyterhub/jupyterhub_config.py"),
       "node: a node per learner, jobs --exclusive=user; gpu: a GPU per learner, learners share nodes",
       scope="class", check="helpers.slurm.submit:class_layout", bad="gpus", choices=("node", "gpu")),
    _s("COURSE_JOB_GPUS_PER_TASK", "a whole number 0-64, or auto", "auto (1 when the server's job has GPUs, else 0)",
       ("helpers/slurm/submit.py",), "GPUs per task of the jobs lessons submit", scope="class",
       check="helpers.slurm.submit:gpus_per_task", bad="two", choices=("auto",), number=True, low=0, high=64),
    # -- data and output --------------------------------------------------------------------------------------------
    _s("COURSE_DATA_DIR", "a directory", "none: quick mode makes synthetic data, the other modes stop",
       ("helpers/data.py", "helpers/doctor.py", "helpers/commands/course_run.py", "slurm/train.sbatch",
        "slurm/gpucheck.sbatch", "slurm/jupyterhub/jupyterhub_config.py"),
       "a prepared CIFAR-10 (`python -m helpers data prepare`); the hub passes it to every learner"),
    _s("COURSE_OUTPUT_DIR", "a directory", "build/ of your own checkout, else ~/tf-hpc-course-output",
       ("helpers/environment.py", "slurm/train.sbatch", "slurm/sweep"),
       "where runs write models, results and figures (shared by every node of a multi-node run)"),
    _s("COURSE_FIGURES_DIR", "a directory", "figures/ in the output directory", ("helpers/plots.py",),
       "where lessons save their figures"),
    _s("COURSE_HOROVOD_DIR", "a directory", "horovod/ in the output directory", ("helpers/horovod_env.py",),
       "where `make horovod` installs Horovod and lesson 13 finds it"),
    _s("COURSE_BUILD_DIR", "a directory", "build/ when you can write it, else $XDG_CACHE_HOME/tf-hpc-course/build",
       ("Makefile",), "where `make course`, `make site`, `make gpucheck` and `make bench` write", scope="script"),
    _s("COURSE_CACHE_DIR", "a directory", "$XDG_CACHE_HOME/tf-hpc-course (~/.cache/tf-hpc-course)",
       ("helpers/commands/horovod_build.py",), "where Horovod's build is kept between `make horovod` runs"),
    _s("COURSE_NODE_LOCAL", "a directory", "none: lesson 16 uses the job's $TMPDIR or /tmp",
       ("notebooks/16_input_at_scale.ipynb", "slurm/local/up"),
       "each node's own local disk at one path (lesson 16 stages data there); the local Slurm prints it"),
    # -- TensorFlow and the course's defaults -----------------------------------------------------------------------
    _s("COURSE_PORT_RANGE", "LOW-HIGH within 1024-65535", "10000-20000", ("helpers/resolver.py",),
       "the ports TensorFlow workers and engines may listen on", check="helpers.resolver:port_range", bad="1-2"),
    _s("COURSE_TUNING", "on or off (also 0, false, no)", "on", ("helpers/tuning.py",),
       "off: TensorFlow's own CPU defaults everywhere (what the bench compares against)"),
    _s("COURSE_COLLECTIVE_TIMEOUT", "seconds > 0", "300", ("helpers/strategy.py",),
       "how long a collective waits for a peer that never joins (alive but stuck) before the others stop",
       check="helpers.strategy:collective_timeout", bad="soon"),
    _s("COURSE_RENDEZVOUS_TIMEOUT", "seconds > 0", "120", ("helpers/rendezvous.py", "helpers/doctor.py"),
       "how long a worker waits for its peers at the start before it names the missing ones and exits",
       check="helpers.rendezvous:rendezvous_seconds", bad="soon"),
    _s("COURSE_DISABLE_KERAS_FIX", "1", "unset: the fix applies", ("helpers/keras_fix.py", "helpers/doctor.py"),
       "1: turn off the course's fix of Keras 3 fit under MultiWorkerMirroredStrategy (to see the failure)"),
    _s("COURSE_GPU_MEMORY_MIB", "MiB, a whole number", "unset: memory grows as needed",
       ("helpers/host.py", "helpers/gpus.py", "helpers/environment.py"),
       "this process's share of a shared GPU (the gpu class layout sets it for each kernel, engine and worker)"),
    _s("COURSE_LOCAL_WORKERS", "allow", "unset: refused where Slurm is found outside an allocation",
       ("helpers/slurm/login_node.py", "tests/conftest.py"),
       "allow: local multi-worker TensorFlow on this machine (its only user's override; never on a login node)"),
    # -- engines and Slurm ------------------------------------------------------------------------------------------
    _s("COURSE_ENGINES", "auto, local or slurm", "auto", ("helpers/engines/on_slurm.py",),
       "where lessons start their engines: auto, the allocation's tasks when there are enough (2+), else local",
       check="helpers.engines.on_slurm:want_slurm", bad="slrum"),
    _s("COURSE_CLUSTER", "a cluster id (course-...), a profile name or default", "unset: lessons start their own",
       ("helpers/engines/cluster.py",), "a running ipyparallel cluster every lesson attaches to"),
    _s("COURSE_CONTROLLER_IP", "an address of this host (never *, 0.0.0.0 or ::)", "this host's address on the route to the nodes",
       ("helpers/slurm/nodes.py", "slurm/engines.sbatch"),
       "the address the controller listens on, reachable from the compute nodes (never 0.0.0.0)",
       check="helpers.slurm.nodes:controller_ip", bad="0.0.0.0"),
    _s("COURSE_SLURM_PARTITION", "a Slurm name", "the site's default partition", ("helpers/slurm/request.py", "helpers/doctor.py"),
       "the partition of the engines' job (and of `doctor`'s checks)",
       check="helpers.slurm.request:SlurmRequest.from_env", bad="gpu\n#SBATCH --uid=0"),
    _s("COURSE_SLURM_ACCOUNT", "a Slurm name", "the site's default", ("helpers/slurm/request.py",),
       "the account the engines' job is charged to", check="helpers.slurm.request:SlurmRequest.from_env", bad="a b"),
    _s("COURSE_SLURM_TIME", "a Slurm time", "01:00:00", ("helpers/slurm/request.py",),
       "the engines' job's time limit", check="helpers.slurm.request:SlurmRequest.from_env", bad="1;id"),
    _s("COURSE_SLURM_NODES", "a whole number >= 1", "as the partition's nodes say", ("helpers/slurm/request.py",),
       "nodes of the engines' job", check="helpers.slurm.request:SlurmRequest.from_env", bad="0"),
    _s("COURSE_SLURM_TASKS_PER_NODE", "a whole number >= 1", "one per GPU on GPU nodes, else spread",
       ("helpers/slurm/request.py",), "engines per node", check="helpers.slurm.request:SlurmRequest.from_env",
       bad="four"),
    _s("COURSE_SLURM_CPUS_PER_TASK", "a whole number >= 1", "the site's default", ("helpers/slurm/request.py",),
       "CPUs per engine", check="helpers.slurm.request:SlurmRequest.from_env", bad="0"),
    _s("COURSE_SLURM_GPUS_PER_TASK", "a whole number >= 1", "none asked (one per task on GPU nodes by spreading)",
       ("helpers/slurm/request.py",), "GPUs per engine (Slurm binds one GPU to each task)",
       check="helpers.slurm.request:SlurmRequest.from_env", bad="one"),
    _s("COURSE_SLURM_OVERLAP", "1", "unset: the engines' step waits for free CPUs", ("helpers/engines/cluster.py",),
       "1: the engines' srun step shares CPUs with steps running already (--overlap)"),
    # -- the hub and `python -m helpers class` ----------------------------------------------------------------------
    _s("COURSE_DIR", "a directory", "the checkout: the submit directory (batch scripts) or two levels above the "
       "hub's config", ("slurm/jupyterhub/jupyterhub_config.py", "slurm/train.sbatch", "slurm/engines.sbatch",
                        "slurm/sweep"),
       "the course checkout the hub's servers and the batch scripts run from", scope="hub"),
    _s("COURSE_HUB_IP", "an address of this host (never *, 0.0.0.0 or ::)", "this host's address on the route to the servers' partition",
       ("slurm/jupyterhub/jupyterhub_config.py",), "the hub API's address the compute nodes reach", scope="hub"),
    _s("COURSE_HUB_PARTITION", "a Slurm name", "the site's default partition", ("slurm/jupyterhub/jupyterhub_config.py",),
       "the partition of the learners' server jobs", scope="hub"),
    _s("COURSE_HUB_TIME", "a Slurm time", "02:00:00", ("slurm/jupyterhub/jupyterhub_config.py",),
       "a server job's time limit", scope="hub"),
    _s("COURSE_HUB_OPTIONS", "#SBATCH options", "the layout's (node: a whole node --exclusive, its GPUs; gpu: --gpus=1)",
       ("slurm/jupyterhub/jupyterhub_config.py",), "the server jobs' options (`class plan` prints them)", scope="hub"),
    _s("COURSE_HUB_GPUS_PER_NODE", "a whole number >= 0", "the servers' partition's, as sinfo shows it",
       ("slurm/jupyterhub/jupyterhub_config.py",),
       "GPUs per node: a node layout server asks for them all (--gres=gpu:N); 0 on CPU nodes", scope="hub",
       check="helpers.settings:whole_number", bad="four", low=0),
    _s("COURSE_HUB_INSTALL_OWNER", "a user name", "none: root's install only (or the learner's own)",
       ("slurm/jupyterhub/jupyterhub_config.py",),
       "the course account that owns the class's install, trusted beside root by every server", scope="hub"),
    _s("COURSE_TRUSTED_UID", "a uid", "0 (root only, beside you)",
       ("slurm/ood/tf-hpc-course/template/safe_python.sh", "slurm/jupyterhub/server.sbatch.j2"),
       "the uid whose course Python the launchers trust beside root and you (the hub sets it from the install owner)",
       scope="internal"),
    _s("COURSE_HUB_RESERVATION", "a Slurm name", "none", ("slurm/jupyterhub/jupyterhub_config.py",
                                                           "helpers/commands/class_admin.py"),
       "the class's reservation: servers, engines and batch jobs run in it; `class end` cancels only its jobs",
       scope="hub"),
    _s("COURSE_HUB_SPAWN_LIMIT", "a whole number >= 1", "20", ("slurm/jupyterhub/jupyterhub_config.py",),
       "servers starting at once; the rest are told to retry", scope="hub", check="helpers.settings:whole_number", bad="twenty"),
    _s("COURSE_HUB_IDLE_TIMEOUT", "seconds, a whole number (0: never)", "3600",
       ("slurm/jupyterhub/jupyterhub_config.py",), "an idle server is stopped after this long", scope="hub",
       check="helpers.settings:whole_number", bad="1h", low=0),
    _s("COURSE_HUB_START_TIMEOUT", "seconds, a whole number >= 1", "300", ("slurm/jupyterhub/jupyterhub_config.py",),
       "the longest queue wait plus start of a server", scope="hub", check="helpers.settings:whole_number", bad="-1"),
    _s("COURSE_HUB_EXEC_PREFIX", "a command prefix", "sudo -E -u {username}", ("slurm/jupyterhub/jupyterhub_config.py",),
       "how the hub runs sbatch and squeue as the learner", scope="hub"),
    _s("COURSE_HUB_URL", "https://host[:port]", "http://127.0.0.1:8000 for class who/end; none for class link",
       ("helpers/commands/class_admin.py", "helpers/commands/cli.py"), "the hub's address for `python -m helpers class`",
       scope="hub"),
    _s("COURSE_HUB_TOKEN", "a JupyterHub API token", "none: class who/end use the reservation's users",
       ("helpers/commands/class_admin.py",), "an admin or service token for `class who|end` (never printed)", scope="hub",
       secret=True),
    _s("COURSE_HUB_GROUP", "a hub group", "none", ("helpers/commands/class_admin.py",),
       "the hub group of the class's learners, for `class who|end`", scope="hub"),
    _s("COURSE_PULL_REPO", "a public git URL", "none: links pull nothing", ("course_server/pull.py",
                                                                            "helpers/commands/cli.py",
                                                                            "slurm/jupyterhub/jupyterhub_config.py"),
       "the one repository a pull link may pull into a learner's home", scope="hub"),
    _s("COURSE_PULL_BRANCH", "a branch or tag", "main", ("course_server/pull.py", "helpers/commands/cli.py",
                                                         "slurm/jupyterhub/jupyterhub_config.py"),
       "the branch a pull link may pull", scope="hub"),
    _s("COURSE_PULL_DIR", "a directory name", "tf-hpc-course", ("course_server/pull.py", "helpers/commands/cli.py",
                                                                 "slurm/jupyterhub/jupyterhub_config.py"),
       "the directory in each learner's home a pull link fills", scope="hub"),
    # -- shell scripts ---------------------------------------------------------------------------------------------
    _s("COURSE_PYTHON", "a path", "$COURSE_DIR/.venv/bin/python (the OOD app: its form)",
       ("slurm/train.sbatch", "slurm/engines.sbatch", "slurm/sweep", "slurm/ood/tf-hpc-course/template/script.sh.erb"),
       "the course's Python in batch scripts and the Open OnDemand app", scope="script"),
    _s("COURSE_SERVER_IP", "an address of the node", "the node's address (getent hosts)", ("slurm/jupyterhub/server.sbatch.j2",),
       "the address a learner's server listens on", scope="script"),
    _s("COURSE_REPO", "a git URL", "the OOD form's", ("slurm/ood/tf-hpc-course/template/script.sh.erb",),
       "the repository the Open OnDemand app pulls", scope="script"),
    _s("COURSE_REF", "a branch or tag", "the OOD form's", ("slurm/ood/tf-hpc-course/template/script.sh.erb",),
       "the branch the Open OnDemand app pulls", scope="script"),
    _s("COURSE_HOME", "a directory", "$HOME/tf-hpc-course", ("slurm/ood/tf-hpc-course/template/script.sh.erb",),
       "where the Open OnDemand app puts the course", scope="script"),
    _s("COURSE_PIP", "a command", "python3 -m pip", ("slurm/apptainer/tf-hpc-course.def",),
       "the pip the Apptainer recipe installs with", scope="script"),
    _s("COURSE_SLURM_DIR", "a directory", "/run/course-slurm", ("slurm/local/common.sh", "tests/conftest.py"),
       "the local test Slurm's state directory (slurm/local/up and down)", scope="script"),
    _s("COURSE_SLURM_CPUS", "a whole number", "8", ("slurm/local/up",), "CPUs of each node of the local test Slurm",
       scope="script"),
    _s("COURSE_MODULE_ROOT", "a directory", "set by the module", ("notebooks/17_software_stack.ipynb",),
       "the environment's root, set by the modulefile lesson 17 writes", scope="internal"),
    # -- set by the course for its own processes -------------------------------------------------------------------
    _s("COURSE_KERNEL_GPU_MIB", "MiB", "unset", ("helpers/gpus.py",),
       "the kernel's share of the learner's GPU, handed down so engines and workers share the rest", scope="internal"),
    _s("COURSE_RANK", "a whole number", "unset outside engines", ("helpers/engines/on_engine.py",),
       "an engine's worker rank, set when the engine is prepared for TensorFlow", scope="internal"),
    _s("COURSE_OWNER_PID", "a process id", "unset", ("helpers/engines/ownership.py",),
       "the kernel that started a controller (what may be stopped is provably its own)", scope="internal"),
    _s("COURSE_OWNER_START", "a start time", "unset", ("helpers/engines/ownership.py",),
       "that kernel's start time (a reused pid is not the owner)", scope="internal"),
    _s("COURSE_DOCTOR_PROBE", "JSON", "unset", ("helpers/doctor.py",),
       "what `doctor`'s probe step on the nodes should find", scope="internal"),
    _s("COURSE_FIREWALL_STATE", "a directory", "/run/course-firewall", ("slurm/firewall/rules.sh",),
       "where the centre's firewall prolog keeps its per-job records (slurm/firewall, docs/security.md)", scope="script"),
    # -- tests -----------------------------------------------------------------------------------------------------
    _s("COURSE_REQUIRE_SLURM", "1", "unset: such tests skip, their reason printed", ("tests/conftest.py", "tests/support/required.py", ".ci/run"),
       "1: a test that needs what CI as root has (the local Slurm, root, apt-get, /usr/bin/python3) fails, not skips", scope="test"),
    _s("COURSE_REQUIRE_BROWSER", "1", "unset", ("tests/test_browser.py", ".ci/run"),
       "1: a browser test that cannot run fails instead of skipping", scope="test"),
    _s("COURSE_REQUIRE_HOROVOD", "1", "unset", ("notebooks/13_from_horovod.ipynb", "tests/test_horovod.py", ".ci/run"),
       "1: lesson 13 fails when Horovod is not built, and test_horovod's build test when it cannot build", scope="test"),
    _s("COURSE_NBVAL_KEEP", "a directory", "unset", ("conftest.py", "tests/test_site.py", "Makefile"),
       "where the nbval pass keeps each notebook it ran (make test)", scope="test"),
    _s("COURSE_NBVAL_SLURM", "visible", "unset", ("conftest.py",),
       "visible: a test runs a lesson on Slurm through nbval on purpose", scope="test"),
    _s("COURSE_DURATIONS", "a file", "unset", ("tests/durations.py", "tests/streams.py", "Makefile"),
       "where make test writes every test's duration (each stream's beside it: NAME-slurm.json, NAME-local-1.json)", scope="test"),
    _s("COURSE_TEST_TAG", "a tag", "set by the tests", ("tests/conftest.py",),
       "the test that started a process: nothing_left_behind finds what a test left running by it", scope="test"),
    _s("COURSE_TEST_CLAIMS", "a directory", "unset: every test", ("tests/shares.py", "tests/streams.py"),
       "where make test's local streams claim whole test files, longest first, each taking the next as it frees up", scope="test"),
    _s("COURSE_DURATIONS_BEFORE", "a file", "docs/bench/test-durations.json", ("tests/durations.py", "tests/streams.py"),
       "the run the durations are compared against", scope="test"),
    _s("COURSE_CLASS_LEARNERS", "a whole number", "6", ("tests/test_classroom_load.py", "Makefile"),
       "learners of the class load test (make classtest: 30)", scope="test"),
    _s("COURSE_TEST_GPU_DEVICES", "a directory", "set by the test", ("tests/test_slurm_gpus.py",),
       "the simulated GPU device files a test job lists", scope="test"),
    _s("COURSE_TEST_SCRIPT", "a path", "set by the test", ("tests/test_slurm_gpus.py",),
       "the lesson's program a test job plans with", scope="test"),
    _s("COURSE_TEST_UNSET_VARIABLE", "never set", "unset", ("tests/support/proof_cases.py",),
       "a name no one sets, for a proof's broken variant", scope="test"),
)

SETTINGS: dict[str, Setting] = {setting.name: setting for setting in _ALL}


def declared(name: str) -> Setting:
    """The declaration of `name`; a KeyError for a name not in the table (a bug, not a user's error)."""
    try:
        return SETTINGS[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in helpers/settings.py: add it to the table") from None


def value(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The declared setting `name` as set in `env` (default: this process's environment), None if unset."""
    declared(name)
    return (os.environ if env is None else env).get(name)


def text(name: str, env: Mapping[str, str] | None = None) -> str:
    """The declared setting `name`, stripped; "" when unset or blank (the default applies)."""
    return (value(name, env) or "").strip()


def source(name: str, env: Mapping[str, str] | None = None) -> str:
    """Where the value in force comes from: `environment` when set (not blank), else `default`."""
    return "environment" if text(name, env) else "default"


def whole_number(name: str, default: int | None = None, env: Mapping[str, str] | None = None) -> int:
    """The declared setting `name` as a whole number of at least its `low`, else `default` when unset
    or blank; a CourseError naming it otherwise (never a ValueError traceback where a hub starts)."""
    raw, low = text(name, env), declared(name).low
    if not raw and default is not None:
        return default
    if not (raw.isascii() and raw.isdigit()) or int(raw) < low:
        raise CourseError(f"{name}={value(name, env)!r} must be a whole number of at least {low}")
    return int(raw)


def class_wide() -> dict[str, Setting]:
    """The class-wide settings (scope `class`), in the table's order."""
    return {name: setting for name, setting in SETTINGS.items() if setting.scope == "class"}


def check_class_value(name: str, raw: str) -> str:
    """`raw` for the class-wide setting `name`, stripped and lower-cased, or a CourseError naming what it accepts."""
    spec = class_wide().get(name)
    if spec is None:
        raise CourseError(f"{name} is not a class-wide setting: use one of {', '.join(class_wide())}")
    text_ = raw.strip()
    if text_.lower() in spec.choices:
        return text_.lower()
    if spec.number and text_.isascii() and text_.isdigit() and spec.low <= int(text_) <= spec.high:
        return str(int(text_))
    accepted = [*spec.choices, *([f"a whole number from {spec.low} to {spec.high}"] if spec.number else [])]
    raise CourseError(f"{name}={raw!r}: use {' or '.join(accepted)}")
