"""ipyparallel engines for `%%px` cells: start fast, stop fast, map engines to ranks.

Settings that make the difference on a course machine (measured with 2 local engines on
a 2-core node, see README "Measured"):
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
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import kernel_watch, ownership
from .errors import CourseError

CLUSTER_PREFIX = "course-"
HEARTBEAT_MS, HEARTBEAT_MISSES = 100, 100
HEARTBEAT = [f"--HeartMonitor.period={HEARTBEAT_MS}", f"--HeartMonitor.max_heartmonitor_misses={HEARTBEAT_MISSES}"]
# CurveZMQ on every controller socket: without it, anyone who can connect (every user of a login
# node over loopback, anyone on the cluster network) receives each cell's code and output from the
# controller's output relay in plaintext (the HMAC key stops injected messages, not reading). With
# it, only holders of the controller's public key, kept in the owner-only connection files, can
# connect at all, and the traffic is encrypted. (ipyparallel 9.2's Unix-socket transport cannot be
# used instead: its controller binds `path-PORT`, its engines and clients connect to `path:PORT`.)
CURVE = ["--IPController.enable_curve=True"]
# given to every engine; GPU memory is taken as needed, so engines sharing a node's GPUs with
# other programs (or a second lesson's engines) do not grab all of it at start
ENGINE_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
_running: dict[str, "Engines"] = {}


@dataclass
class Engines:
    """A controller and its engines; use as a context manager or call `stop()`."""

    cluster: object
    client: object
    n: int
    ranks: dict[int, int] = field(default_factory=dict)  # engine id -> worker rank
    started_s: float = 0.0
    owned: bool = True  # False: attached to a running cluster (COURSE_CLUSTER), which stop() leaves running
    release: object = None  # tells the kernel-death watcher (helpers.kernel_watch) we stopped normally
    phases: dict[str, float] = field(default_factory=dict)  # seconds: controller up, then engines registered (the bench)

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
        found = self.client[ids].apply_sync(_engine_identity)
        return [{**identity, "engine_id": eid} for eid, identity in zip(ids, found)]

    def placement(self) -> str:
        """Where each engine runs, by rank (one line, printed when engines start)."""
        found = {i["engine_id"]: i for i in self.identities()}
        by_rank = sorted(found, key=lambda e: self.ranks.get(e, e))
        return ", ".join(f"rank {self.ranks.get(e, e)} on {found[e]['host']}"
                         + (f" (GPU {found[e]['gpus']})" if found[e]["gpus"] else "") for e in by_rank)

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

    def setup_multiworker(self, use_slurm_resolver: bool | None = None) -> list[dict]:
        """Prepare every engine to be one MultiWorkerMirroredStrategy worker.

        Each engine gets its rank (`COURSE_RANK`), rank-prefixed output and, unless it runs
        inside a Slurm step whose resolver will be used, a TF_CONFIG with a free port on
        its own host. Must run before TensorFlow is imported on the engines.
        """
        from .resolver import make_tf_config

        self.assign_ranks()
        ids = {i["engine_id"]: i for i in self.identities()}
        in_step = all(i["slurm_step"] for i in ids.values())
        slurm = in_step if use_slurm_resolver is None else use_slurm_resolver
        if slurm and not in_step:
            raise CourseError("the Slurm resolver was asked for, but the engines do not run "
                              "inside a Slurm step: start them with slurm=True or use TF_CONFIG")
        by_rank = sorted(ids, key=self.ranks.__getitem__)
        addresses = [] if slurm else _distinct_ports(self.client, by_rank, ids)
        hosts = [ids[e]["host"] for e in by_rank]
        gpus = {}
        for eid in by_rank:
            rank = self.ranks[eid]
            config = None if slurm else make_tf_config(addresses, rank)
            # under Slurm the resolver binds GPUs (helpers.gpus.plan_for_task); here: a share each
            share = None if slurm else (hosts.count(ids[eid]["host"]), hosts[:rank].count(ids[eid]["host"]))
            gpus[eid] = self.client[eid].apply_sync(_configure_engine, rank, config, share)
        return [{"rank": self.ranks[e], "engine": e, "host": ids[e]["host"],
                 "address": "slurm" if slurm else addresses[self.ranks[e]], "gpus": gpus[e]} for e in by_rank]

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


# ---------------------------------------------------------------- run on the engines
def _engine_identity() -> dict:
    import os
    import socket

    host = socket.gethostname()
    try:
        address = socket.gethostbyname(host)
    except OSError:
        address = "127.0.0.1"
    procid = os.environ.get("SLURM_PROCID")
    return {"host": host, "pid": os.getpid(), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "procid": int(procid) if procid is not None and procid.isdigit() else None,
            "slurm_step": "SLURM_STEP_NUM_TASKS" in os.environ and procid is not None,
            "host_address": "localhost" if os.environ.get("IPP_COURSE_LOCAL") else address}


def _free_port() -> int:
    from helpers.resolver import free_port

    return free_port("0.0.0.0")


def _distinct_ports(client, by_rank: list[int], ids: dict) -> list[str]:
    """`host:port` per engine in rank order; engines on one host never get the same port."""
    addresses: list[str] = []
    for eid in by_rank:
        for _ in range(20):
            address = f"{ids[eid]['host_address']}:{client[eid].apply_sync(_free_port)}"
            if address not in addresses:
                break
        else:
            raise CourseError(f"no distinct free port for engine {eid}: widen COURSE_PORT_RANGE")
        addresses.append(address)
    return addresses


def _configure_engine(rank: int, tf_config: dict | None, gpu_share: tuple[int, int] | None = None) -> str:
    """Make this engine worker `rank`; returns the GPUs it uses ("" on CPU)."""
    import json
    import logging
    import os
    import sys

    from helpers import gpus
    from helpers.environment import import_tensorflow, remove_proxies

    if gpu_share is not None:
        plan = gpus.apply(gpus.plan_for_local_worker(*gpu_share))
        if plan.note and rank == 0:
            print(f"note: {plan.note}")
    remove_proxies()
    import_tensorflow()  # quietly: no C++ start-up lines in %%px cells (creates no TF context)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)  # no INFO lines in %%px cells
    os.environ["COURSE_RANK"] = str(rank)
    if tf_config is None:
        os.environ.pop("TF_CONFIG", None)
    else:
        os.environ["TF_CONFIG"] = json.dumps(tf_config)
    if not isinstance(sys.stdout, _RankPrefixed):
        sys.stdout = _RankPrefixed(sys.stdout, f"[rank {rank}] ")
        _flush_after_every_cell()
    return os.environ.get("CUDA_VISIBLE_DEVICES", "") if gpus.visible_gpus() else ""


def _flush_after_every_cell() -> None:
    """Send a cell's last output before its result: `%%px` streams output only until the result
    arrives, so a line still in the engine's buffer then (ipykernel flushes on a timer) was
    missing from the cell now and then (the chief's line of notebook 03's evaluate cell)."""
    import sys as engine_sys  # this runs on the engine: no module globals there

    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()

    def flush() -> None:
        engine_sys.stdout.flush()
        engine_sys.stderr.flush()

    if shell is not None:
        shell.events.register("post_execute", flush)


class _RankPrefixed:
    """A stdout that starts every line with the worker's rank (engine ids are not ranks)."""

    def __init__(self, stream, prefix: str):
        self._stream, self._prefix, self._at_line_start = stream, prefix, True

    def write(self, text: str) -> int:
        out = []
        for piece in text.splitlines(keepends=True):
            if self._at_line_start:
                out.append(self._prefix)
            out.append(piece)
            self._at_line_start = piece.endswith("\n")
        return self._stream.write("".join(out))

    def __getattr__(self, name):
        return getattr(self._stream, name)


