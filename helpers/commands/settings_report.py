"""`python -m helpers settings`: every COURSE_* setting with its value here and where it came from; docs/settings.md.

The table itself is helpers.settings; this module only shows it: to a trainer (the values in
force, each set one checked by the code that reads it), and as the guide docs/settings.md
(`python -m helpers settings --markdown > docs/settings.md`; tests/test_settings.py keeps the
guide equal to the table).
"""

from __future__ import annotations

import functools
import importlib
from typing import Callable, Mapping

from ..errors import CourseError
from ..settings import SCOPES, SETTINGS, Setting, source, value

HIDDEN = "(set, not shown)"


def checker(setting: Setting) -> Callable[[], object] | None:
    """The function named by `setting.check` ("module:function" or "module:Class.method"), or None;
    a check of helpers.settings itself (`whole_number`) is given the setting's name."""
    if not setting.check:
        return None
    module, _, attribute = setting.check.partition(":")
    found: object = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return functools.partial(found, setting.name) if module == "helpers.settings" else found  # type: ignore


def problem(setting: Setting, env: Mapping[str, str] | None = None) -> str:
    """The one-line error of the value set for `setting`, or "" when it is fine (or unset).

    Class-wide settings get the hub's check; the others the check of the code that reads them,
    which reads this process's environment (so `env` is only for the class-wide ones)."""
    raw = value(setting.name, env)
    if raw is None or not raw.strip():
        return ""
    try:
        if setting.scope == "class":
            from ..class_settings import check_setting

            check_setting(setting.name, raw)
        check = checker(setting)
        if check is not None and env is None:
            check()
    except CourseError as exc:
        return str(exc)
    return ""


def shown(setting: Setting, env: Mapping[str, str] | None = None) -> str:
    """The value to print: the one set (never a secret), else the default in words."""
    raw = value(setting.name, env)
    if source(setting.name, env) == "default":
        return setting.default or "(none)"
    return HIDDEN if setting.secret else raw.strip()


def report(env: Mapping[str, str] | None = None, scopes: tuple[str, ...] = tuple(SCOPES)) -> tuple[str, int]:
    """The lines `python -m helpers settings` prints, and how many values are bad."""
    rows = [s for s in SETTINGS.values() if s.scope in scopes]
    width = max(len(s.name) for s in rows)
    lines, bad = [f"{'setting':<{width}}  {'from':<11}  value"], 0
    for setting in rows:
        line = f"{setting.name:<{width}}  {source(setting.name, env):<11}  {shown(setting, env)}"
        error = problem(setting, env)
        if error:
            bad += 1
            line += f"\n{'':<{width}}  BAD: {error}"
        lines.append(line)
    lines.append(f"{len(rows)} settings ({', '.join(scopes)}); what each does: docs/settings.md, "
                 "or python -m helpers settings --markdown")
    return "\n".join(lines), bad


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """docs/settings.md: the table, one section per scope, generated (never edited by hand)."""
    lines = ["# Every setting", "",
             "<!-- generated from helpers/settings.py by `python -m helpers settings --markdown > docs/settings.md`;",
             "     tests/test_settings.py fails when this page and the table differ -->", "",
             "The course reads these `COURSE_*` environment variables, and no others: each is declared once, in",
             "`helpers/settings.py`, with what it takes, its default and the files that read it.",
             "`python -m helpers settings` prints every one with its value in your environment, where the",
             "value came from (`environment` or `default`), and the one-line error of a value the code",
             "refuses. Batch jobs and the engines: [Running on a Slurm cluster](slurm.md); the class-wide",
             "settings: [Offering the course](offering.md#running-a-class).", ""]
    for scope, meaning in SCOPES.items():
        rows = [s for s in SETTINGS.values() if s.scope == scope]
        lines += [f"## {scope.capitalize()}", "", f"{meaning[0].upper()}{meaning[1:]}.", "",
                  "| setting | takes | default | read by | what it does |", "|---|---|---|---|---|"]
        lines += [f"| `{s.name}` | {_cell(s.kind)} | {_cell(s.default) or '(none)'} | "
                  f"{', '.join(f'`{r}`' for r in s.readers)} | {_cell(s.help)} |" for s in rows]
        lines.append("")
    return "\n".join(lines)
