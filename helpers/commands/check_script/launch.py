"""check-script's runs: N workers of the user's script, forked locally or as the tasks of a Slurm step, and what they left.

Local workers share one start-up: the command imports TensorFlow and puts check-script's
wrappers on once (`worker.prepare`, no TensorFlow op runs), then forks each worker, which
sets its own TF_CONFIG and runs the script (about 3 s of import saved per worker). A worker dies
with the command (PR_SET_PDEATHSIG), is SIGKILLed at the deadline or when a peer fails (a
MultiWorkerMirroredStrategy worker whose peer is gone waits for good and ignores SIGTERM), and
points its temporary directory into the run's directory, which the command removes. With
`--slurm`, `srun` starts `python -m helpers.commands.check_script.worker` on the nodes instead: the run's
directory must be one every node sees (`scratch_dir`).
"""

from __future__ import annotations

import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CourseError
from ...local_workers import kill_group


@dataclass
class Run:
    """One run of the script: its workers' reports, weights and last marks."""
    workers: int
    seconds: float = 0.0
    reports: dict = field(default_factory=dict)  # rank -> worker JSON
    weights: dict = field(default_factory=dict)  # rank -> {name: array}
    last_marks: dict = field(default_factory=dict)  # rank -> last progress line
    marks: dict = field(default_factory=dict)  # rank -> every progress line
    mark_times: dict = field(default_factory=dict)  # rank -> when each progress line was written (time.time())
    ended_at: float = 0.0  # time.time() when the deadline ended the run (0: it did not)
    where: dict = field(default_factory=dict)  # rank -> the script line it was last seen on
    killed: dict = field(default_factory=dict)  # rank -> why (deadline, rank N failed)
    outputs: dict = field(default_factory=dict)  # rank -> last lines the worker printed
    changed: list = field(default_factory=list)  # files and directories that changed during the run (files)
    existed: set = field(default_factory=set)  # the paths the watched directories held before it (files)
    created: dict = field(default_factory=dict)  # rank -> files it created in its own working directory
    cwd: str = ""  # the working directory the workers stood in for


def scratch_dir(slurm: bool, keep: Path | None) -> tuple[Path, bool]:
    """(the directory the runs write their reports to, whether to remove it at the end). Local
    runs: a new temporary directory. Slurm: one every node sees, under the course's output
    directory (which multi-node runs need on a shared file system): a node's /tmp is its own."""
    if keep is not None:  # absolute: each worker changes into a directory of its own before it writes there
        keep = keep.resolve()
        keep.mkdir(parents=True, exist_ok=True)
        return keep, False
    if not slurm:
        return Path(tempfile.mkdtemp(prefix="check-script-")), True
    from ...environment import output_dir

    base = output_dir() / "check-script"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="run-", dir=base)), True


def created_files(own: Path) -> list[str]:
    """The files a worker created or wrote in its own working directory (relative paths): those
    that are no longer links to the real directory's files (`cwd`)."""
    found = []
    for folder, _, names in os.walk(own) if own.is_dir() else []:
        found += [os.path.relpath(os.path.join(folder, n), own) for n in names
                  if not os.path.islink(os.path.join(folder, n))]
    return sorted(found)


def worker_environment() -> dict:
    """The workers' environment: this one without proxies, the hub's secrets and TF_CONFIG, deterministic
    ops, a fixed hash seed (Slurm tasks), quiet logs, the course on PYTHONPATH (`-m helpers.commands.check_script.worker`).
    Each worker is given a TF_CONFIG of its own (`_worker`; a Slurm task's `worker.main`): the caller's, passed on
    to the tasks of a step, would give every one of them its task index."""
    from ... import HUB_SECRETS
    from ...environment import PROXY_VARIABLES

    env = {k: v for k, v in os.environ.items() if k not in (*PROXY_VARIABLES, *HUB_SECRETS, "TF_CONFIG")}
    env.update(TF_DETERMINISTIC_OPS="1", PYTHONHASHSEED="1234")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
    return env


