"""Jupyter terminals without the hub's token: an `sbatch` typed there would store it in the job.

jupyter_server_terminals builds a terminal's environment from the server's (terminado's
`make_term_env` copies `os.environ`), and the server holds the hub's API token.
"""

from __future__ import annotations

from jupyter_server_terminals.terminalmanager import TerminalManager

from . import HUB_SECRETS


class CourseTerminalManager(TerminalManager):
    """jupyter_server_terminals' manager; each terminal's environment lacks the hub's token."""

    def make_term_env(self, *args, **kwargs) -> dict[str, str]:
        env = super().make_term_env(*args, **kwargs)
        for name in HUB_SECRETS:
            env.pop(name, None)
        return env


def install(serverapp) -> None:
    """Make the terminals extension use CourseTerminalManager. It creates its manager when it
    loads, after this extension (extensions load in the order of their names); a manager made
    already is told to remove the token (terminado drops variables whose extra value is None)."""
    for app in _terminal_apps(serverapp):
        manager = getattr(app, "terminal_manager", None)
        if manager is not None:
            manager.extra_env = {**(manager.extra_env or {}), **dict.fromkeys(HUB_SECRETS)}
        elif not issubclass(app.terminal_manager_class, CourseTerminalManager):
            app.terminal_manager_class = CourseTerminalManager


def _terminal_apps(serverapp) -> list:
    manager = getattr(serverapp, "extension_manager", None)
    extension = manager.extensions.get("jupyter_server_terminals") if manager else None
    if extension is None:
        return []
    return [point.app for point in extension.extension_points.values() if point.app is not None]
