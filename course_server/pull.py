"""nbgitpuller's `/git-pull`, limited to the course: its repository, its branch, its directory.

nbgitpuller joins the link's `targetpath` onto the home unchecked (absolute paths and `..`
pass) and clones whatever `repo` names. A learner who posted a link on the hub's own address,
with their repository and `targetpath=.local/share/jupyter/kernels/python3`, replaced the kernel
spec of every classmate who clicked, and the classmate's next kernel ran their command. Here a
link pulls only what the hub configured (COURSE_PULL_REPO, COURSE_PULL_BRANCH, COURSE_PULL_DIR,
the values `python -m helpers class link` writes into the link); anything else is a 403 that
says why.
"""

from __future__ import annotations

import inspect
import os
import re
from dataclasses import dataclass
from typing import Mapping

from tornado import web

from . import credentials_in

DEFAULT_BRANCH = "main"
DEFAULT_DIR = "tf-hpc-course"
REFUSED = "refused by the course"
# every argument nbgitpuller's handlers read; each may appear once
ARGUMENTS = ("repo", "branch", "targetpath", "targetPath", "urlpath", "urlPath", "subpath", "subPath", "depth",
             "app", "backup")
# nbgitpuller 1.2's handlers: a later nbgitpuller with another one stops this extension (no unchecked route)
KNOWN_HANDLERS = {"SyncHandler", "UIHandler", "LegacyGitSyncRedirectHandler", "LegacyInteractRedirectHandler"}
GUARDED = ("SyncHandler", "UIHandler")  # the two that pull (the legacy ones redirect to /git-pull)


@dataclass(frozen=True)
class Course:
    """What a link may pull: the course's repository and branch, into ~/directory."""

    repo: str
    branch: str = DEFAULT_BRANCH
    directory: str = DEFAULT_DIR

    @classmethod
    def from_environment(cls, env: Mapping[str, str] = os.environ) -> "Course":
        return cls(env.get("COURSE_PULL_REPO", "").strip(), env.get("COURSE_PULL_BRANCH", "").strip() or DEFAULT_BRANCH,
                   env.get("COURSE_PULL_DIR", "").strip() or DEFAULT_DIR)


def refusal(arguments: Mapping[str, list[str]], course: Course) -> str | None:
    """Why a pull with these query arguments is refused; None if it pulls the course's repository
    and branch into the course's directory (and opens a page inside it)."""
    if not course.repo:
        return "this hub's servers pull no repository (the hub sets no COURSE_PULL_REPO)"
    if credentials_in(course.repo):
        return "the hub's COURSE_PULL_REPO carries credentials: this hub pulls nothing until it names a public URL"
    twice = [name for name in ARGUMENTS if len(arguments.get(name, ())) > 1]
    if twice:
        return f"{twice[0]} is given more than once"
    one = {name: values[0] for name, values in arguments.items() if name in ARGUMENTS and values}
    empty = [name for name in ARGUMENTS if one.get(name) == ""]
    if empty:  # nbgitpuller reads an empty value as absent and falls back (targetpath= pulls into the home)
        return f"{empty[0]} is empty"
    repo = one.get("repo", "")
    if repo != course.repo:
        return f"repository {repo!r} is not the course's"
    if one.get("branch", "") != course.branch:
        return f"branch {one.get('branch', '(none)')!r} is not the course's ({course.branch})"
    if "targetPath" in one:  # nbgitpuller's page and its API read different spellings: one only
        return f"targetPath is not taken: give targetpath={course.directory}"
    if one.get("targetpath") != course.directory:
        return f"targetpath {one.get('targetpath', '(none)')!r} is not the course's directory ({course.directory})"
    for name in ("urlpath", "urlPath"):
        if name in one and not _inside(one[name], course.directory):
            return f"{name} {one[name]!r} is not a page of ~/{course.directory}"
    for name in ("subpath", "subPath"):
        if name in one and not _relative(one[name]):
            return f"{name} {one[name]!r} leaves the course's directory"
    if "depth" in one and not re.fullmatch(r"[0-9]{1,6}", one["depth"]):
        return f"depth {one['depth']!r} is not a number"
    return None


def _relative(path: str) -> bool:
    return not path.startswith("/") and "\\" not in path and ".." not in path.split("/")


def _inside(urlpath: str, directory: str) -> bool:
    """A JupyterLab or Notebook page of the course's directory, relative to the server."""
    prefixes = (f"lab/tree/{directory}", f"tree/{directory}", f"notebooks/{directory}")
    clean = _relative(urlpath) and not re.search(r"[?#:]|//", urlpath)
    return clean and any(urlpath == p or urlpath.startswith(p + "/") for p in prefixes)


def guard(handler_class: type) -> None:
    """Check every request of `handler_class` (after the server has authenticated it) against the
    course the server was given (web_app.settings['course_pull'])."""
    original = handler_class.prepare
    if getattr(original, "course_guard", False):
        return

    async def prepare(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if inspect.isawaitable(result):
            await result
        if self._finished or self.current_user is None:  # not logged in: the handler sends them to log in
            return
        course = self.settings.get("course_pull") or Course("")
        arguments = {name: [v.decode(errors="replace") for v in values]
                     for name, values in self.request.query_arguments.items()}
        reason = refusal(arguments, course)
        if reason:
            self.log.warning("git-pull %s: %s", REFUSED, reason)
            shown = course.repo if course.repo and not credentials_in(course.repo) else "(no repository)"
            raise web.HTTPError(403, "%s", f"This link was {REFUSED}: {reason}. On this hub a link pulls only "
                                           f"{shown} ({course.branch}) into ~/{course.directory}.")

    prepare.course_guard = True
    handler_class.prepare = prepare


def install(serverapp) -> None:
    """Guard nbgitpuller's pulling handlers, then register nbgitpuller's routes (its own extension
    is disabled by the hub's batch script; if it is enabled anyway, its routes are guarded too)."""
    import nbgitpuller
    from nbgitpuller._compat import get_base_handler

    get_base_handler(serverapp)  # nbgitpuller picks its base class before its handlers are imported
    from nbgitpuller import handlers

    found = {name for name, value in vars(handlers).items()
             if isinstance(value, type) and issubclass(value, web.RequestHandler) and value.__module__ == handlers.__name__}
    if found != KNOWN_HANDLERS:
        raise RuntimeError(f"nbgitpuller's handlers are {sorted(found)}, not the {sorted(KNOWN_HANDLERS)} the course "
                           "checks: /git-pull stays off")
    for name in GUARDED:
        guard(getattr(handlers, name))
    serverapp.web_app.settings["course_pull"] = Course.from_environment()
    if not serverapp.jpserver_extensions.get("nbgitpuller"):
        nbgitpuller._load_jupyter_server_extension(serverapp)