# ------------------------------------------------------------------ local: forked workers
def run_local(script: Path, args: list[str], n: int, out: Path, deadline_s: float) -> Run:
    """`script args` as `n` workers forked from this process, each with TF_CONFIG on localhost."""
    from ...resolver import free_port, make_tf_config
    from ...slurm.login_node import check_local_workers
    from . import worker as check_worker

    check_local_workers(f"{n} local workers")
    os.environ.update(TF_DETERMINISTIC_OPS="1")  # read by TensorFlow's kernels, in the workers
    _quietly(check_worker.prepare)
    out.mkdir(parents=True, exist_ok=True)
    workers = [f"localhost:{free_port()}" for _ in range(n)]
    env = worker_environment()
    began = time.monotonic()
    pids = []
    for rank in range(n):
        config = json.dumps(make_tf_config(workers, rank))
        pids.append(_fork(lambda config=config, rank=rank: _worker(out, script, args, rank, config, env)))
    killed = _wait(pids, deadline_s)
    run = Run(workers=n, seconds=time.monotonic() - began, cwd=os.getcwd(),
              ended_at=time.time() if "deadline" in killed.values() else 0.0)
    for rank, why in killed.items():
        run.killed[rank] = why
    for rank in range(n):
        output = out / f"output-{rank}.txt"
        run.outputs[rank] = output.read_text(errors="replace").strip().splitlines()[-6:] if output.exists() else []
    return read_run(run, out)


