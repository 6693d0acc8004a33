"""A cluster of ipyparallel engines for `%%px` cells, in the order it lives: start, run, stop.

Three ways in, one `Engines` a lesson holds:
- `start_engines` starts a new cluster, locally or through Slurm; this kernel owns it;
- `adopt_job` takes over the engines of a `slurm/engines.sbatch` job: owned too, stopping them
  cancels the job;
- with `COURSE_CLUSTER` set, `start_engines` attaches to that running cluster instead
  (`attach_running`): not owned, it stays running after the lesson. "Attach" means only this.
Then `failure_summary` while it runs, and the stops: the lesson's own, `stop_by_id` and `stop_all`
(what the command line or a dead kernel left).

Settings that make the difference on a course machine (measured with 2 local engines on
a 2-core node, see docs/measured.md):
- `delay=0` and a 100 ms controller heartbeat (`HEARTBEAT`): an engine counts as registered
  once it has answered a heartbeat, so 2 local engines are ready in 1.2-1.4 s, against 2.0 s
  with a 500 ms beat and 6.5 s with ipyparallel's defaults (3 s beat, engines started after a
  delay). An engine is declared dead after 100 missed beats (10 s; the default is 30 s, a
  500 ms beat with 10 misses gave only 5 s): the heartbeat is answered by a zmq thread, not
  Python, but a node busy with TensorFlow can still delay it.
- stop by SIGKILL to the engines first (engines holding TensorFlow ignore SIGTERM), then
  the controller: about 0.2 s instead of several seconds.
Engine ids are not worker ranks: under Slurm the rank is `SLURM_PROCID`.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import kernel_watch
from ..errors import CourseError
from ..settings import text, value
from ..slurm import queue
from ..slurm.commands import require_slurm
from ..slurm.login_node import check_local_workers
from ..slurm.nodes import controller_ip
from ..slurm.request import SlurmRequest
from ..slurm.step import allocation_tasks, in_allocation
from . import on_engine, ownership
from . import on_slurm

CLUSTER_PREFIX = "course-"
PROFILE = "tf-course"  # the ipcluster profile `python -m helpers cluster profile` writes (engines.ipcluster_profile)
CLUSTER_ENV = "COURSE_CLUSTER"  # a cluster id (`course-…`) or a profile name (`tf-course`): lessons attach to it
HEARTBEAT_MS, HEARTBEAT_MISSES = 100, 100
HEARTBEAT = [f"--HeartMonitor.period={HEARTBEAT_MS}", f"--HeartMonitor.max_heartmonitor_misses={HEARTBEAT_MISSES}"]
# CurveZMQ on every controller socket: without it, anyone who can connect (every user of a login
# node over loopback, anyone on the cluster network) receives each cell's code and output from the
# controller's output relay in plaintext (the HMAC key stops injected messages, not reading). With
# it, only holders of the controller's public key, kept in the owner-only connection files, can
# connect at all, and the traffic is encrypted. (ipyparallel 9.2's Unix-socket transport cannot be
# used instead: its controller binds `path-PORT`, its engines and clients connect to `path:PORT`.)
CURVE = ["--IPController.enable_curve=True"]
# An engine exits when its controller has not answered its registration within IPEngine.timeout (5 s
# by default). Four learners starting engines at once on one loaded node took longer (test_gpu_class_day,
# 2026-11-26: "only 0 of 2 engines registered (they exited at start)"); ipyparallel's maintainer advises
# minutes (ipython/ipyparallel#301). The controller keeps a stalled registration 30 s; our own deadline
# (start_engines' timeout) still ends the wait.
ENGINE_ARGS = ["--IPEngine.timeout=120"]
# given to every engine; GPU memory is taken as needed, so engines sharing a node's GPUs with
# other programs (or a second lesson's engines) do not grab all of it at start
# Local engines are not Slurm tasks: inside an allocation they would inherit the batch step's task
# variables (SLURM_PROCID=0 for every engine) and read as tasks of a step they are not part of.
# ipyparallel's own engine, started without them (the job's variables, e.g. SLURM_JOB_ID, stay).
TASK_VARIABLES = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASK_PID", "SLURM_GTIDS", "SLURM_STEPID")
LOCAL_ENGINE_CMD = [sys.executable, "-c", "import os, runpy\n"
                    f"for name in [k for k in os.environ if k in {TASK_VARIABLES!r} or k.startswith('SLURM_STEP_')]:\n"
                    "    del os.environ[name]\n"
                    "runpy.run_module('ipyparallel.engine', run_name='__main__', alter_sys=True)"]
ENGINE_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
# How long a `%%px` cell waits, without a progress bar, for its result *and its output*.
# ipyparallel's `--progress-after -1` (no bar) waits for the result only: an engine's last
# line, travelling through the controller's output channel, sometimes arrived after the result
# and was dropped (a CI run lost "[rank 0] last 10"). With a positive value the magic waits for
# both until this many seconds have passed; an engine that dies ends the wait at once.
PX_WAIT_S = 24 * 3600
_running: dict[str, "Engines"] = {}


# ------------------------------------------------------ what a lesson holds: the engines, by rank
@dataclass
class Engines:
    """A controller and its engines; use as a context manager or call `stop()`."""

    cluster: object
    client: object
    ranks: dict[int, int] = field(default_factory=dict)  # engine id -> worker rank
    started_s: float = 0.0
    owned: bool = True  # False: attached to a running cluster (COURSE_CLUSTER), which stop() leaves running
    release: object = None  # tells the kernel-death watcher (helpers.kernel_watch) we stopped normally
    phases: dict[str, float] = field(default_factory=dict)  # seconds: controller up, then engines registered (the bench)
    configured: bool = False  # setup_multiworker has given each engine its share of GPUs
    most_gpus: int | None = None  # each local engine's cap on its share (None: all of it), planned and applied

    @property
    def cluster_id(self) -> str:
        return self.cluster.cluster_id

    @property
    def view(self):
        """A DirectView on all engines, ordered by worker rank."""
        order = sorted(self.client.ids, key=lambda eid: self.ranks.get(eid, eid))
        return self.client[order]

    def __len__(self) -> int:
        return len(self.client.ids)

    def __enter__(self) -> "Engines":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def identities(self) -> list[dict]:
        """Host, pid and Slurm rank of every engine, in engine-id order."""
        ids = list(self.client.ids)
        found = self.client[ids].apply_sync(on_engine.identity)
        return [{**identity, "engine_id": eid} for eid, identity in zip(ids, found)]

    def placement(self) -> str:
        """Where each engine runs, by rank, and the GPUs it uses (one line, printed when engines start).

        Local engines this kernel started still see all of its GPUs until `setup_multiworker` gives
        each its share: the line says the share they will get (CPU when there are fewer GPUs than
        engines), not the GPUs they see now."""
        found = {i["engine_id"]: i for i in self.identities()}
        by_rank = sorted(found, key=lambda e: self.ranks.get(e, e))
        hosts = [found[e]["host"] for e in by_rank]
        uses = {e: (f"GPU {found[e]['gpus']}" if found[e]["gpus"] else "")
                if self.configured or not self.owned or found[e]["slurm_step"]
                else _planned_gpus(found[e]["gpus"], hosts.count(hosts[i]), hosts[:i].count(hosts[i]), self.most_gpus)
                for i, e in enumerate(by_rank)}
        return ", ".join(f"rank {self.ranks.get(e, e)} on {found[e]['host']}"
                         + (f" ({uses[e]})" if uses[e] else "") for e in by_rank)

    def assign_ranks(self) -> dict[int, int]:
        """Worker rank of each engine: SLURM_PROCID when every engine has one, else id order."""
        ids = self.identities()
        if all(i["procid"] is not None for i in ids):
            self.ranks = {i["engine_id"]: int(i["procid"]) for i in ids}
            if len(set(self.ranks.values())) != len(ids):
                raise CourseError("two engines report the same SLURM_PROCID: start one engine per "
                                  "Slurm task (srun -n N), not several per task")
        else:
            self.ranks = {i["engine_id"]: rank for rank, i in
                          enumerate(sorted(ids, key=lambda i: i["engine_id"]))}
        return self.ranks

    def setup_multiworker(self, use_slurm_resolver: bool | None = None, most_gpus: int | None = None) -> list[dict]:
        """Prepare every engine to be one MultiWorkerMirroredStrategy worker.

        Each engine gets its rank (`COURSE_RANK`), rank-prefixed output and a TF_CONFIG naming
        every worker with its own index, so code written for TensorFlow's documented way
        (`MultiWorkerMirroredStrategy()` with no arguments) joins the whole cluster: inside a Slurm
        step whose resolver is used, the step's workers and ports exactly as
        `helpers.resolver.slurm_resolver` gives them (and its GPUs bound); otherwise a free port
        on each engine's host. Must run before the engines create their strategy (TF_CONFIG is read
        then; importing TensorFlow first is fine), and before TensorFlow first touches a GPU there.
        `most_gpus` caps each engine's share of GPUs (`gpus.at_most`; TF_CONFIG engines only: under the
        Slurm resolver Slurm binds them): lesson 12's parameter-server workers take one each. None: the
        cap `start_engines` was given, so the start-up line announced the share the engines get.
        """
        from ..resolver import make_tf_config

        self.assign_ranks()
        ids = {i["engine_id"]: i for i in self.identities()}
        in_step = all(i["slurm_step"] for i in ids.values())
        slurm = in_step if use_slurm_resolver is None else use_slurm_resolver
        if slurm and not in_step:
            raise CourseError("the Slurm resolver was asked for, but the engines do not run "
                              "inside a Slurm step: start them with slurm=True or use TF_CONFIG")
        most_gpus = self.most_gpus if most_gpus is None else most_gpus
        if slurm and most_gpus is not None:
            raise CourseError("most_gpus caps the GPUs of TF_CONFIG engines; under the Slurm resolver Slurm binds "
                              "them: call setup_multiworker(use_slurm_resolver=False, most_gpus=...)")
        by_rank = sorted(ids, key=self.ranks.__getitem__)
        addresses = (_step_addresses(self.client, by_rank, self.ranks) if slurm
                     else _distinct_ports(self.client, by_rank, ids))
        hosts = [ids[e]["host"] for e in by_rank]
        done = {}
        for eid in by_rank:
            rank = self.ranks[eid]
            config = make_tf_config(addresses, rank)
            # under Slurm the resolver binds GPUs (helpers.gpus.plan_for_task); here: a share each
            share = None if slurm else (hosts.count(ids[eid]["host"]), hosts[:rank].count(ids[eid]["host"]))
            done[eid] = self.client[eid].apply_sync(on_engine.configure, rank, config, share, most_gpus)
        self.configured, self.most_gpus = True, most_gpus
        for note in dict.fromkeys(d["note"] for d in done.values() if d["note"]):  # each note once, here in the kernel
            print(f"note: {note}")
        return [{"rank": self.ranks[e], "engine": e, "host": ids[e]["host"],
                 "address": addresses[self.ranks[e]], "gpus": done[e]["gpus"]} for e in by_rank]

    def stop(self) -> float:
        """Stop engines and controller; returns the seconds it took. Safe to call twice."""
        started = time.perf_counter()
        if not self.owned:
            self.client.close()
            return time.perf_counter() - started
        if _running.pop(self.cluster_id, None) is None:
            return 0.0
        _stop_cluster(self.cluster, self.client)
        if self.release is not None:
            self.release()
        return time.perf_counter() - started

    def finish(self) -> str:
        """Stop what this kernel started (leave attached engines running) and say which."""
        seconds = self.stop()
        if not self.owned:
            return f"cluster {self.cluster_id or 'of the profile'} left running (attached, not started here)"
        return f"engines and controller stopped in {seconds:.2f} s"


def _planned_gpus(seen: str, engines_on_host: int, index: int, most: int | None) -> str:
    """What a local engine that sees GPUs `seen` will use once `setup_multiworker` gives it its share
    ("GPU 1", "CPU"; "" when it sees none), by the plan `on_engine.configure` applies there."""
    from .. import gpus

    if not seen:
        return ""
    plan = gpus.plan_for_engine(engines_on_host, index, most, {**os.environ, gpus.VISIBLE_ENV: seen})
    return f"GPU {','.join(plan.gpus)}" if plan.gpus else "CPU"


def _step_addresses(client, by_rank: list[int], ranks: dict[int, int]) -> list[str]:
    """`host:port` per rank of the engines' Slurm step, as each engine's own Slurm resolver sees it;
    engines that disagree (not one step, or ranks that are not SLURM_PROCID) are an error, not a hang."""
    configs = {eid: client[eid].apply_sync(on_engine.slurm_tf_config) for eid in by_rank}
    workers = configs[by_rank[0]]["cluster"]["worker"]
    for eid, config in configs.items():
        if config["cluster"]["worker"] != workers or config["task"]["index"] != ranks[eid]:
            raise CourseError(f"engine {eid} (rank {ranks[eid]}) resolves its Slurm step as "
                              f"{config['cluster']['worker']} index {config['task']['index']}, engine "
                              f"{by_rank[0]} as {workers}: start all engines as the tasks of one srun step")
    if len(workers) != len(by_rank):
        raise CourseError(f"the engines' Slurm step has {len(workers)} tasks but {len(by_rank)} engines "
                          "registered: start one engine per task")
    return workers


def _distinct_ports(client, by_rank: list[int], ids: dict) -> list[str]:
    """`host:port` per engine in rank order; engines on one host never get the same port."""
    addresses: list[str] = []
    for eid in by_rank:
        for _ in range(20):
            address = f"{ids[eid]['host_address']}:{client[eid].apply_sync(on_engine.free_port)}"
            if address not in addresses:
                break
        else:
            raise CourseError(f"no distinct free port for engine {eid}: widen COURSE_PORT_RANGE")
        addresses.append(address)
    return addresses


# ------------------------------ 1. start a new cluster (connect and _activate serve every way in)
def start_engines(n: int = 2, *, slurm: bool | None = None, timeout: float | None = None,
                  keep: bool = False, activate: bool = True, request=None, most_gpus: int | None = None) -> Engines:
    """Start a controller and `n` engines and wait for them (with a deadline).

    Local engines (the default) run on this machine, the controller on loopback. Through
    Slurm (`slurm=True`, or `COURSE_ENGINES=slurm` when `slurm` is None) the engines are the
    tasks of one job step: an `srun` step when this process already runs in an allocation,
    else an `sbatch` job (`request`: a `helpers.slurm.request.SlurmRequest`); the controller
    then listens on this host's address on the cluster network. Engines are stopped when this
    Python process exits, unless `keep=True` (the CLI, whose engines outlive it). In IPython,
    `%%px` targets them. With `COURSE_CLUSTER` set, the lesson attaches to that running cluster
    instead (`helpers.engines.ipcluster_profile`). `most_gpus` caps each local engine's share of GPUs
    (see `setup_multiworker`), known here so the start-up line says the share the engines will get.
    """
    if n < 1:
        raise CourseError(f"cannot start {n} engines: ask for at least 1")
    if cluster_setting() and not keep:
        return attach_running(cluster_setting(), n, timeout=timeout or 300.0, activate=activate)
    import ipyparallel as ipp
    from traitlets.config import Config

    asked = slurm
    slurm = on_slurm.want_slurm(slurm, n)
    if not slurm:
        check_local_workers(f"{n} local engines")
    if asked is None and in_allocation():  # COURSE_ENGINES decided inside an allocation: say which
        print(_where_engines_run(n, slurm))
    cluster_id = CLUSTER_PREFIX + secrets.token_hex(4)
    config, options = (_slurm_options(n, request, Config(), cluster_id) if slurm
                       else _local_options(Config()))
    timeout = (300.0 if slurm else 60.0) if timeout is None else timeout
    if not keep:  # the kernel that owns it: `cluster stop --all` leaves the cluster alone while it runs
        config.LocalControllerLauncher.environment = ownership.owner_env()

    started = time.perf_counter()
    # keep=True: the cluster outlives this process (ipyparallel would stop it at exit otherwise)
    cluster = ipp.Cluster(n=n, cluster_id=cluster_id, delay=0, shutdown_atexit=not keep,
                          engine_timeout=int(timeout), log_level=40, config=config, **options)
    client, phases = None, {}
    _session_key(cluster)
    try:
        cluster.start_controller_sync()  # what start_cluster does, timed by phase:
        cluster.start_engines_sync(n=n)  # waits for the controller's connection file, then launches
        client = cluster.connect_client_sync()
        phases["controller up"] = time.perf_counter() - started
        client.wait_for_engines(n, timeout=timeout, interactive=False)  # no progress bar
        phases["engines registered"] = time.perf_counter() - started - phases["controller up"]
    except (TimeoutError, ipp.error.TimeoutError, ipp.error.EngineError) as exc:
        # EngineError: ipyparallel saw the engines exit before the deadline (a race with the timeout)
        where = _describe_engine_job(cluster) if slurm else "check that engines can start (`ipengine --help`)"
        _stop_cluster(cluster, client)
        how = "they exited at start" if isinstance(exc, ipp.error.EngineError) else f"within {timeout:.0f} s"
        raise CourseError(f"only {len(client.ids) if client else 0} of {n} engines registered ({how}): {where}; "
                          "the engines were stopped") from None
    except subprocess.CalledProcessError as exc:
        cluster.engines.clear()  # nothing was submitted: there is no job to cancel
        _stop_cluster(cluster, client)
        raise CourseError(f"`{exc.cmd[0]}` refused the engines' job (exit status {exc.returncode}; its "
                          "message is printed above): check COURSE_SLURM_PARTITION, _ACCOUNT, _TIME "
                          "and what the partition allows (`sinfo`)") from None
    engines = Engines(cluster, client, started_s=time.perf_counter() - started, phases=phases, most_gpus=most_gpus)
    engines.assign_ranks()
    phases["ranks assigned"] = time.perf_counter() - started - engines.started_s  # asks each engine where it runs
    _running[engines.cluster_id] = engines
    if not keep:
        atexit.register(engines.stop)
        engines.release = kernel_watch.watch(engines.cluster_id, stop_by_id)  # also on SIGKILL
    else:
        cluster.write_cluster_file()
    _make_private(cluster)
    if activate:
        _activate(client)
        print(f"{n} engines ready in {engines.started_s:.1f} s: {engines.placement()}")
    return engines


def _where_engines_run(n: int, slurm: bool) -> str:
    job, tasks = os.environ.get("SLURM_JOB_ID"), allocation_tasks()
    if slurm:
        return f"engines: {n} tasks of this allocation (Slurm job {job}, srun)"
    return (f"engines: {n} local processes on this node (Slurm job {job} has {tasks or 'no'} task(s) for them; "
            f"{on_slurm.ENGINES_ENV}={text(on_slurm.ENGINES_ENV) or 'auto'})")


def _local_options(config) -> tuple:
    config.EngineLauncher.engine_args = list(ENGINE_ARGS)
    config.LocalEngineSetLauncher.engine_cmd = list(LOCAL_ENGINE_CMD)
    config.LocalEngineSetLauncher.environment = {**ENGINE_ENV, "IPP_COURSE_LOCAL": "1"}
    return config, dict(controller_args=[*HEARTBEAT, *CURVE, "--ip=127.0.0.1"])


def _slurm_options(n: int, request, config, cluster_id: str) -> tuple:
    """Launcher settings for engines as Slurm tasks: srun inside an allocation, else sbatch."""
    require_slurm()
    request = request or SlurmRequest.from_env()
    address = controller_ip(request.partition)
    # engines read the key from the owner-only connection file (home is shared with the nodes,
    # `doctor` checks it), not from $IPP_CONNECTION_INFO: a job's environment may be stored in
    # Slurm's accounting, readable by other users where the site has no PrivateData=jobs
    options = dict(controller_ip=address, controller_location=address,
                   controller_args=[*HEARTBEAT, *CURVE], send_engines_connection_env=False)
    config.EngineLauncher.engine_args = list(ENGINE_ARGS)
    if in_allocation():
        queue.check_tasks_available(n)
        config.SrunEngineSetLauncher.environment = dict(ENGINE_ENV)
        if value(queue.OVERLAP_ENV) == "1":  # share the CPUs a running step holds (site permitting)
            config.SrunEngineSetLauncher.mpi_args = ["--overlap"]
        else:
            queue.check_cpus_free(n, request.cpus_per_task or 1)
        options["engine_launcher_class"] = on_slurm.SrunEngineSetLauncher
    else:
        request = request.spread(n)
        config.SlurmEngineSetLauncher.batch_template = on_slurm.batch_template(request)
        # ipyparallel writes the batch script into the current directory (the notebooks'),
        # where it would be left behind: keep it with the cluster's logs instead
        config.SlurmEngineSetLauncher.batch_file_name = str(on_slurm.batch_file(cluster_id))
        config.SlurmEngineSetLauncher.environment = dict(ENGINE_ENV)
        options["engine_launcher_class"] = "slurm"
    return config, options


def _session_key(cluster) -> None:
    """A message-signing key for the cluster, handed to its controller in an owner-only file.

    With CurveZMQ on, ipyparallel drops the HMAC key as redundant, and every engine then logs
    `Message signing is disabled.  This is insecure and not recommended!`. Signing stays on as
    defence in depth (and the warning goes for a reason): the key travels in a file, never on a
    command line or in a job's environment, and reaches the engines in the connection files."""
    key = _session_key_path(cluster)
    key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(secrets.token_hex(32))
    cluster.controller_args = [*cluster.controller_args, f"--Session.keyfile={key}"]


