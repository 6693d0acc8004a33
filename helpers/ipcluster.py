"""Engines the ipyparallel way: a course profile for `ipcluster`, and lessons that attach to a
cluster already running (started by `ipcluster` or `python -m helpers cluster start`).

Centres and trainers start engines before a class, from a shell:

    python -m helpers cluster profile                    # once: writes ~/.ipython/profile_tf-course
    ipcluster start --profile=tf-course -n 4 --engines=slurm --daemonize
    COURSE_CLUSTER=tf-course jupyter lab                 # every lesson uses those engines
    ipcluster stop --profile=tf-course

A lesson that finds `COURSE_CLUSTER` attaches instead of starting engines, and leaves the cluster
running when it ends. TensorFlow sets up its collectives once per process, so engines that already
ran a lesson (or lost a worker) are restarted through the cluster's own launcher first.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .errors import CourseError

PROFILE = "tf-course"
CLUSTER_ENV = "COURSE_CLUSTER"  # a cluster id (`course-…`) or a profile name (`tf-course`)


# ------------------------------------------------------------------------------ profile
def write_profile(name: str = PROFILE, *, slurm: bool | None = None) -> tuple[Path, list[str]]:
    """Write the profile's `ipcluster_config.py`; returns its path and what was decided.

    The values are written out (not computed when ipcluster starts), so the file says what
    ipcluster will do and a centre can edit it; run the command again after the site changes.
    """
    from IPython.core.profiledir import ProfileDir
    from IPython.paths import get_ipython_dir

    from . import cluster, slurm_engines

    directory = Path(ProfileDir.create_profile_dir_by_name(get_ipython_dir(), name).location)
    slurm = slurm_engines.slurm_reachable() if slurm is None else slurm
    if slurm:
        request = slurm_engines.SlurmRequest.from_env()
        address = slurm_engines.controller_ip(request.partition)
        request, extra = request.spread_any()
        template = slurm_engines.batch_template(request, extra)
        placement = " ".join([*request.sbatch_lines(), *extra]) or "Slurm's defaults"
    else:
        address, template, placement = "127.0.0.1", None, "no Slurm here: local engines only"
    text = _CONFIG.format(
        command="python -m helpers cluster profile", when=time.strftime("%Y-%m-%d %H:%M"),
        ip=address, local_env={**cluster.ENGINE_ENV, "IPP_COURSE_LOCAL": "1"},
        slurm_env=dict(cluster.ENGINE_ENV), batch_file=str(directory / "log" / "ipengine-slurm.sbatch"),
        template=repr(template) if template else "None  # no Slurm here")
    config = directory / "ipcluster_config.py"
    controller = _CONTROLLER.format(period=cluster.HEARTBEAT_MS, misses=cluster.HEARTBEAT_MISSES)
    for path, content in ((config, text), (directory / "ipcontroller_config.py", controller)):
        path.write_text(content)
        path.chmod(0o600)
    return config, [f"controller on {address}", f"Slurm engines: {placement}"]


_CONFIG = '''\
# The data-parallel TensorFlow course's ipcluster settings, written by `{command}`
# ({when}). Run it again after the cluster changes; edit freely otherwise.
c = get_config()  # noqa: F821

# the controller listens on this host's address on the compute nodes' network (never on every
# interface: anyone who can connect could read the engines' output)
c.Cluster.controller_ip = {ip!r}
c.Cluster.controller_location = {ip!r}
# (the heartbeat is in ipcontroller_config.py: ipcluster replaces Cluster.controller_args)
c.Cluster.delay = 0
# engines read the key from the owner-only connection file in this profile (home must be shared
# with the nodes), not from the job's environment, which Slurm may store where others can read it
c.Cluster.send_engines_connection_env = False
c.Cluster.engine_timeout = 300

c.LocalEngineSetLauncher.environment = {local_env!r}
c.SlurmEngineSetLauncher.environment = {slurm_env!r}
# one engine per GPU on GPU nodes, spread over the nodes on CPU nodes (COURSE_SLURM_* settings included)
template = {template}
if template:
    c.SlurmEngineSetLauncher.batch_template = template
# the batch script beside the profile's logs (ipyparallel writes it into the current directory)
c.SlurmEngineSetLauncher.batch_file_name = {batch_file!r}
'''


_CONTROLLER = '''\
# The data-parallel TensorFlow course's controller settings (`python -m helpers cluster profile`).
c = get_config()  # noqa: F821
# a 100 ms heartbeat: engines count as registered within a beat (ipyparallel's default is 3 s);
# an engine is declared dead after 100 missed beats (10 s), as helpers.cluster.HEARTBEAT does
c.HeartMonitor.period = {period}
c.HeartMonitor.max_heartmonitor_misses = {misses}
# CurveZMQ: only holders of the owner-only connection files can connect, and traffic is encrypted
# (without it, any user who reaches the controller reads every cell's output: helpers.cluster.CURVE)
c.IPController.enable_curve = True
'''


# ----------------------------------------------------------------------------- attach
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
    from . import cluster as course

    started = time.perf_counter()
    found = find(spec)
    external = found.controller is None and not found.engines  # _controller_of_profile: no cluster file
    if external:
        client = course.connect(Path(found.profile_dir) / "security" / "ipcontroller-client.json", timeout=30)
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
        _shutdown(client, old)
        for step in (lambda: found.signal_engines_sync(signal.SIGKILL),  # stuck engines ignore the rest
                     found.stop_engines_sync):
            try:
                step()
            except Exception:  # noqa: BLE001 - engines that exited on the shutdown request
                pass
        found.start_engines_sync(expected)
        _wait(client, expected, old, started + timeout, spec)
    if len(client.ids) != n:
        print(f"note: the lesson asks for {n} engines; cluster {spec} has {len(client.ids)}: using all of them")
    engines = course.Engines(found, client, len(client.ids), started_s=time.perf_counter() - started, owned=False)
    engines.assign_ranks()
    if activate:
        course._activate(client)
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
        return any(client[:].apply_async(_engine_used).get(timeout=15))
    except Exception:  # noqa: BLE001 - a dead or stuck engine: restart them all
        return True


def _engine_used() -> bool:
    import os
    import sys

    return "COURSE_RANK" in os.environ or "tensorflow" in sys.modules


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


def cluster_setting() -> str:
    """`COURSE_CLUSTER`, stripped ("" when lessons start their own engines)."""
    return os.environ.get(CLUSTER_ENV, "").strip()
