"""The course's Jupyter server extension for the hub's single-user servers: a link pulls only the
course, and terminals start without the hub's token.

A package of its own, outside `helpers`: importing `helpers` drops the hub's token from the
process (right for a kernel, fatal for the server that needs it to log the learner in).
The hub's batch script (slurm/jupyterhub/server.sbatch.j2) enables this extension and disables
nbgitpuller's own, so the pull link works only through this extension's check (`pull`) and a
server without it has no `/git-pull` at all.
"""

from __future__ import annotations

# the hub's API token, under both its names: the learner's server holds it, nothing it starts needs it
HUB_SECRETS = ("JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN")


def credentials_in(url: str) -> bool:
    """Whether a repository URL carries a user name or password (https://user:token@host/...): in a
    link or a job's environment it would reach every learner, their browsers' histories and the logs.
    An ssh user without a password (ssh://git@host/..., git@host:path) is not a credential."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return True
    if parts.scheme in ("ssh", "git+ssh"):
        return parts.password is not None
    return bool(parts.netloc) and "@" in parts.netloc


def _jupyter_server_extension_points() -> list[dict]:
    return [{"module": "course_server"}]


def _load_jupyter_server_extension(serverapp) -> None:
    from . import pull, terminals

    terminals.install(serverapp)
    pull.install(serverapp)
