"""The class-wide settings a trainer sets once for every learner (COURSE_*), and their checks.

The list is the `class` scope of helpers.settings, the table of every setting: the hub's config
(slurm/jupyterhub/jupyterhub_config.py) passes exactly these to every learner's server, kernels
and engines, and the tests hold the Open OnDemand app's form against them. A value reaches a
job's environment and a batch script: each is checked (helpers.settings.check_class_value), so a
typo stops the hub with one line instead of reaching every kernel, and nothing but a word or a
number ever reaches a shell.
"""

from __future__ import annotations

import os

from .settings import Setting, check_class_value, class_wide, text, value

CLASS_SETTINGS: dict[str, Setting] = class_wide()


def check_setting(name: str, value: str) -> str:
    """`value` for the class-wide setting `name`, stripped, or a CourseError naming what it accepts."""
    return check_class_value(name, value)


def class_settings(environ: dict | None = None) -> dict[str, str]:
    """The class-wide settings set (not empty) in `environ`, each checked: what a hub passes on."""
    env = os.environ if environ is None else environ
    return {name: check_setting(name, value(name, env)) for name in CLASS_SETTINGS if text(name, env)}