# --------------------------------------------------------------------- start / stop
def start_engines(n: int = 2, *, slurm: bool | None = None, timeout: float | None = None,
                  keep: bool = False, activate: bool = True, request=None) -> Engines:
    """Start a controller and `n` engines and wait for them (with a deadline).

    Local engines (the default) run on this machine, the controller on loopback. Through
    Slurm (`slurm=True`, or `COURSE_ENGINES=slurm` when `slurm` is None) the engines are the
    tasks of one job step: an `srun` step when this process already runs in an allocation,
    else an `sbatch` job (`request`: a `helpers.slurm_engines.SlurmRequest`); the controller
    then listens on this host's address on the cluster network. Engines are stopped when this
    Python process exits, unless `keep=True` (the CLI, whose engines outlive it). In IPython,
    `%%px` targets them. With `COURSE_CLUSTER` set, the lesson attaches to that running cluster
    instead (`helpers.ipcluster`).
    """
    if n < 1:
        raise CourseError(f"cannot start {n} engines: ask for at least 1")
    from .ipcluster import attach_running, cluster_setting

    if cluster_setting() and not keep:
        return attach_running(cluster_setting(), n, timeout=timeout or 300.0, activate=activate)
    import ipyparallel as ipp
    from traitlets.config import Config

    from . import slurm_engines

    slurm = slurm_engines.want_slurm(slurm)
    if not slurm:
        slurm_engines.check_local_workers(f"{n} local engines")
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
    engines = Engines(cluster, client, n, started_s=time.perf_counter() - started, phases=phases)
    engines.assign_ranks()
    phases["ranks assigned"] = time.perf_counter() - started - engines.started_s  # asks each engine where it runs
    _running[engines.cluster_id] = engines
    if not keep:
        atexit.register(engines.stop)
        engines.release = kernel_watch.watch("cluster", engines.cluster_id)  # also on SIGKILL
    else:
        cluster.write_cluster_file()
    _make_private(cluster)
    if activate:
        _activate(client)
        print(f"{n} engines ready in {engines.started_s:.1f} s: {engines.placement()}")
    return engines


