"""`class end` ends the class and only the class, on the real hub and the local Slurm.

A learner of the class and a hub user outside it both have a server in the class reservation;
the learner also has a job outside the reservation, and the outsider a job named like a server.
`class end --group course --reservation R` must stop the learner's server and nothing else. Then
`class end --group course` (no reservation) cancels the learner's engines job of the course and
leaves the learner's own ipyparallel engines (`ipengine-*`, ipyparallel's default name) alone.
The instructor's token has the scopes docs/offering.md names, not admin. Root only; CI requires it.
"""

from __future__ import annotations

import secrets
import subprocess
import sys

import pytest

from helpers.engines.on_slurm import engines_job_name
from tests.conftest import ROOT
from tests.support.hub import new_hub, unix_learners, wait_server

pytestmark = pytest.mark.slurm
CLASS_SCOPES = ["read:groups", "list:users", "read:servers", "delete:servers"]


def _as(user: str, env: dict, *argv: str) -> str:
    done = subprocess.run(["runuser", "-u", user, "--", *argv], env=env, capture_output=True, text=True,
                          timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _queue(env: dict) -> dict[str, str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i|%u|%j|%v"], env=env, capture_output=True, text=True,
                         timeout=30).stdout
    return {row.split("|")[0]: row for row in out.split()}


def _class(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "helpers", "class", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


def test_class_end_touches_only_the_class(slurm, tmp_path, report):
    with unix_learners(2, prefix="ce") as (learner, outsider):
        name = f"class{secrets.token_hex(2)}"
        made = subprocess.run(["scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now",
                               "Duration=30", "Nodes=node1,node2", f"Users={learner['name']},{outsider['name']}"],
                              env=slurm["env"], capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        instructor = secrets.token_hex(32)
        extra = ("c.SlurmSpawner.req_options = '--nodes=1 --ntasks=1'\n"
                 f"c.JupyterHub.load_groups = {{'course': {{'users': [{learner['name']!r}]}}}}\n"
                 f"c.JupyterHub.services.append({{'name': 'instructor', 'api_token': {instructor!r}}})\n"
                 f"c.JupyterHub.load_roles.append({{'name': 'instructor', 'scopes': {CLASS_SCOPES!r}, "
                 "'services': ['instructor']})\n")
        users = {learner["name"]: learner["password"], outsider["name"]: outsider["password"]}
        hub, token = new_hub(tmp_path, slurm, users, extra, env={"COURSE_HUB_RESERVATION": name})
        try:
            for user in users:
                assert hub.call("POST", f"/hub/api/users/{user}/server", token)[0] in (201, 202)
            for user in users:
                wait_server(hub, user, token, 120)
            plain = {k: v for k, v in slurm["env"].items() if not k.endswith("_RESERVATION")}
            outside = _as(learner["name"], plain, "sbatch", "--parsable", "--hold", "--wrap", "true")
            lookalike = _as(outsider["name"], plain, "sbatch", "--parsable", "--hold", "-J", "jupyterhub-course",
                            "--wrap", "true")
            # the learner's own ipyparallel engines (ipyparallel's default job name) and an engines job
            # of the course's, both outside the reservation
            research = _as(learner["name"], plain, "sbatch", "--parsable", "--hold", "-J", "ipengine-1700000000-ab12",
                           "--wrap", "true")
            course_engines = _as(learner["name"], plain, "sbatch", "--parsable", "--hold", "-J",
                                 engines_job_name("course-0123abcd"), "--wrap", "true")
            before = _queue(slurm["env"])
            servers = {row.split("|")[1]: job for job, row in before.items() if f"|jupyterhub-course|{name}" in row}
            assert set(servers) == set(users), before
            env = {**slurm["env"], "COURSE_HUB_URL": hub.url, "COURSE_HUB_TOKEN": instructor}
            dry = _class(env, "end", "--group", "course", "--reservation", name, "--dry-run")
            assert dry.returncode == 0, dry.stderr
            assert _queue(slurm["env"]).keys() == before.keys(), "--dry-run changed the queue"
            ended = _class(env, "end", "--group", "course", "--reservation", name)
            after = _queue(slurm["env"])
            status, model = hub.call("GET", f"/hub/api/users/{outsider['name']}", token)
            outsider_ready = bool(model["servers"].get("", {}).get("ready")) if status == 200 else False
            unnamed = _class({**env, "COURSE_HUB_RESERVATION": ""}, "end")
            by_group = _class({**env, "COURSE_HUB_RESERVATION": ""}, "end", "--group", "course")
            after_group = _queue(slurm["env"])
        finally:
            for user in users:
                hub.call("DELETE", f"/hub/api/users/{user}/server", token)
            subprocess.run(["scancel", "-u", learner["name"]], env=slurm["env"], timeout=60)
            subprocess.run(["scancel", "-u", outsider["name"]], env=slurm["env"], timeout=60)
            hub.stop()
            subprocess.run(["scontrol", "delete", f"ReservationName={name}"], env=slurm["env"], timeout=60)
    report(f"{__name__.rsplit('.', 1)[-1]}: {dry.stdout.strip()} | {ended.stdout.strip().splitlines()[-1]} | "
           f"--group only: {by_group.stdout.strip().splitlines()[-1] if by_group.stdout.strip() else by_group.stderr}; "
           f"left: {sorted(after_group)}")
    words = dry.stdout.split()
    assert f"stop the servers of {learner['name']} " in dry.stdout and servers[learner["name"]] in words, dry.stdout
    assert outsider["name"] not in words and outside not in words and lookalike not in words, dry.stdout
    assert ended.returncode == 0 and "class ended" in ended.stdout, ended.stdout + ended.stderr
    assert servers[learner["name"]] not in after, f"the learner's server job is still there: {after}"
    assert servers[outsider["name"]] in after and outsider_ready, "the outsider's server was stopped"
    assert outside in after, "the learner's job outside the reservation was cancelled"
    assert lookalike in after, "a job named like a server, of a user outside the class, was cancelled"
    assert unnamed.returncode == 2 and "say which class" in unnamed.stderr, unnamed.stderr
    assert research in after and course_engines in after, "jobs outside the reservation were cancelled"
    assert by_group.returncode == 0 and course_engines in by_group.stdout, by_group.stdout + by_group.stderr
    assert course_engines not in after_group, f"the course's engines job outside the reservation is left: {after_group}"
    assert research in after_group, "the learner's own ipyparallel engines job (ipengine-*) was cancelled"
    assert outside in after_group, "the learner's job that is no course job was cancelled by --group"
