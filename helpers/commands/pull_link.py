"""`python -m helpers class link`: the one link that puts the course in every learner's home.

nbgitpuller (installed in the hub servers' Python by the `hub` extra) clones the course on a
learner's first click and, on later clicks, merges the trainer's updates without losing the
learner's edits (a file both changed keeps the learner's version). The link goes through the
hub's `user-redirect`, so one link serves every learner, logs them in and starts their server.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode, urlsplit

from course_server import credentials_in

from ..errors import CourseError
from .course_run import lessons
DEFAULT_DIR = "tf-hpc-course"


def lesson_path(lesson: str) -> str:
    """`03` or `03_multiworker_ipyparallel` -> notebooks/03_multiworker_ipyparallel.ipynb."""
    name = lesson.removesuffix(".ipynb")
    matches = [p.name for p in lessons() if p.stem.startswith(name)] if re.fullmatch(r"\d\d\w*", name) else []
    if len(matches) != 1:
        known = ", ".join(p.name[:2] for p in lessons())
        raise CourseError(f"no single lesson {lesson!r}: give its number ({known})")
    return f"notebooks/{matches[0]}"


def pull_link(hub: str, repo: str, branch: str = "main", lesson: str = "00", into: str = DEFAULT_DIR) -> str:
    """The hub link that clones or updates `repo` at `branch` into ~/`into` and opens `lesson`."""
    parts = urlsplit(hub)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CourseError(f"{hub!r} is not a hub address: give it as https://hub.example.org (COURSE_HUB_URL)")
    if not repo:
        raise CourseError("--repo: the course repository learners pull from (a git URL)")
    if credentials_in(repo):
        raise CourseError("--repo carries credentials (user:token@): every learner, browser history and log would "
                          "see them; give the repository's public URL")
    if not re.fullmatch(r"[\w.-]+", into) or into in (".", ".."):
        raise CourseError(f"--into {into!r}: one directory name under the learner's home")
    if not re.fullmatch(r"[\w./-]+", branch):
        raise CourseError(f"--branch {branch!r} is not a branch name")
    query = urlencode({"repo": repo, "branch": branch, "urlpath": f"lab/tree/{into}/{lesson_path(lesson)}",
                       "targetpath": into})
    return f"{hub.rstrip('/')}/hub/user-redirect/git-pull?{query}"