def attach(job_id: str | int, n: int | None = None, *, timeout: float = 300.0,
           activate: bool = True) -> Engines:
    """Connect to the engines of a `slurm/engines.sbatch` job (controller inside the job).

    Waits, with a deadline, for the job to run, its controller to write the connection file
    and all its tasks (or `n`) to register. Stopping the returned engines cancels the job.
    """
    import ipyparallel as ipp

    from .slurm_engines import SlurmJob

    started = time.perf_counter()
    job = SlurmJob(str(job_id))
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
    engines = Engines(job, client, n, started_s=time.perf_counter() - started)
    engines.assign_ranks()
    _running[engines.cluster_id] = engines
    atexit.register(engines.stop)
    engines.release = kernel_watch.watch("job", job.job_id)  # the job is cancelled even on SIGKILL
    if activate:
        _activate(client)
    return engines


def _make_private(cluster) -> None:
    """Owner-only modes for the cluster's files (ipyparallel writes its cluster file 0644)."""
    from pathlib import Path

    for path in (Path(cluster.profile_dir) / "security").glob(f"*{cluster.cluster_id}*"):
        path.chmod(0o600)


def connect(url_file, timeout: float = 30.0):
    """An ipyparallel client for a controller's connection file, or a clear error in `timeout` s."""
    import json

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


def _local_options(config) -> tuple:
    config.LocalEngineSetLauncher.environment = {**ENGINE_ENV, "IPP_COURSE_LOCAL": "1"}
    return config, dict(controller_args=[*HEARTBEAT, *CURVE, "--ip=127.0.0.1"])


def _slurm_options(n: int, request, config, cluster_id: str) -> tuple:
    """Launcher settings for engines as Slurm tasks: srun inside an allocation, else sbatch."""
    from . import slurm_engines

    slurm_engines.require_slurm()
    request = request or slurm_engines.SlurmRequest.from_env()
    address = slurm_engines.controller_ip(request.partition)
    # engines read the key from the owner-only connection file (home is shared with the nodes,
    # `doctor` checks it), not from $IPP_CONNECTION_INFO: a job's environment may be stored in
    # Slurm's accounting, readable by other users where the site has no PrivateData=jobs
    options = dict(controller_ip=address, controller_location=address,
                   controller_args=[*HEARTBEAT, *CURVE], send_engines_connection_env=False)
    if slurm_engines.in_allocation():
        slurm_engines.check_tasks_available(n)
        config.SrunEngineSetLauncher.environment = dict(ENGINE_ENV)
        if os.environ.get(slurm_engines.OVERLAP_ENV) == "1":  # share the CPUs a running step holds (site permitting)
            config.SrunEngineSetLauncher.mpi_args = ["--overlap"]
        else:
            slurm_engines.check_cpus_free(n, request.cpus_per_task or 1)
        options["engine_launcher_class"] = slurm_engines.SrunEngineSetLauncher
    else:
        request = request.spread(n)
        config.SlurmEngineSetLauncher.batch_template = slurm_engines.batch_template(request)
        # ipyparallel writes the batch script into the current directory (the notebooks'),
        # where it would be left behind: keep it with the cluster's logs instead
        config.SlurmEngineSetLauncher.batch_file_name = str(slurm_engines.batch_file(cluster_id))
        config.SlurmEngineSetLauncher.environment = dict(ENGINE_ENV)
        options["engine_launcher_class"] = "slurm"
    return config, options


def _describe_engine_job(cluster) -> str:
    from .slurm_engines import job_state

    job_ids = [getattr(es, "job_id", "") for es in cluster.engines.values()]
    job = next((j for j in job_ids if j), None)
    if job is None and os.environ.get("SLURM_JOB_ID"):
        return (f"the engines' srun step in job {os.environ['SLURM_JOB_ID']} did not start all tasks "
                "(are the allocation's CPUs taken by another step? try `srun --overlap`)")
    if job is None:
        return "the engines' Slurm job was not submitted (see sbatch's output above)"
    return f"Slurm job {job} is {job_state(job)} (is the partition busy, or the request too large?)"


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


# How long a `%%px` cell waits, without a progress bar, for its result *and its output*.
# ipyparallel's `--progress-after -1` (no bar) waits for the result only: an engine's last
# line, travelling through the controller's output channel, sometimes arrived after the result
# and was dropped (a CI run lost "[rank 0] last 10"). With a positive value the magic waits for
# both until this many seconds have passed; an engine that dies ends the wait at once.
PX_WAIT_S = 24 * 3600


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
    if getattr(cluster, "profile_dir", None):  # an engines job (slurm_engines.SlurmJob) has no key of ours
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
    import re

    skip = ("File ", "Detected at node", "Graph execution error", "[[", "0 successful", "derived errors",
            "The error could be from a previous operation", "Restart your program")
    lines = [l.strip() for l in message.strip().splitlines()]
    useful = [l for l in lines if l and not l.startswith(skip)]
    telling = [l for l in useful if re.search(r"aborted by|peer|unavailable|socket|connect|timed? ?out|deadline",
                                              l, re.IGNORECASE)]
    chosen = telling[0] if telling else (useful[-1] if useful else (lines[0] if lines else ""))
    return chosen[:240]
