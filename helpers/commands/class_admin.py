"""`python -m helpers class who|end`: an instructor's view of a class on the hub, and its end.

A class is named, never guessed: its learners are the members of a hub group (`--group`, with
the hub's API: COURSE_HUB_URL and COURSE_HUB_TOKEN) or the users of a Slurm reservation
(`--reservation`), and with both, the group's members. `end` stops those learners' servers
through the hub and cancels the job ids it found for them: with a reservation, their jobs in
it; without, their server job and engines jobs, found by the names the course alone gives them
(`jupyterhub-course`, `tf-course-engines[-<cluster id>]`), matched exactly. Nothing else: not a hub
user outside the class, not a job of a learner's outside the reservation, not a learner's own
ipyparallel engines (`ipengine-*`, ipyparallel's default name), not a job someone named like a
server (`scancel -u` is never used). `--dry-run` prints what `end` would do and does nothing.

The token needs the scopes `read:groups`, `list:users`, `read:servers` and `delete:servers`
(not an admin token).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from ..engines.on_slurm import is_engines_job_name
from ..errors import CourseError
from ..settings import value
from ..slurm.nodes import reservation_users
from ..slurm.queue import backoff, cancel, squeue_rows

SERVER_JOB = "jupyterhub-course"  # server.sbatch.j2's --job-name, matched exactly


@dataclass
class Job:
    job_id: str
    user: str
    name: str
    state: str
    nodes: str
    reservation: str


@dataclass
class Learner:
    name: str
    hub_state: str = "-"  # ready / pending / - (no hub API given)
    server: Job | None = None
    engines: list[str] = field(default_factory=list)  # "N on NODES" per engines job or step
    engine_jobs: list[str] = field(default_factory=list)  # ids of engines jobs (sbatch)
    other_jobs: list[Job] = field(default_factory=list)


def jobs() -> list[Job]:
    return [Job(*row[:6]) for row in squeue_rows(["-o", "%i|%u|%j|%T|%N|%v"])]


def steps() -> list[list[str]]:
    """[step id, user, name, nodes, tasks] of every running step."""
    return squeue_rows(["-s", "-o", "%i|%u|%j|%N|%A"])


class HubAPI:
    """The hub's REST API with an admin token (never through a web proxy the environment names)."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url.rstrip("/"), token
        self._check_transport()
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @classmethod
    def from_env(cls) -> "HubAPI | None":
        token, url = value("COURSE_HUB_TOKEN") or "", value("COURSE_HUB_URL")
        return cls("http://127.0.0.1:8000" if url is None else url, token) if token else None

    def _check_transport(self) -> None:
        """The token goes in every request: over plain HTTP only to this machine."""
        parsed = urllib.parse.urlsplit(self.url)
        local = parsed.hostname in ("127.0.0.1", "localhost", "::1")
        if parsed.scheme != "https" and not (parsed.scheme == "http" and local):
            raise CourseError(f"COURSE_HUB_URL={self.url!r}: the hub's token would cross the network unencrypted; "
                              "use the hub's https:// address (or http:// to 127.0.0.1 on the hub host)")

    def call(self, method: str, path: str) -> tuple[int, object]:
        request = urllib.request.Request(f"{self.url}/hub/api{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        try:
            with self.opener.open(request, timeout=30) as answer:
                body = answer.read()
                return answer.status, json.loads(body) if body else None
        except urllib.error.HTTPError as exc:
            return exc.code, None
        except OSError as exc:
            raise CourseError(f"the hub's API at {self.url} does not answer ({exc}): set COURSE_HUB_URL") from None

    def group(self, name: str) -> list[str]:
        status, body = self.call("GET", f"/groups/{urllib.parse.quote(name, safe='')}")
        if status == 404:
            raise CourseError(f"the hub has no group {name!r}")
        if status != 200:
            raise CourseError(f"the hub refused the group {name!r} (HTTP {status}): COURSE_HUB_TOKEN needs read:groups")
        return list(body.get("users", []))

    def users(self) -> list[dict]:
        status, body = self.call("GET", "/users?state=active")
        if status != 200:
            raise CourseError(f"the hub refused the user list (HTTP {status}): COURSE_HUB_TOKEN needs the "
                              "admin:users or list:users and read:servers scopes")
        return body


@dataclass
class ClassSpec:
    """Which class: a hub group, a Slurm reservation, or both (then learners are the group's)."""

    group: str = ""
    reservation: str = ""

    def __post_init__(self):
        if not (self.group or self.reservation):
            raise CourseError("say which class: --group NAME (the hub group of its learners) or --reservation "
                              "NAME (the Slurm reservation its servers run in); nobody is guessed from job names")


def class_members(spec: ClassSpec, hub: HubAPI | None) -> set[str]:
    """The class's learners; none found is an error (a class of nobody would end as if it had)."""
    if spec.group:
        if hub is None:
            raise CourseError("--group needs the hub's API: set COURSE_HUB_URL and COURSE_HUB_TOKEN")
        members = set(hub.group(spec.group))
        if not members:
            raise CourseError(f"the hub group {spec.group!r} has no members: no learner to find (add the class's "
                              "learners to it, or name another group)")
        return members
    return set(reservation_users(spec.reservation))


def learners(spec: ClassSpec, hub: HubAPI | None = None) -> dict[str, Learner]:
    """The class's learners, where their servers are, and their jobs that belong to the class."""
    members = class_members(spec, hub)
    found = {name: Learner(name) for name in sorted(members)}
    for user in (hub.users() if hub else []):
        server = (user.get("servers") or {}).get("")
        if user["name"] in found and server:
            found[user["name"]].hub_state = "ready" if server.get("ready") else "pending"
    for job in jobs():
        learner = found.get(job.user)
        if learner is None or (spec.reservation and job.reservation != spec.reservation):
            continue
        if job.name == SERVER_JOB:
            learner.server = job
        elif is_engines_job_name(job.name):  # the course's names only, never ipyparallel's `ipengine-*`
            learner.engines.append(f"job {job.job_id} {job.state} on {job.nodes or '-'}")
            learner.engine_jobs.append(job.job_id)
        elif spec.reservation:
            learner.other_jobs.append(job)
    for step_id, user, name, nodes, tasks in (row[:5] for row in steps()):
        if user in found and is_engines_job_name(name) and found[user].server \
                and step_id.split(".")[0] == found[user].server.job_id:
            found[user].engines.append(f"{tasks} in step {step_id} on {nodes}")
    return found


def class_jobs(found: dict[str, Learner]) -> list[str]:
    """The job ids `end` cancels: exactly those `learners` found."""
    ids = []
    for learner in found.values():
        ids += ([learner.server.job_id] if learner.server else []) + learner.engine_jobs
        ids += [job.job_id for job in learner.other_jobs]
    return sorted(set(ids), key=int)


def who_table(found: dict[str, Learner]) -> str:
    rows = [("learner", "hub", "server job", "state", "node", "engines", "other jobs")]
    for name in sorted(found):
        learner, server = found[name], found[name].server
        rows.append((name, learner.hub_state, server.job_id if server else "-", server.state if server else "-",
                     server.nodes if server else "-", "; ".join(learner.engines) or "-",
                     " ".join(j.job_id for j in learner.other_jobs) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines + [f"{len(found)} learner(s)"])


def end_class(spec: ClassSpec, hub: HubAPI | None = None, within: float = 120.0, dry_run: bool = False) -> int:
    """Stop the class's servers and cancel the jobs found for it; 0 when squeue shows none of them."""
    found = learners(spec, hub)
    ids = class_jobs(found)
    servers = sorted(n for n, learner in found.items() if learner.hub_state != "-") if hub else []
    if dry_run:
        print(f"class end would stop the servers of {', '.join(servers) or 'nobody'} through the hub and cancel "
              f"the jobs {' '.join(ids) or '(none)'} of {len(found)} learner(s); nothing done (--dry-run)")
        return 0
    started = time.monotonic()
    for name in servers:
        status, _ = hub.call("DELETE", f"/users/{urllib.parse.quote(name, safe='')}/server")
        print(f"  {name}: hub stopped the server (HTTP {status})" if status in (202, 204)
              else f"  {name}: the hub answered HTTP {status} to stopping the server")
    if ids:
        cancel(*ids, timeout=60)
    left, pauses = _remaining(ids), backoff()
    while left and time.monotonic() - started < within:
        time.sleep(next(pauses))
        left = _remaining(ids)
    waited = time.monotonic() - started
    if left:
        print(f"class NOT ended after {waited:.0f} s: still in squeue: "
              + ", ".join(f"{j.job_id} ({j.user}, {j.state})" for j in left))
        return 1
    print(f"class ended: {len(found)} learner(s), {len(servers)} server(s) stopped, jobs {' '.join(ids) or '-'} "
          f"gone from squeue ({waited:.1f} s)")
    return 0


def _remaining(ids: list[str]) -> list[Job]:
    """Those of `ids` still in the queue (one squeue for them, not the whole queue)."""
    if not ids:
        return []
    try:
        rows = squeue_rows(["-j", ",".join(ids), "-o", "%i|%u|%j|%T|%N|%v"])
    except CourseError as exc:
        if "Invalid job id" in str(exc):  # every one of them purged already
            return []
        raise
    return [Job(*row[:6]) for row in rows if row[0] in ids]


def main(action: str, group: str = "", reservation: str = "", dry_run: bool = False) -> int:
    spec = ClassSpec(group or value("COURSE_HUB_GROUP") or "",
                     reservation or value("COURSE_HUB_RESERVATION") or "")
    hub = HubAPI.from_env()
    if hub is None and spec.group:
        raise CourseError("--group needs the hub's API: set COURSE_HUB_URL and COURSE_HUB_TOKEN")
    if action == "who":
        print(who_table(learners(spec, hub)))
        return 0
    return end_class(spec, hub, dry_run=dry_run)
