"""A class's settings through the real hub: the trainer sets them once, every learner's kernel sees them;
and what the learner's server writes is the learner's only.

Root and the local Slurm (CI requires them). The trainer starts the hub with the class-wide
COURSE_* settings (helpers.class_settings) in its environment; a learner's server is a Slurm job
in the GPU-per-learner layout (one simulated GPU, two tasks); a kernel of that server, run
through the hub's proxy as JupyterLab runs one, reads its environment and `mode_sizes()`. The same
server writes a file through JupyterLab's contents API and its kernel writes one: both 600 under the
server job's own `umask 077` (the hub here runs with umask 022, so only the batch script's line can
make them private: the job inherits the submitter's umask otherwise), and the kernel's sockets are
in a directory of the learner's only; and the results' and archives' writers, run by that server's Python,
create every name they use exclusively (docs/security.md).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import squeue_empty
from tests.support import exclusive_opens
from tests.support.hub import new_hub, run_in_kernel, unix_learners, wait_server

pytestmark = pytest.mark.slurm
CLASS = {"COURSE_MODE": "workshop", "COURSE_EPOCHS": "1", "COURSE_MAX_STEPS": "3", "COURSE_CLASS_LAYOUT": "gpu",
         "COURSE_JOB_GPUS_PER_TASK": "1"}
CELL = """
import json, os
from helpers.class_settings import CLASS_SETTINGS
from helpers.mode import mode_sizes
s = mode_sizes()
print("SEEN " + json.dumps({"env": {k: os.environ.get(k) for k in CLASS_SETTINGS}, "mode": s.mode, "epochs": s.epochs,
      "max_steps": s.max_steps, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"), "job": os.environ.get("SLURM_JOB_ID")}))
"""
PRIVATE = """
import json, os, stat
from ipykernel import get_connection_file
with open("written-by-the-kernel.txt", "w") as f:
    f.write("mine")
info = json.load(open(get_connection_file()))
sockets = os.stat(os.path.dirname(info["ip"]))
mode = lambda path: oct(stat.S_IMODE(os.stat(os.path.expanduser(path)).st_mode))
print("PRIVATE " + json.dumps({"umask": oct(os.umask(0o077)), "server_file": mode("~/written-by-the-server.txt"),
      "kernel_file": mode("written-by-the-kernel.txt"), "transport": info["transport"],
      "sockets_dir": oct(stat.S_IMODE(sockets.st_mode)), "sockets_mine": sockets.st_uid == os.getuid()}))
"""
# the results' and archives' writers, run by the learner's server's Python in a directory of theirs: every name
# created exclusively there too (docs/security.md), not only in the test's own process (test_atomic)
EXCLUSIVE = f"""
import os, subprocess, sys, tempfile
shared = tempfile.mkdtemp(prefix="shared-", dir=os.getcwd())
done = subprocess.run([sys.executable, "-c", {exclusive_opens.PROGRAM!r}, shared], capture_output=True, text=True,
                      timeout=120)
print(done.stdout + done.stderr[-2000:])
"""
HUB_UMASK_022 = "import os\nos.umask(0o022)  # a hub without the shipped config's umask: the server job's own must hold\n"


def test_the_class_settings_reach_every_learners_kernel(slurm, tmp_path, report):
    with unix_learners(1, prefix="hc") as (learner,):
        user = learner["name"]
        # the trainer's hub: the class settings in its environment, the GPU-per-learner server job
        hub, token = new_hub(tmp_path, slurm, {user: learner["password"]},
                             "c.SlurmSpawner.req_options = '--nodes=1 --ntasks=2 --gpus=1'\n" + HUB_UMASK_022, env=CLASS)
        try:
            started = time.monotonic()
            status, body = hub.call("POST", f"/hub/api/users/{user}/server", token)
            assert status in (201, 202), (status, body)
            wait_server(hub, user, token, 180)
            status, body = hub.call("PUT", f"/user/{user}/api/contents/written-by-the-server.txt", token,
                                    {"type": "file", "format": "text", "content": "mine"})
            assert status == 201, (status, body)  # written by the learner's server, as JupyterLab saves
            out, private, opens = run_in_kernel(hub, user, token, [CELL, PRIVATE, EXCLUSIVE], timeout=180)
            took = time.monotonic() - started
            assert hub.request("DELETE", f"/hub/api/users/{user}/server", token) in (202, 204)
        except Exception as exc:
            logs = "".join(f"--- {log.name}\n{log.read_text()[-3000:]}"
                           for log in sorted(learner["home"].glob("jupyterhub-course-*.log")))
            raise AssertionError(f"{exc}\n--- hub log\n{hub.tail()}\n{logs}") from None
        finally:
            hub.stop()
        assert squeue_empty(slurm["env"], within=60)
    seen = json.loads(next(line for line in out.splitlines() if line.startswith("SEEN "))[5:])
    report(f"{__name__.rsplit('.', 1)[-1]}: the learner's kernel saw {seen} ({took:.1f} s from spawn)")
    assert seen["env"] == CLASS, seen
    assert (seen["mode"], seen["epochs"], seen["max_steps"]) == ("workshop", 1, 3), seen
    assert seen["gpus"] not in (None, ""), "the GPU-per-learner server job holds one GPU"
    assert len(seen["gpus"].split(",")) == 1, seen
    files = json.loads(next(line for line in private.splitlines() if line.startswith("PRIVATE "))[8:])
    report(f"{__name__.rsplit('.', 1)[-1]}: the learner's server (hub at umask 022) wrote {files}")
    assert files == {"umask": "0o77", "server_file": "0o600", "kernel_file": "0o600", "transport": "ipc",
                     "sockets_dir": "0o700", "sockets_mine": True}, files
    first = exclusive_opens.first_opens(opens)
    report(f"{__name__.rsplit('.', 1)[-1]}: the learner's server's writers first opened {first}")
    assert len(first) >= 2 and not exclusive_opens.not_exclusive(first), first