def _session_key_path(cluster) -> Path:
    """Beside the connection files: the controller's schedulers read it as they start, and the
    cluster's stop removes it."""
    return Path(cluster.profile_dir) / "security" / f"ipcontroller-{cluster.cluster_id}-session.key"


def connect(url_file, timeout: float = 30.0):
    """An ipyparallel client for a controller's connection file, or a clear error in `timeout` s."""
    import ipyparallel as ipp

    try:
        info = json.loads(open(url_file).read())
    except (OSError, ValueError) as exc:
        raise CourseError(f"cannot read the connection file {url_file}: {exc}") from None
    where = f"{info.get('interface', 'tcp://?')}:{info.get('registration', '?')}"
    try:
        return ipp.Client(str(url_file), timeout=timeout)
    except (TimeoutError, ipp.error.TimeoutError, OSError) as exc:
        raise CourseError(f"cannot reach the ipyparallel controller at {where} within {timeout:.0f} s "
                          f"({exc}): is it still running, and is that address reachable from this "
                          "host (firewall, wrong interface: set COURSE_CONTROLLER_IP)?") from None


def _describe_engine_job(cluster) -> str:
    job_ids = [getattr(es, "job_id", "") for es in cluster.engines.values()]
    job = next((j for j in job_ids if j), None)
    if job is None and os.environ.get("SLURM_JOB_ID"):
        return (f"the engines' srun step in job {os.environ['SLURM_JOB_ID']} did not start all tasks "
                "(are the allocation's CPUs taken by another step? try `srun --overlap`)")
    if job is None:
        return "the engines' Slurm job was not submitted (see sbatch's output above)"
    return f"Slurm job {job} is {queue.job_state(job)} (is the partition busy, or the request too large?)"


