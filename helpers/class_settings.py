"""The class-wide settings a trainer sets once for every learner (COURSE_*), and their checks.

One list, read by the hub's config (slurm/jupyterhub/jupyterhub_config.py passes exactly these
to every learner's server, kernels and engines) and held against the Open OnDemand app's form by
the tests. A value reaches a job's environment and a batch script: each is checked here, so a
typo stops the hub with one line instead of reaching every kernel, and nothing but a word or a
number ever reaches a shell.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import CourseError
from .slurm_jobs import GPUS_ENV, LAYOUT_ENV, LAYOUTS  # the layout is read there (class_layout)


@dataclass(frozen=True)
class Setting:
    """One class-wide setting: what it sets, and the values it accepts."""

    help: str
    choices: tuple[str, ...] = ()  # the words it accepts
    number: bool = True  # also a whole number from low to high
    low: int = 1
    high: int = 1_000_000


CLASS_SETTINGS: dict[str, Setting] = {
    "COURSE_MODE": Setting("every lesson's size (helpers.mode)", ("auto", "quick", "workshop", "full"), False),
    "COURSE_EPOCHS": Setting("epochs of every training (helpers.mode)"),
    "COURSE_MAX_STEPS": Setting("steps per epoch at most (helpers.mode)"),
    LAYOUT_ENV: Setting("node: a node per learner; gpu: a GPU per learner, nodes shared (helpers.gpus, "
                        "helpers.slurm_jobs)", LAYOUTS, False),
    GPUS_ENV: Setting("GPUs per task of the jobs lessons submit, or auto (helpers.slurm_jobs)", ("auto",), low=0,
                      high=64),
}


def check_setting(name: str, value: str) -> str:
    """`value` for the class-wide setting `name`, stripped, or a CourseError naming what it accepts."""
    spec = CLASS_SETTINGS.get(name)
    if spec is None:
        raise CourseError(f"{name} is not a class-wide setting: use one of {', '.join(CLASS_SETTINGS)}")
    text = value.strip()
    if text.lower() in spec.choices:
        return text.lower()
    if spec.number and text.isascii() and text.isdigit() and spec.low <= int(text) <= spec.high:
        return str(int(text))
    accepted = [*spec.choices, *([f"a whole number from {spec.low} to {spec.high}"] if spec.number else [])]
    raise CourseError(f"{name}={value!r}: use {' or '.join(accepted)}")


def class_settings(environ: dict | None = None) -> dict[str, str]:
    """The class-wide settings set (not empty) in `environ`, each checked: what a hub passes on."""
    env = os.environ if environ is None else environ
    return {name: check_setting(name, env[name]) for name in CLASS_SETTINGS if env.get(name, "").strip()}
