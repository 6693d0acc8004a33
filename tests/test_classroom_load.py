"""A class logging in at once: N learners on one hub and the local Slurm, measured.

Every learner is a real Unix user. One logs in with Chromium; the others use the hub's REST API
with their own token, as scripts of real learners would. Each starts a server (a Slurm job),
starts 2 engines in it (an `srun` step of the server's job) from a kernel, runs one `%%px` cell;
every other learner then stops their server, the rest leave it running (with its engines) for
the instructor's `python -m helpers class end`. Traffic stays on this machine: loopback and the local Slurm's own namespace nodes.

N is COURSE_CLASS_LEARNERS (6 here and in CI; `make classtest` runs 30 on nodes declaring
more CPUs). Reported: p50/p95 from login to server ready and to engines ready, failures (must
be 0), spawns the hub asked to retry (its concurrent-spawn limit), peak memory and CPU, and
what was left afterwards (nothing: `python -m helpers class end` ends the class, and then
squeue, the process table and the learners' processes are checked; processes of the learners
still ending when `class end` returns are listed and given GRACE seconds to end).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, leftovers, squeue
from tests.support.hub import hub_log_in, new_hub, run_in_kernel, unix_learners, wait_server
from tests.support.browser import chromium_page, ensure_chromium

pytestmark = pytest.mark.slurm
LEARNERS = int(os.environ.get("COURSE_CLASS_LEARNERS", "6"))
GRACE = 30.0  # seconds the learners' last processes may take to end after `class end` returns
CELLS = [  # the engines stop with the kernel (and the job with the server)
    "from helpers.engines import start_engines\nengines = start_engines(2)",
    "%%px\nimport os, socket\nwhere = f\"engine {os.environ['SLURM_PROCID']} on {socket.gethostname()}\"",
    "print('\\n'.join(sorted(engines.client[:].pull('where', block=True))))",
]


class Sampler(threading.Thread):
    """Memory in use and CPU busy on this machine, once a second: the class's peak."""

    def __init__(self):
        super().__init__(daemon=True)
        self.memory, self.cpu, self.done = [], [], threading.Event()
        psutil.cpu_percent()

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.memory.append(psutil.virtual_memory().used)
            self.cpu.append(psutil.cpu_percent())


def _quantiles(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.1f} s" if values else "-"
    cuts = statistics.quantiles(values, n=20, method="inclusive")
    return f"p50 {statistics.median(values):.1f} s, p95 {cuts[18]:.1f} s, max {max(values):.1f} s"


def _processes_of(users: set[str]) -> list[str]:
    found = []
    for proc in psutil.process_iter(["username", "name", "cmdline", "ppid", "create_time", "status"]):
        if proc.info["username"] in users:
            age = time.time() - proc.info["create_time"]
            found.append(f"{proc.pid} ({proc.info['status']}, parent {proc.info['ppid']}, {age:.0f} s old) "
                         f"{proc.info['username']} "
                         f"[{proc.info['name']}] {' '.join(proc.info['cmdline'] or [])[:160]}")
    return found


def _ended_within(found: list[str], seconds: float) -> tuple[list[str], float]:
    """Which of `found` still run after up to `seconds`. Slurm has killed the jobs when squeue
    empties, but a killed process whose parent died first stays in the table as a zombie until
    init reaps it (seen here: python and srun processes, parent 1, no command line left)."""
    pids = [int(line.split()[0]) for line in found]
    started = time.monotonic()
    while True:
        alive = [line for pid, line in zip(pids, found) if _running(pid)]
        if not alive or time.monotonic() - started > seconds:
            return alive, time.monotonic() - started
        time.sleep(0.5)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _start(hub, learner: dict, token: str, result: dict) -> None:
    """Log in, wait for the server, start 2 engines and run a %%px cell; times from login."""
    user = learner["name"]
    t0 = result.get("t0") or time.monotonic()  # learner 0: before the login page opened
    if learner.get("browser"):
        learner["browser"]()  # logged in already: waits for JupyterLab
    else:
        while True:
            status, body = hub.call("POST", f"/hub/api/users/{user}/server", learner["token"])
            if status != 429:
                break
            result["retries"] = result.get("retries", 0) + 1  # the hub's spawn limit: try again soon
            time.sleep(2)
        assert status in (201, 202), f"{user}: spawn answered {status}: {body}"
    server = wait_server(hub, user, token, 600)
    assert server["ready"]
    result["server ready"] = time.monotonic() - t0
    started, _, px = run_in_kernel(hub, user, learner["token"], CELLS, timeout=600, keep=True)
    result["engines ready"] = time.monotonic() - t0
    assert "2 engines ready" in started, started
    lines = [line for line in px.splitlines() if line.startswith("engine ")]
    assert len(lines) == 2 and {line.split()[1] for line in lines} == {"0", "1"}, px
    result["node"] = lines[0].split()[-1]