def _make_private(cluster) -> None:
    """Owner-only modes for the cluster's files (ipyparallel writes its cluster file 0644)."""
    for path in (Path(cluster.profile_dir) / "security").glob(f"*{cluster.cluster_id}*"):
        path.chmod(0o600)


def _activate(client) -> None:
    """Make `%%px` target these engines, without progress bars, if in IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    view = client[:]
    view.block = True  # %%px waits for the engines and shows their output in the cell
    view.activate()
    shell.run_line_magic("pxconfig", f"--progress-after {PX_WAIT_S}")


# ---------------- or take over an engines job (slurm/engines.sbatch): stopping it cancels the job
def adopt_job(job_id: str | int, n: int | None = None, *, timeout: float = 300.0,
              activate: bool = True) -> Engines:
    """Take over the engines of a `slurm/engines.sbatch` job (controller inside the job): this
    kernel then owns them, as if it had started them.

    Waits, with a deadline, for the job to run, its controller to write the connection file
    and all its tasks (or `n`) to register. Stopping the returned engines cancels the job.
    """
    import ipyparallel as ipp

    started = time.perf_counter()
    job = on_slurm.SlurmJob(str(job_id))
    client = None
    try:
        n = n or job.wait_running(timeout)
        url_file = job.wait_connection_file(timeout - (time.perf_counter() - started))
        client = connect(url_file, timeout=30)
        client.wait_for_engines(n, timeout=max(1.0, timeout - (time.perf_counter() - started)),
                                interactive=False)
    except (TimeoutError, ipp.error.TimeoutError):
        have = len(client.ids) if client else 0
        _stop_cluster(job, client)
        raise CourseError(f"only {have} of {n} engines of Slurm job {job_id} registered within "
                          f"{timeout:.0f} s (see the job's output file); the job was cancelled") from None
    except CourseError:
        _stop_cluster(job, client)
        raise
    engines = Engines(job, client, started_s=time.perf_counter() - started)
    engines.assign_ranks()
    _running[engines.cluster_id] = engines
    atexit.register(engines.stop)
    engines.release = kernel_watch.watch(job.job_id, on_slurm.cancel_engines_job)  # even on SIGKILL
    if activate:
        _activate(client)
    return engines


# ------------------------------ or attach to a running cluster (COURSE_CLUSTER): it stays running
def cluster_setting() -> str:
    """`COURSE_CLUSTER`, stripped ("" when lessons start their own engines)."""
    return text(CLUSTER_ENV)


def find(spec: str):
    """The running cluster `spec` names: a cluster id, a profile (its ipcluster cluster) or `profile:id`."""
    import ipyparallel as ipp

    clusters = ipp.ClusterManager().load_clusters()
    for key, found in clusters.items():
        profile, _, cluster_id = key.partition(":")
        if spec in (key, cluster_id) or (spec == profile and cluster_id == ""):
            return found
    started_elsewhere = _controller_of_profile(spec)
    if started_elsewhere is not None:
        return started_elsewhere
    running = ", ".join(sorted(clusters)) or "none"
    raise CourseError(f"{CLUSTER_ENV}={spec!r}: no such running cluster (running, as profile:cluster-id: "
                      f"{running}); start one with `ipcluster start --profile={PROFILE} -n N --daemonize` "
                      "or `python -m helpers cluster start`, or unset it to let the lesson start its own")


def _controller_of_profile(name: str):
    """A controller started in profile `name` without an ipyparallel cluster file (ipcmagic's
    `%ipcluster start` writes none): a cluster the course can connect to but not launch into."""
    import ipyparallel as ipp
    from IPython.paths import get_ipython_dir

    profile = Path(get_ipython_dir()) / f"profile_{name}"
    if not (profile / "security" / "ipcontroller-client.json").is_file():
        return None
    return ipp.Cluster(profile_dir=str(profile), cluster_id="")


def attach_running(spec: str, n: int, *, timeout: float = 300.0, activate: bool = True):
    """Engines of the running cluster `spec`, fresh for this lesson; the cluster stays running."""
    started = time.perf_counter()
    found = find(spec)
    external = found.controller is None and not found.engines  # _controller_of_profile: no cluster file
    if external:
        client = connect(Path(found.profile_dir) / "security" / "ipcontroller-client.json", timeout=30)
    _load_profile_config(found)
    try:
        client = client if external else found.connect_client_sync(timeout=30)
    except Exception as exc:  # noqa: BLE001 - ipyparallel raises several kinds here
        raise CourseError(f"cluster {spec!r} is listed but its controller does not answer ({exc}): "
                          f"stop it (`ipcluster stop` or `python -m helpers cluster stop`) and start it again") from None
    # engines launched and alive (ipyparallel drops local engines that died when it loads the
    # cluster); the lesson's n is the floor
    launched = sum(getattr(es, "n", 0) or 0 for es in found.engines.values())
    expected = max(n, launched)
    if launched:
        _settle(client, launched, started + timeout)
    if external:  # started elsewhere: its engines cannot be relaunched here
        _settle(client, n, started + min(timeout, 30.0), quiet_s=3.0)
        have = len(client.ids)
        why = (f"are fewer than the {n} this lesson needs" if have < n
               else "already ran TensorFlow (a lesson needs fresh ones)" if _used(client) else "")
        if why:
            client.close()
            raise CourseError(f"{CLUSTER_ENV}={spec}: the {have} engines of profile {spec} (started outside the course, "
                              f"e.g. by ipcmagic) {why}, and the course cannot restart engines it did not start: "
                              f"`%ipcluster stop`, then `%ipcluster start -n {n}`, and run the lesson again")
    elif not client.ids or _used(client) or len(client.ids) < expected:
        print(f"restarting the {expected} engines of {spec} (they ran TensorFlow before, or lost one: "
              "TensorFlow sets up multi-worker collectives once per process)")
        old = set(client.ids)
        old_jobs = [str(es.job_id) for es in found.engines.values() if getattr(es, "job_id", None)]
        _shutdown(client, old)
        for step in (lambda: found.signal_engines_sync(signal.SIGKILL),  # stuck engines ignore the rest
                     found.stop_engines_sync):
            try:
                step()
            except Exception:  # noqa: BLE001 - engines that exited on the shutdown request
                pass
        if old_jobs and not queue.wait_gone(old_jobs, deadline_s=60):
            print(f"note: the old engines job {', '.join(old_jobs)} is still in the queue after 60 s; "
                  "the new engines may land on fewer nodes")
        found.start_engines_sync(expected)
        _wait(client, expected, old, started + timeout, spec)
    if len(client.ids) != n:
        print(f"note: the lesson asks for {n} engines; cluster {spec} has {len(client.ids)}: using all of them")
    engines = Engines(found, client, started_s=time.perf_counter() - started, owned=False)
    engines.assign_ranks()
    if activate:
        _activate(client)
        print(f"attached to running cluster {spec} ({CLUSTER_ENV}) in {engines.started_s:.1f} s: "
              f"{engines.placement()}; it stays running after this lesson")
    return engines


def _load_profile_config(found) -> None:
    """Give the loaded cluster its profile's settings, so a restart launches engines as ipcluster did."""
    from traitlets.config.loader import PyFileConfigLoader

    path = Path(found.profile_dir) / "ipcluster_config.py"
    if path.exists():
        found.update_config(PyFileConfigLoader(path.name, str(path.parent)).load_config())


