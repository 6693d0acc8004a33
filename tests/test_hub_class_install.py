"""A class install through the real hub: root's checkout serves two learners, each on a GPU node in the node layout.

Issue 56, findings 4 and 5. Root and the local Slurm (tests/conftest.py `slurm`: node1 and node2
with 4 simulated GPUs each). The hub runs the shipped config's node layout as it computes it on
this Slurm (not the test hub's usual 2-node override); the course's checkout and venv are root's
(a class installed once, as docs/gpu-class.md says), and two Unix learners start servers from it
at once. A kernel of each reads what its job was given, and what an `srun` step of the job (the
course's engines) sees: `--exclusive` alone gave the batch step CUDA_VISIBLE_DEVICES=0,1,2,3 and
every step none. A course account that owns the install is trusted only when the hub names it
(COURSE_HUB_INSTALL_OWNER): the server's own check, run as a learner.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, squeue_empty
from tests.support.hub import new_hub, run_in_kernel, unix_learners, wait_server

CONFIG = ROOT / "slurm" / "jupyterhub" / "jupyterhub_config.py"
# the test hub sets its own req_options after loading the shipped config: put the shipped value back,
# computed in the hub's environment (sinfo on this Slurm), as a centre's hub would compute it
SHIPPED_OPTIONS = f'''
from traitlets.config import Config as _Shipped
_shipped = _Shipped()
exec(compile(open({str(CONFIG)!r}).read(), {str(CONFIG)!r}, "exec"), {{"get_config": lambda: _shipped,
                                                                    "__file__": {str(CONFIG)!r}}})
c.SlurmSpawner.req_options = _shipped.SlurmSpawner.req_options
'''
CELL = """
import json, os, subprocess, sys
job = os.environ["SLURM_JOB_ID"]
shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
step = subprocess.run(["srun", "-n1", "bash", "-c", "echo ${CUDA_VISIBLE_DEVICES:-none}"], capture_output=True,
                      text=True, timeout=60)
print("SEEN " + json.dumps({"job": job, "node": os.environ.get("SLURMD_NODENAME"),
      "kernel_gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "step_gpus": step.stdout.strip() or step.stderr[-200:],
      "tres_per_node": next((f for f in shown.split() if f.startswith("TresPerNode=")), None),
      "tasks": os.environ.get("SLURM_NTASKS"), "python": sys.executable,
      "python_owner": os.stat(os.path.realpath(sys.executable)).st_uid, "venv_owner": os.stat(sys.prefix).st_uid}))