def _stop(hub, learner: dict, result: dict) -> None:
    """Every other learner stops their server; the rest leave it running with its engines, as
    learners do, and `class end` must stop them."""
    if learner["index"] % 2:
        result["ok"] = True
        return
    t = time.monotonic()
    status = hub.call("DELETE", f"/hub/api/users/{learner['name']}/server", learner["token"])[0]
    assert status in (202, 204), f"{learner['name']}: stop answered {status}"
    result["stopped"] = time.monotonic() - t
    result["ok"] = True


def _learner(hub, learner: dict, token: str, barrier: threading.Barrier, result: dict) -> None:
    """One learner's thread: start, wait with the class at its peak (`class who` looks), stop."""
    try:
        _start(hub, learner, token, result)
        barrier.wait(timeout=900)
        barrier.wait(timeout=120)
        _stop(hub, learner, result)
    except BaseException as exc:  # noqa: BLE001 - every failure is counted and shown
        result["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
        barrier.abort()


@pytest.mark.timeout(2400)
def test_a_class_starts_works_and_ends_with_nothing_left(slurm, tmp_path, report):
    ensure_chromium()  # before the hub starts: a skip, or a failure where CI requires the browser

    limit = max(2, LEARNERS * 2 // 3)
    extra = ("c.SlurmSpawner.req_options = '--nodes=1 --ntasks=2'\n"
             "c.SlurmSpawner.req_partition = 'debug,cpu'\n"
             "c.SlurmSpawner.start_timeout = 600\n"
             f"c.JupyterHub.concurrent_spawn_limit = {limit}\n"
             "c.JupyterHub.load_groups = {'course': {'users': %r}}\n")
    sampler = Sampler()
    with unix_learners(LEARNERS) as learners:
        hub, token = new_hub(tmp_path, slurm, {l["name"]: l["password"] for l in learners},
                             extra % [l["name"] for l in learners])
        results = [dict() for _ in learners]
        barrier = threading.Barrier(LEARNERS)
        who, ended, peak_memory, total, running = "", None, 0, 0.0, -1
        try:
            for index, learner in enumerate(learners):
                learner["index"] = index
                status, body = hub.call("POST", f"/hub/api/users/{learner['name']}/tokens", token,
                                        {"note": "class load test", "expires_in": 3600})
                assert status == 201, f"token for {learner['name']}: {status} {body}"
                learner["token"] = body["token"]
            with chromium_page() as page:

                first = learners[0]["name"]

                def lab_ready() -> None:
                    page.wait_for_url(f"**/user/{first}/lab**", timeout=600_000)
                    page.wait_for_selector(".jp-LabShell, #jp-main-dock-panel", timeout=300_000)

                learners[0]["browser"] = lab_ready  # Playwright: this thread only
                sampler.start()
                threads = [threading.Thread(target=_learner, args=(hub, l, token, barrier, r), daemon=True)
                           for l, r in zip(learners[1:], results[1:])]
                began = time.monotonic()
                try:  # this thread is learner 0 (in Chromium) and the instructor
                    results[0]["t0"] = time.monotonic()
                    hub_log_in(page, first, learners[0]["password"], hub.url)
                    for thread in threads:  # the class logs in at the same moment
                        thread.start()
                    _start(hub, learners[0], token, results[0])
                    barrier.wait(timeout=900)
                    who = subprocess.run([sys.executable, "-m", "helpers", "class", "who", "--group", "course"], capture_output=True,
                                         text=True, timeout=120, cwd=ROOT,
                                         env={**slurm["env"], "COURSE_HUB_URL": hub.url,
                                              "COURSE_HUB_TOKEN": token}).stdout
                    peak_memory = max(sampler.memory, default=0)
                    barrier.wait(timeout=120)
                    _stop(hub, learners[0], results[0])
                except BaseException as exc:  # noqa: BLE001 - counted with the others'
                    results[0].setdefault("error", f"{type(exc).__name__}: {str(exc)[:600]}")
                    barrier.abort()
                for thread in threads:
                    thread.join(timeout=300)
                total = time.monotonic() - began
            sampler.done.set()
            status, users = hub.call("GET", "/hub/api/users?state=active", token)
            running = sum(1 for u in users if u["servers"]) if status == 200 else -1
            ended = subprocess.run([sys.executable, "-m", "helpers", "class", "end", "--group", "course"], capture_output=True, text=True,
                                   timeout=300, cwd=ROOT,
                                   env={**slurm["env"], "COURSE_HUB_URL": hub.url, "COURSE_HUB_TOKEN": token})
        finally:
            sampler.done.set()
            hub.stop()
        queue = squeue(slurm["env"])
        at_once = _processes_of({l["name"] for l in learners})
        processes, grace = _ended_within(at_once, GRACE)
    failures = [f"{l['name']}: {r.get('error', 'did not finish')}" for l, r in zip(learners, results) if not r.get("ok")]
    ready = [r["server ready"] for r in results if "server ready" in r]
    engines = [r["engines ready"] for r in results if "engines ready" in r]
    nodes = sorted({r.get("node", "?") for r in results})
    report(f"{Path(__file__).stem}: {LEARNERS} learners (1 in Chromium), spawn limit {limit}: "
           f"login to server ready {_quantiles(ready)}; login to 2 engines ready for %%px {_quantiles(engines)}; "
           f"failures {len(failures)}; spawns told to retry {sum(r.get('retries', 0) for r in results)}; "
           f"whole class {total:.0f} s; nodes {nodes}")
    report(f"{Path(__file__).stem}: peak memory in use {peak_memory / 2**30:.1f} GiB of "
           f"{psutil.virtual_memory().total / 2**30:.0f} GiB with every learner's server and engines up; "
           f"CPU busy mean {statistics.mean(sampler.cpu or [0]):.0f}%, peak {max(sampler.cpu or [0]):.0f}% "
           f"({psutil.cpu_count()} cores)")
    report(f"{Path(__file__).stem}: {running} servers still running (or stopping) for `class end`: {(ended.stdout.strip().splitlines() or [ended.stderr.strip()])[-1] if ended else '-'}; "
           f"afterwards squeue {queue!r}, learners' processes {len(at_once)}, "
           f"{len(processes)} of them still there {grace:.1f} s later")
    if at_once:
        report(f"{Path(__file__).stem}: the learners' processes when `class end` returned: " + "; ".join(at_once))
    print(who)
    assert not failures, "\n".join(failures)
    assert who.count(" in step ") == LEARNERS and who.strip().endswith(f"{LEARNERS} learner(s)"), who
    # those who stopped may still be stopping: `class end` sees them too
    assert running >= LEARNERS // 2, f"servers left for `class end`: {running}"
    assert ended.returncode == 0 and "class ended" in ended.stdout, ended.stdout + ended.stderr
    assert queue == "" and not processes, (queue, processes)
    left = [p for p in leftovers() if "jupyterhub" in p or "ipengine" in p or "ipcontroller" in p]
    assert not left, left