def _used(client) -> bool:
    """True when any engine ran TensorFlow before, or does not answer (a lesson killed it)."""
    try:
        return any(client[:].apply_async(on_engine.was_used).get(timeout=15))
    except Exception:  # noqa: BLE001 - a dead or stuck engine: restart them all
        return True


def _shutdown(client, ids: set, within: float = 3.0) -> None:
    """Ask the engines to exit: those that can unregister at once (a killed one is noticed only by
    the heartbeat). Never blocks on an engine that is dead or stuck: the SIGKILL that follows ends it."""
    try:
        client.shutdown(targets=sorted(ids), hub=False, block=False)
    except Exception:  # noqa: BLE001 - engines that are already gone
        return
    deadline = time.perf_counter() + within
    while set(client.ids) & ids and time.perf_counter() < deadline:
        time.sleep(0.1)


def _settle(client, launched: int, deadline: float, quiet_s: float = 15.0) -> None:
    """Wait for the launched engines to register (a cluster just started), but not for engines
    that died: once some have registered, `quiet_s` without a new one ends the wait."""
    seen, changed = set(client.ids), time.perf_counter()
    while len(seen) < launched and time.perf_counter() < deadline:
        if seen and time.perf_counter() - changed > quiet_s:
            return
        time.sleep(0.2)
        now = set(client.ids)
        if now != seen:
            seen, changed = now, time.perf_counter()