"""


@pytest.mark.slurm
@pytest.mark.timeout(900)
def test_a_root_owned_install_serves_two_learners_each_a_gpu_node_with_its_4_gpus(slurm, tmp_path, report):
    assert os.stat(ROOT).st_uid == 0 and os.stat(ROOT / ".venv").st_uid == 0, "the course's install is root's here"
    with unix_learners(2, prefix="ci") as learners:
        passwords = {learner["name"]: learner["password"] for learner in learners}
        hub, token = new_hub(tmp_path, slurm, passwords, SHIPPED_OPTIONS)
        seen = {}
        try:
            started = time.monotonic()
            for user in passwords:
                status, body = hub.call("POST", f"/hub/api/users/{user}/server", token)
                assert status in (201, 202), (status, body)
            for user in passwords:
                wait_server(hub, user, token, 240)
                (out,) = run_in_kernel(hub, user, token, [CELL], timeout=180)
                seen[user] = json.loads(next(line for line in out.splitlines() if line.startswith("SEEN "))[5:])
            took = time.monotonic() - started
            for user in passwords:
                assert hub.request("DELETE", f"/hub/api/users/{user}/server", token) in (202, 204)
        except Exception as exc:
            logs = "".join(f"--- {log}\n{log.read_text()[-3000:]}" for learner in learners
                           for log in sorted(learner["home"].glob("jupyterhub-course-*.log")))
            raise AssertionError(f"{exc}\n--- hub log\n{hub.tail()}\n{logs}") from None
        finally:
            hub.stop()
        assert squeue_empty(slurm["env"], within=60)
    report(f"{__name__.rsplit('.', 1)[-1]}: root's install ({ROOT}/.venv) served {len(seen)} learners in "
           f"{took:.1f} s: " + "; ".join(f"{s['node']} job {s['job']} {s['tres_per_node']} tasks {s['tasks']}, "
                                       f"kernel CUDA_VISIBLE_DEVICES={s['kernel_gpus']}, srun step {s['step_gpus']}"
                                       for s in seen.values()))
    assert {s["node"] for s in seen.values()} == {"node1", "node2"}, seen  # a node each, --exclusive
    for s in seen.values():
        assert s["tres_per_node"] == "TresPerNode=gres:gpu:4" and s["tasks"] == "4", s
        assert s["kernel_gpus"] == "0,1,2,3", s  # the node's 4 GPUs, seen from the kernel
        assert s["step_gpus"] == "0,1,2,3", s  # and from a step of the job (the engines)
        assert s["python"].startswith(str(ROOT / ".venv")) and s["python_owner"] == 0 and s["venv_owner"] == 0, s


def _ownership_check(install_uid: str, course_dir: Path) -> str:
    """The server job's check of the course's Python, as the shipped config renders it."""
    from traitlets.config import Config

    config = Config()
    env = {"COURSE_HUB_IP": "10.1.1.1", "COURSE_HUB_GPUS_PER_NODE": "0", "COURSE_DIR": str(course_dir)}
    if install_uid:
        env["COURSE_HUB_INSTALL_OWNER"] = install_uid
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    mask = os.umask(0o022)
    try:
        exec(compile(CONFIG.read_text(), str(CONFIG), "exec"), {"get_config": lambda: config, "__file__": str(CONFIG)})
    finally:
        os.umask(mask)
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    script = config.SlurmSpawner.batch_script
    start = script.index("for path in ")
    return script[start:script.index("done\n", start) + 5]


def test_a_course_account_owning_the_install_is_trusted_only_when_named(other_user):
    """The learner's server refused an install owned by anyone but root or the learner: a course
    account's install serves the class once the hub names the account, and only then."""
    if subprocess.run(["id", "-u", "nobody"], capture_output=True).returncode != 0:
        pytest.skip("no user nobody to stand for the course account")
    course = pwd.getpwnam("nobody")
    where = Path(tempfile.mkdtemp(prefix="course-account-", dir="/var/tmp"))
    try:
        where.chmod(0o755)
        install = where / "tf-hpc-course"
        (install / ".venv" / "bin").mkdir(parents=True)
        for path in (install, install / ".venv", install / ".venv" / "bin"):
            path.chmod(0o755)
            os.chown(path, course.pw_uid, course.pw_gid)
        results = {}
        for named in ("", "nobody"):
            check = _ownership_check(named, install)
            done = subprocess.run(["runuser", "-u", other_user["name"], "--", "bash", "-c", check + "echo accepted"],
                                  capture_output=True, text=True, timeout=30, cwd="/")
            results[named or "unset"] = (done.returncode, (done.stdout + done.stderr).strip())
        os.chmod(install / ".venv" / "bin", 0o775)  # named, but writable by a group: still refused
        check = _ownership_check("nobody", install)
        loose = subprocess.run(["runuser", "-u", other_user["name"], "--", "bash", "-c", check + "echo accepted"],
                               capture_output=True, text=True, timeout=30, cwd="/")
    finally:
        subprocess.run(["rm", "-rf", str(where)], timeout=30)
    assert results["unset"][0] == 2 and f"belongs to uid {course.pw_uid}" in results["unset"][1], results
    assert results["nobody"] == (0, "accepted"), results
    assert loose.returncode == 2 and "mode 775" in loose.stderr, loose.stderr
