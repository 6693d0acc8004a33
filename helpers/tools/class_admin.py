"""`python -m helpers class who|end`: an instructor's view of a class on the hub, and its end.

Learners are the hub's users with a server (when the hub's API is given: COURSE_HUB_URL and an
admin token in COURSE_HUB_TOKEN) and the owners of server jobs (`jupyterhub-course`) in Slurm.
`end` touches only them: their servers through the hub, then their Slurm jobs (only those in
the class reservation when COURSE_HUB_RESERVATION is set), and it waits until squeue shows
none of those jobs before it says the class has ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from ..errors import CourseError

SERVER_JOB = "jupyterhub-course"  # server.sbatch.j2's --job-name
ENGINE_PREFIXES = ("ipengine-", "tf-course-engines")  # helpers.slurm_engines' job and step names


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
    other_jobs: list[Job] = field(default_factory=list)


def _squeue(args: list[str]) -> list[list[str]]:
    try:
        done = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise CourseError("squeue is not on PATH: run this where Slurm's commands are (the hub host "
                          "or a login node), with SLURM_CONF set if the site needs it") from None
    if done.returncode != 0:
        raise CourseError(f"squeue failed: {done.stderr.strip()[:300]}")
    return [line.split("|") for line in done.stdout.splitlines() if line.strip()]


def jobs() -> list[Job]:
    return [Job(*row[:6]) for row in _squeue(["-o", "%i|%u|%j|%T|%N|%v"])]


def steps() -> list[list[str]]:
    """[step id, user, name, nodes, tasks] of every running step."""
    return _squeue(["-s", "-o", "%i|%u|%j|%N|%A"])


class HubAPI:
    """The hub's REST API with an admin token (never through a web proxy the environment names)."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url.rstrip("/"), token
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @classmethod
    def from_env(cls) -> "HubAPI | None":
        token = os.environ.get("COURSE_HUB_TOKEN", "")
        return cls(os.environ.get("COURSE_HUB_URL", "http://127.0.0.1:8000"), token) if token else None

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

    def users(self) -> list[dict]:
        status, body = self.call("GET", "/users?state=active")
        if status != 200:
            raise CourseError(f"the hub refused the user list (HTTP {status}): COURSE_HUB_TOKEN needs the "
                              "admin:users or list:users and read:servers scopes")
        return body


def learners(hub: HubAPI | None = None) -> dict[str, Learner]:
    """Who is where: hub users with a server, owners of server jobs, and their other jobs."""
    found: dict[str, Learner] = {}
    for user in (hub.users() if hub else []):
        server = (user.get("servers") or {}).get("")
        if server:
            found[user["name"]] = Learner(user["name"], "ready" if server.get("ready") else "pending")
    queue = jobs()
    for job in queue:
        if job.name == SERVER_JOB:
            found.setdefault(job.user, Learner(job.user)).server = job
    for job in queue:
        if job.user in found and job.name != SERVER_JOB:
            if job.name.startswith(ENGINE_PREFIXES):
                found[job.user].engines.append(f"job {job.job_id} {job.state} on {job.nodes or '-'}")
            else:
                found[job.user].other_jobs.append(job)
    for step_id, user, name, nodes, tasks in (row[:5] for row in steps()):
        if user in found and name.startswith(ENGINE_PREFIXES):
            found[user].engines.append(f"{tasks} in step {step_id} on {nodes}")
    return found


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


def end_class(hub: HubAPI | None = None, reservation: str = "", within: float = 120.0) -> int:
    """Stop every learner's server and jobs; 0 when squeue shows none of them afterwards."""
    found = learners(hub)
    started = time.monotonic()
    if hub:
        for name in sorted(n for n, learner in found.items() if learner.hub_state != "-"):
            status, _ = hub.call("DELETE", f"/users/{name}/server")
            print(f"  {name}: hub stopped the server (HTTP {status})" if status in (202, 204)
                  else f"  {name}: the hub answered HTTP {status} to stopping the server")
    for name in sorted(found):
        command = ["scancel", "-u", name] + ([f"--reservation={reservation}"] if reservation else [])
        subprocess.run(command, capture_output=True, text=True, timeout=60)
        server = found[name].server
        if reservation and server:  # the server job too, in case the hub has no reservation set
            subprocess.run(["scancel", server.job_id], capture_output=True, timeout=60)
    left = _remaining(found, reservation)
    while left and time.monotonic() - started < within:
        time.sleep(1)
        left = _remaining(found, reservation)
    waited = time.monotonic() - started
    if left:
        print(f"class NOT ended after {waited:.0f} s: still in squeue: "
              + ", ".join(f"{j.job_id} ({j.user}, {j.state})" for j in left))
        return 1
    print(f"class ended: {len(found)} learner(s); squeue shows none of their "
          f"{'reservation ' if reservation else ''}jobs ({waited:.1f} s)")
    return 0


def _remaining(found: dict[str, Learner], reservation: str) -> list[Job]:
    servers = {learner.server.job_id for learner in found.values() if learner.server}
    return [j for j in jobs() if j.user in found and (not reservation or j.reservation == reservation
                                                      or j.job_id in servers)]


def main(action: str) -> int:
    hub = HubAPI.from_env()
    if hub is None:
        print("(no COURSE_HUB_TOKEN: learners from Slurm's server jobs only)")
    if action == "who":
        print(who_table(learners(hub)))
        return 0
    return end_class(hub, os.environ.get("COURSE_HUB_RESERVATION", ""))