def _wait(client, expected: int, old: set, deadline: float, spec: str) -> None:
    while True:
        ids = set(client.ids)
        if len(ids - old) >= expected and not ids & old:
            return
        if time.perf_counter() > deadline:
            raise CourseError(f"cluster {spec}: {len(ids - old)} of {expected} engines registered in time "
                              "(see the engines' log or Slurm output); the cluster was left as it is")
        time.sleep(0.2)
        client.spin()


# --------------------------------------------------- 2. while it runs: what failed on the engines
def failure_summary(exc: BaseException) -> list[str]:
    """One line per failed engine of an ipyparallel error, instead of pages of traceback."""
    import ipyparallel as ipp

    if isinstance(exc, ipp.error.CompositeError):
        lines = []
        for ename, evalue, _, info in exc.elist:
            engine = (info or {}).get("engine_id", "?")
            lines.append(f"engine {engine}: {ename}: {_gist(str(evalue))}")
        return lines
    text = str(exc).strip().splitlines()
    return [f"{type(exc).__name__}: {text[0][:200] if text else ''}"]


def _gist(message: str) -> str:
    """The informative line of a (TensorFlow) error message: not a stack frame, not a header."""
    skip = ("File ", "Detected at node", "Graph execution error", "[[", "0 successful", "derived errors",
            "The error could be from a previous operation", "Restart your program")
    lines = [l.strip() for l in message.strip().splitlines()]
    useful = [l for l in lines if l and not l.startswith(skip)]
    telling = [l for l in useful if re.search(r"aborted by|peer|unavailable|socket|connect|timed? ?out|deadline",
                                              l, re.IGNORECASE)]
    chosen = telling[0] if telling else (useful[-1] if useful else (lines[0] if lines else ""))
    return re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", chosen)[:240]  # not the op's name: the cause


