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

from course_hub.spawner import BATCHSPAWNER_API, ServerPortHandler, close_batchspawner_api, command
from tests.conftest import squeue_empty
from tests.support.hub import new_hub, run_in_kernel, unix_learners, wait_server

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


class _Other:  # another API handler of the hub's
    pass


def test_closing_batchspawners_api_fails_closed_when_its_route_is_not_found():
    """A later batchspawner that moved or renamed its route: the hub stops at start, saying where."""
    from batchspawner.api import BatchSpawnerAPIHandler

    routes = [(r"/api/users", _Other), (BATCHSPAWNER_API, BatchSpawnerAPIHandler)]
    close_batchspawner_api(routes)
    assert routes == [(r"/api/users", _Other), (BATCHSPAWNER_API, ServerPortHandler)]
    close_batchspawner_api(routes)  # a second import of the config: closed already, unchanged
    assert routes == [(r"/api/users", _Other), (BATCHSPAWNER_API, ServerPortHandler)]
    moved = [(r"/api/users", _Other), (r"/api/batchspawner/v2", BatchSpawnerAPIHandler)]
    with pytest.raises(RuntimeError, match=r"is at /api/batchspawner/v2, not at /api/batchspawner"):
        close_batchspawner_api(moved)
    with pytest.raises(RuntimeError, match="nowhere in JupyterHub's API routes"):
        close_batchspawner_api([(r"/api/users", _Other)])


def _queries(path) -> int:
    return path.read_text().count("ran") if path.exists() else 0


@pytest.mark.slurm
def test_a_learners_kernel_cannot_make_the_hub_run_commands(slurm, tmp_path, report):
    marks = tmp_path / "ran"  # root's: a file here was made by the hub's account
    marks.mkdir(mode=0o700)
    shared = slurm["dir"] / f"hub-security-{time.monotonic_ns()}"  # the learner's squeue must reach it
    shared.mkdir(mode=0o755)
    envdump, seen_env = shared / "squeue-env", shared / "seen" / "query-env"
    seen_env.parent.mkdir()
    seen_env.parent.chmod(0o777)
    queries = seen_env.parent / "queries"  # a line per status query the wrapper ran (as the learner)
    envdump.write_text(f'#!/bin/sh\nenv > {seen_env}\necho ran >> {queries}\nexec squeue "$@"\n')
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
            polled = _queries(queries)
            deadline = time.monotonic() + 60
            while _queries(queries) < polled + 3 and time.monotonic() < deadline:  # three status polls (every 2 s)
                time.sleep(0.2)  # after the attacks run the query command
            assert _queries(queries) >= polled + 3, f"the hub polled {_queries(queries) - polled} times in 60 s"
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


@pytest.mark.slurm
def test_the_hub_token_reaches_no_engine_worker_or_batch_job(slurm, tmp_path, report):
    """The learner's server holds the hub's token; what its kernel starts once the course is
    imported (engines as an srun step, local TensorFlow workers, a batch job) does not."""
    probe = ("import os\nprint('HUB_TOKEN' if os.environ.get('JUPYTERHUB_API_TOKEN') or os.environ.get('JPY_API_TOKEN')"
             " else 'no hub token')\n")
    cells = [
        "import os\nprint('kernel has it' if os.environ.get('JUPYTERHUB_API_TOKEN') else 'kernel lacks it')",
        "import helpers\nfrom helpers.engines import start_engines\nengines = start_engines(2)",
        "%%px\nimport os\nhas = bool(os.environ.get('JUPYTERHUB_API_TOKEN') or os.environ.get('JPY_API_TOKEN'))",
        "print('engines', engines.client[:].pull('has', block=True))\n_ = engines.stop()",
        "import pathlib, sys\nfrom helpers.local_workers import run_local_workers\n"
        f"program = pathlib.Path.home() / 'probe.py'\nprogram.write_text({probe!r})\n"
        "print('workers', [o.output.strip() for o in run_local_workers([str(program)], 2, deadline_s=60)])",
        "import subprocess\nout = pathlib.Path.home() / 'batch-env'\n"
        "done = subprocess.run(['sbatch', '--wait', '--time=2', '--nodes=1', '--ntasks=1', '--output', str(out),"
        " '--wrap', f'{sys.executable} {program}'], capture_output=True, text=True, timeout=180)\n"
        "print('batch', done.returncode, out.read_text().strip() if out.exists() else done.stderr)",
    ]
    with unix_learners(1, prefix="tok") as (learner,):
        user = learner["name"]
        hub, token = new_hub(tmp_path, slurm, {user: learner["password"]},
                             "c.SlurmSpawner.req_options = '--nodes=1 --ntasks=2'\n")
        try:
            assert hub.call("POST", f"/hub/api/users/{user}/server", token)[0] in (201, 202)
            wait_server(hub, user, token, 120)
            kernel, _, _, engines, workers, batch = run_in_kernel(hub, user, token, cells, timeout=400)
        finally:
            hub.call("DELETE", f"/hub/api/users/{user}/server", token)
            hub.stop()
        assert squeue_empty(slurm["env"], within=60)
    report(f"{__name__.rsplit('.', 1)[-1]}: {kernel.strip()} before `import helpers`; {engines.strip()}; "
           f"{workers.strip()}; {batch.strip()}")
    assert kernel.strip() == "kernel has it", "the test must start from a kernel that holds the token"
    assert engines.strip() == "engines [False, False]", engines
    assert workers.strip() == "workers ['no hub token', 'no hub token']", workers
    assert batch.strip() == "batch 0 no hub token", batch
