"""A learner attacks the hub through batchspawner's API, from their own kernel, on the real hub
and the local Slurm. Root only; CI requires it (COURSE_REQUIRE_SLURM=1).

batchspawner 1.3's handler set every attribute a server's token sent; the command prefix and the
query and cancel commands were then run by a shell as the hub's account (root here). Each attack
names a file in a directory only root can write: if the file appears, the hub ran the learner's
command.
"""

from __future__ import annotations

import json
import time

import pytest

from helpers.hub_spawner import BATCHSPAWNER_API, ServerPortHandler, command
from tests.conftest import squeue_empty
from tests.hub_support import new_hub, run_in_kernel, unix_learners, wait_server

HUB_SECRET = "JUPYTERHUB_CRYPT_KEY"


def test_commands_are_argument_lists_whatever_the_values():
    values = {"username": "alice", "job_id": "42; touch /x", "homedir": "/home/a b"}
    assert command("sudo -E -u {username}", values) == ["sudo", "-E", "-u", "alice"]
    assert command("squeue -h -j {job_id} -o '%T %B %r'", values) == ["squeue", "-h", "-j", "42; touch /x",
                                                                      "-o", "%T %B %r"]
    assert command("tail -n 6 {homedir}/log", values) == ["tail", "-n", "6", "/home/a b/log"]


def test_the_hub_routes_batchspawners_api_to_the_port_only_handler():
    from jupyterhub import apihandlers

    routes = [h for h in apihandlers.default_handlers if h[0] == BATCHSPAWNER_API]
    assert routes == [(BATCHSPAWNER_API, ServerPortHandler)], routes


@pytest.mark.slurm
def test_a_learners_kernel_cannot_make_the_hub_run_commands(slurm, tmp_path, report):
    marks = tmp_path / "ran"  # root's: a file here was made by the hub's account
    marks.mkdir(mode=0o700)
    shared = slurm["dir"] / f"hub-security-{time.monotonic_ns()}"  # the learner's squeue must reach it
    shared.mkdir(mode=0o755)
    envdump, seen_env = shared / "squeue-env", shared / "seen" / "query-env"
    seen_env.parent.mkdir()
    seen_env.parent.chmod(0o777)
    envdump.write_text(f'#!/bin/sh\nenv > {seen_env}\nexec squeue "$@"\n')
    envdump.chmod(0o755)
    attacks = {
        "exec_prefix": {"exec_prefix": f"touch {marks}/exec_prefix;"},
        "batch_query_cmd": {"batch_query_cmd": f"touch {marks}/batch_query_cmd; squeue -h -j {{job_id}}"},
        "batch_cancel_cmd": {"batch_cancel_cmd": f"touch {marks}/batch_cancel_cmd; scancel {{job_id}}"},
        "job_id": {"job_id": f"1; touch {marks}/job_id"},
        "ip and port": {"ip": "127.0.0.1", "port": 8081},
        "port again": {"port": 8082},
    }
    extra = ("c.Spawner.poll_interval = 2\n"
             f"c.CourseSlurmSpawner.batch_query_cmd = \"{envdump} -h -j {{job_id}} -o '%T %B %r'\"\n")
    cell = ("import json, os, urllib.request\n"
            "def post(body):\n"
            "    req = urllib.request.Request(os.environ['JUPYTERHUB_API_URL'] + '/batchspawner', method='POST',\n"
            "        data=json.dumps(body).encode(), headers={'Authorization': 'token ' + os.environ['JUPYTERHUB_API_TOKEN']})\n"
            "    try:\n"
            "        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30) as r:\n"
            "            return r.status\n"
            "    except urllib.error.HTTPError as e:\n"
            "        return e.code\n"
            f"print(json.dumps({{name: post(body) for name, body in {attacks!r}.items()}}))\n")
    with unix_learners(1, prefix="sec") as (learner,):
        user = learner["name"]
        hub, token = new_hub(tmp_path, slurm, {user: learner["password"]}, extra,
                             env={HUB_SECRET: "the-hubs-own-secret"})
        try:
            status, _ = hub.call("POST", f"/hub/api/users/{user}/server", token)
            assert status in (201, 202), status
            wait_server(hub, user, token, 120)
            _, routes = hub.call("GET", "/hub/api/proxy", token)
            before = {k: v["target"] for k, v in routes.items() if user in k}
            (answers,) = run_in_kernel(hub, user, token, [cell])
            answers = json.loads(answers)
            time.sleep(7)  # three status polls of 2 s run the query command
            _, routes = hub.call("GET", "/hub/api/proxy", token)
            after = {k: v["target"] for k, v in routes.items() if user in k}
            own, _ = hub.call("GET", f"/user/{user}/api/status", token)
            assert hub.request("DELETE", f"/hub/api/users/{user}/server", token) in (202, 204)
            assert squeue_empty(slurm["env"], within=60), "stopping the server must end its Slurm job"
            query_env = seen_env.read_text() if seen_env.exists() else ""
        finally:
            hub.stop()
    report(f"{__name__.rsplit('.', 1)[-1]}: the hub answered the attacks {answers}")
    ran = sorted(p.name for p in marks.iterdir())
    assert not ran, f"the hub ran the learner's commands: {ran}"
    assert all(400 <= code < 500 for code in answers.values()), answers
    assert before and after == before, f"the learner's route moved: {before} -> {after}"
    assert own == 200, f"the learner's own server no longer answers through the proxy ({own})"
    assert "SLURM_CONF=" in query_env, "the query wrapper did not run (the test would prove nothing)"
    assert HUB_SECRET not in query_env and "CONFIGPROXY_AUTH_TOKEN" not in query_env, \
        "a command run as the learner got the hub's secrets in its environment"