# ---------------------------------- 3. stop: what this kernel started, or what a dead kernel left
def _stop_cluster(cluster, client) -> None:
    # the controller's tree is taken first: once the controller is gone, its children are orphans
    # (the schedulers outlived a killed controller in CI; stopping the engines raises first when
    # sbatch refused the engines' job)
    tree = ownership.controller_tree(cluster)
    try:
        cluster.signal_engines_sync(signal.SIGKILL)
    except Exception:  # noqa: BLE001 - engines may already be gone
        pass
    if client is not None:
        client.close()
    try:
        cluster.stop_cluster_sync()
    except Exception:  # noqa: BLE001
        pass
    ownership.kill(tree + ownership.controllers_of(cluster.cluster_id))
    if getattr(cluster, "profile_dir", None):  # an engines job (on_slurm.SlurmJob) has no key of ours
        _session_key_path(cluster).unlink(missing_ok=True)


def stop_all(force: bool = False) -> tuple[int, list[str]]:
    """Stop the course clusters of this user that nothing uses: those a crashed kernel or the
    command line left (and this process's own). A cluster whose kernel still runs is left alone
    unless `force`. Returns how many were stopped and a line per cluster left alone."""
    import ipyparallel as ipp

    stopped, kept = 0, []
    for name in list(_running):
        _running[name].stop()
        stopped += 1
    for key, cluster in ipp.ClusterManager().load_clusters().items():
        if not cluster.cluster_id.startswith(CLUSTER_PREFIX):
            continue
        owner = ownership.living_owner(cluster)
        if owner and not force:
            kept.append(f"{cluster.cluster_id}: in use by the running kernel PID {owner} (--force stops it anyway)")
            continue
        kept.extend(f"{cluster.cluster_id}: left alone {what}" for what in _stop_loaded(cluster))
        stopped += 1
    return stopped, kept


def _stop_loaded(cluster) -> list[str]:
    """Stop a cluster rebuilt from its file, signalling only what is provably its own."""
    left = ownership.prune_foreign(cluster)
    _stop_cluster(cluster, None)
    cluster.remove_cluster_file()
    return left


def stop_by_id(cluster_id: str | None) -> tuple[int, list[str]]:
    """Stop one cluster by its id (as printed by `cluster start`)."""
    if not cluster_id:
        raise CourseError("say which cluster: --cluster-id ID, or --all")
    import ipyparallel as ipp

    for key, cluster in ipp.ClusterManager().load_clusters().items():
        if cluster.cluster_id == cluster_id:
            return 1, [f"{cluster_id}: left alone {what}" for what in _stop_loaded(cluster)]
    raise CourseError(f"no running cluster {cluster_id!r}: `ipcluster list` shows what runs")