def _quietly(call) -> None:
    """`call()` with file descriptor 2 sent to a file: TensorFlow's import prints lines of its own
    (oneDNN, CPU features) before its logging is set up; they are shown only if the call fails."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            call()
        except BaseException:
            os.dup2(saved, 2)
            caught.seek(0)
            sys.stderr.write(caught.read().decode(errors="replace")[-3000:])
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _fork(child) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        code = child()
    finally:
        os._exit(code)


def _worker(out: Path, script: Path, args: list[str], rank: int, config: str, env: dict) -> int:
    """In the forked worker: its own session, death with the command, environment, output file."""
    from . import worker as check_worker
    from .cwd import private_cwd

    os.setsid()
    _die_with_parent()
    real = Path.cwd()
    os.chdir(private_cwd(out, rank, real))
    tmp = out / f"tmp-{rank}"
    tmp.mkdir(exist_ok=True)
    os.environ.clear()
    os.environ.update(env, TF_CONFIG=config, TMPDIR=str(tmp))
    fd = os.open(out / f"output-{rank}.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    return check_worker.run(str(out), str(script), args, real_cwd=str(real))


def _die_with_parent() -> None:
    """SIGKILL this process when the command ends, however it ends (Linux's PR_SET_PDEATHSIG)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the command ended before the call
        os._exit(70)


def _wait(pids: list[int], deadline_s: float) -> dict[int, str]:
    """Wait for the forked workers; at the deadline, or as soon as one fails, SIGKILL the rest.
    Returns {rank: why} of the workers killed."""
    end = time.monotonic() + deadline_s
    status: dict[int, int] = {}
    killed: dict[int, str] = {}
    exits = _exit_notices(pids)
    try:
        while len(status) + len(killed) < len(pids):
            for rank, pid in enumerate(pids):
                if rank in status or rank in killed:
                    continue
                done, code = os.waitpid(pid, os.WNOHANG)
                if done:
                    status[rank] = os.waitstatus_to_exitcode(code)
            failed = next((r for r, code in status.items() if code != 0), None)
            if failed is not None or time.monotonic() > end:
                why = "deadline" if failed is None else f"rank {failed} failed"
                for rank, pid in enumerate(pids):
                    if rank not in status and rank not in killed:
                        kill_group(pid)
                        os.waitpid(pid, 0)
                        killed[rank] = why
            if len(status) + len(killed) < len(pids):
                _until_one_exits([fd for r, fd in exits.items() if r not in status and r not in killed], end)
    finally:
        for fd in exits.values():
            os.close(fd)
    return killed


def _until_one_exits(notices: list[int], end: float) -> None:
    """Sleep until a running worker exits (its pidfd turns readable), the deadline, or at most 1 s;
    without pidfds, one poll interval."""
    if notices:
        select.select(notices, [], [], max(0.0, min(end - time.monotonic(), 1.0)))
    else:
        time.sleep(0.05)


def _exit_notices(pids: list[int]) -> dict[int, int]:
    """{rank: a pidfd readable once that worker exits} (Linux 5.3+), so the wait ends as a worker
    does instead of at the next poll; {} where the system has none (the wait then polls)."""
    fds: dict[int, int] = {}
    for rank, pid in enumerate(pids):
        try:
            fds[rank] = os.pidfd_open(pid)
        except (AttributeError, OSError):
            for fd in fds.values():
                os.close(fd)
            return {}
    return fds


# ------------------------------------------------------------------ Slurm: the tasks of a step
def run_slurm(script: Path, args: list[str], n: int, out: Path, deadline_s: float) -> Run:
    """The N workers as the tasks of one `srun` step, one task per node (inside an allocation)."""
    srun = shutil.which("srun")
    if srun is None:
        raise CourseError("--slurm needs srun on PATH (run check-script inside an allocation, or without --slurm)")
    out.mkdir(parents=True, exist_ok=True)
    env = worker_environment()
    env["CHECK_SCRIPT_SLURM"] = "1"
    nodes = min(n, int(os.environ.get("SLURM_JOB_NUM_NODES") or n))  # inside an allocation: the nodes it holds
    command = [srun, f"--nodes={nodes}", f"--ntasks={n}", "--kill-on-bad-exit=1",
               f"--time={max(1, math.ceil(deadline_s / 60))}", sys.executable, "-m", "helpers.commands.check_script.worker",
               str(out), str(script), *args]
    began = time.monotonic()
    run = Run(workers=n, cwd=os.getcwd())
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    at_deadline = None
    try:
        output, _ = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        # the workers without a report now hung; srun passes the interrupt on to them, and one in
        # Python code (a worker waiting in time.sleep for a peer) then reports KeyboardInterrupt
        # and writes more marks: what they showed at the deadline is kept
        at_deadline = read_run(Run(workers=n, ended_at=time.time()), out)
        for _ in range(2):  # two interrupts within a second: srun terminates the step (srun(1))
            proc.send_signal(signal.SIGINT)
            time.sleep(0.3)
        try:
            output, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    run.outputs = {0: output.strip().splitlines()[-6:]}
    run.seconds = time.monotonic() - began
    run = read_run(run, out)
    for rank in [r for r in range(n) if at_deadline is not None and r not in at_deadline.reports]:
        run.reports.pop(rank, None)  # written by the interrupt, not by the script
        run.weights.pop(rank, None)
        run.killed[rank] = "deadline"
        run.marks[rank], run.last_marks[rank] = at_deadline.marks[rank], at_deadline.last_marks[rank]
        run.mark_times[rank], run.ended_at = at_deadline.mark_times[rank], at_deadline.ended_at
        if rank in at_deadline.where:
            run.where[rank] = at_deadline.where[rank]
    return run


def read_run(run: Run, out: Path) -> Run:
    """The reports, weights, marks and last script lines the workers of `run` left in `out`."""
    import numpy as np

    for rank in range(run.workers):
        report = out / f"worker-{rank}.json"
        if report.exists():
            run.reports[rank] = json.loads(report.read_text())
            run.killed.pop(rank, None)  # it finished; another rank's failure ended the run
        weights = out / f"weights-{rank}.npz"
        if weights.exists() and rank in run.reports:  # written before the report: whole only then
            with np.load(weights) as data:
                run.weights[rank] = {k: data[k] for k in data.files}
        marks = out / f"marks-{rank}.txt"
        lines = marks.read_text().strip().splitlines() if marks.exists() else []
        where = out / f"where-{rank}.txt"
        if where.exists():
            run.where[rank] = where.read_text().strip()
        run.marks[rank] = [line.split(" ", 1)[1] for line in lines]
        run.mark_times[rank] = [float(line.split(" ", 1)[0]) for line in lines]
        run.last_marks[rank] = run.marks[rank][-1] if lines else "never started the script"
        run.created[rank] = created_files(out / f"cwd-{rank}")
    return run
