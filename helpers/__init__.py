"""Cluster plumbing for the data-parallel TensorFlow course.

Importing this package never imports TensorFlow: several decisions (logical CPU
devices, TF_CONFIG, collective ops) must be taken before TensorFlow initialises,
so each module imports TensorFlow lazily, only where it is needed.
"""

__version__ = "0.1.0"

import os as _os

# On a hub, the learner's Jupyter server holds the hub's API token in its environment, and its
# kernels inherit it. Nothing a lesson starts needs it (engines, TensorFlow workers, srun steps,
# batch jobs), and there it would sit in processes with open ports and in Slurm's job records:
# importing the course drops it from the kernel, so nothing started from it carries it.
from course_server import HUB_SECRETS  # noqa: E402 - the one list (the servers' terminals drop them too)

for _name in HUB_SECRETS:
    _os.environ.pop(_name, None)

# Any TensorFlow this process or what it starts brings up before a lesson's own plan (a kernel's data
# preparation imports it through tensorflow-datasets) takes GPU memory as it needs it, never nearly all
# of every visible GPU that the engines and workers it starts next will need. A plan's own setting wins
# (helpers.gpus sets the variable itself); an explicit value in the environment is kept.
_os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
