"""The course's `ipcluster` profile (an ipyparallel profile, not lesson 09's profiler), written from `cluster`'s settings.

Engines started the ipyparallel way, with the settings `helpers.engines.cluster` starts its own
clusters with.

Centres and trainers start engines before a class, from a shell:

    python -m helpers cluster profile                    # once: writes ~/.ipython/profile_tf-course
    ipcluster start --profile=tf-course -n 4 --engines=slurm --daemonize
    COURSE_CLUSTER=tf-course jupyter lab                 # every lesson uses those engines
    ipcluster stop --profile=tf-course

A lesson that finds `COURSE_CLUSTER` attaches instead of starting engines and leaves the cluster
running (`helpers.engines.cluster.attach_running`, which restarts engines that already ran a lesson
through the launcher this profile configures).
"""

from __future__ import annotations

import time
from pathlib import Path

from ..slurm import slurm_reachable
from ..slurm.commands import WHERE_SLURM_ANSWERS, slurm_choice
from ..slurm.nodes import controller_ip
from ..slurm.request import SlurmRequest
from . import cluster
from . import on_slurm


# ------------------------------------------------------------------------------ profile
def write_profile(name: str = cluster.PROFILE, *, slurm: bool | str = WHERE_SLURM_ANSWERS) -> tuple[Path, list[str]]:
    """Write the profile's `ipcluster_config.py`; returns its path and what was decided.

    Its Slurm side (the controller on the nodes' network, the engines' batch template) where Slurm
    answers here, or as `slurm` says: True writes it (Slurm must answer), False leaves local engines only.

    The values are written out (not computed when ipcluster starts), so the file says what
    ipcluster will do and a centre can edit it; run the command again after the site changes.
    """
    from IPython.core.profiledir import ProfileDir
    from IPython.paths import get_ipython_dir

    directory = Path(ProfileDir.create_profile_dir_by_name(get_ipython_dir(), name).location)
    slurm = slurm_reachable() if slurm_choice(slurm) == WHERE_SLURM_ANSWERS else slurm
    if slurm:
        request = SlurmRequest.from_env()
        address = controller_ip(request.partition)
        request, extra = request.spread_any()
        template = on_slurm.batch_template(request, extra)
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
# an engine is declared dead after 100 missed beats (10 s), as helpers.engines.cluster.HEARTBEAT does
c.HeartMonitor.period = {period}
c.HeartMonitor.max_heartmonitor_misses = {misses}
# CurveZMQ: only holders of the owner-only connection files can connect, and traffic is encrypted
# (without it, any user who reaches the controller reads every cell's output: helpers.engines.cluster.CURVE)
c.IPController.enable_curve = True
'''
