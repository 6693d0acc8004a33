"""`python -m helpers doctor`: a go/no-go pre-flight before a class or a long run on a cluster.

Everything a learner's first multi-node run depends on, checked where it matters (on the
compute nodes, through a tiny `srun`), printed as one block that can be pasted into a support
ticket. Each check that fails is one line with its fix. Levels: `go`, `warn` (works, but read
the line), `no-go` (the course will fail there), `skip` (does not apply here).
"""

from __future__ import annotations

import getpass
import json
import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import CourseError
from .settings import value
from .slurm.commands import WHERE_SLURM_ANSWERS, slurm_choice

COURSE_DIR = Path(__file__).resolve().parents[1]
PROBE_TIMEOUT = 120.0  # seconds for each srun the doctor starts (waiting for nodes included)
ALLREDUCE_BYTES = 32 * 1024 * 1024
LEVELS = ("go", "warn", "no-go", "skip")


@dataclass
class Check:
    name: str
    level: str  # one of LEVELS
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"  [{self.level}]".ljust(10) + f"{self.name:<14} {self.detail}"
        return text + (f"  -> fix: {self.fix}" if self.fix and self.level in ("warn", "no-go") else "")


# ----------------------------------------------------------------- checks on this host
def check_versions() -> Check:
    from . import keras_fix
    from .environment import versions

    found = versions()
    both = "tensorflow" in found and "tensorflow-cpu" in found
    tf = found.get("tensorflow") or found.get("tensorflow-cpu") or "missing"
    keras = found.get("keras", "missing")
    text = f"Python {found['python']}, TensorFlow {tf}, Keras {keras}"
    if both:
        return Check("versions", "no-go", text + ": both tensorflow and tensorflow-cpu are installed (two copies "
                     "of one module)", "pip uninstall tensorflow-cpu (GPU nodes) or tensorflow (CPU nodes)")
    if tf == "missing" or keras == "missing":
        return Check("versions", "no-go", text, "make install (or make install EXTRA=gpu)")
    try:
        keras_fix.keras_needs_fix(keras)
    except CourseError as exc:
        return Check("versions", "no-go", text + ": " + str(exc).split(";")[0],
                     f"pip install 'keras=={keras_fix.VERIFIED[0]}.{keras_fix.VERIFIED[1]}.*' (or make install)")
    if value(keras_fix.DISABLE_ENV) == "1":
        return Check("versions", "no-go", text + ": this Keras has keras-team/keras#20585 (model.fit under "
                     f"MultiWorkerMirroredStrategy fails) and {keras_fix.DISABLE_ENV}=1 turns the course's fix off",
                     f"unset {keras_fix.DISABLE_ENV}")
    return Check("versions", "go", text + ": keras-team/keras#20585 present, the course's fix (verified on this "
                 "Keras) applies")


def check_proxies() -> Check:
    from .environment import PROXY_VARIABLES

    found = [name for name in PROXY_VARIABLES if os.environ.get(name)]
    if not found:
        return Check("proxies", "go", "no proxy variable gRPC would use")
    return Check("proxies", "warn", f"{', '.join(found)} set: gRPC would send worker traffic there (workers hang); "
                 "the course's workers and batch scripts remove them",
                 "in scripts of your own: unset $(python -m helpers proxies)")


def check_ports(sample: int = 32) -> Check:
    import random

    from .resolver import port_is_free, port_range

    try:
        low, high = port_range()
    except CourseError as exc:
        return Check("ports", "no-go", str(exc), "export COURSE_PORT_RANGE=10000-20000 (a range your centre opens)")
    ports = random.sample(range(low, high + 1), min(sample, high - low + 1))
    free = sum(1 for port in ports if port_is_free(port, "0.0.0.0"))
    if free == 0:
        return Check("ports", "no-go", f"none of {len(ports)} ports tried in {low}-{high} is free on this host",
                     "widen COURSE_PORT_RANGE or free ports (`ss -ltn`)")
    return Check("ports", "go", f"{low}-{high}: {free} of {len(ports)} ports tried are free on this host")


# -------------------------------------------------------------- checks through Slurm
def slurm_state(partition: str | None) -> tuple[Check, dict | None]:
    """Whether Slurm answers here, and the partition's shape."""
    from .slurm.nodes import partition_shape

    if shutil.which("sinfo") is None:
        return Check("slurm", "skip", "no Slurm commands on PATH: local engines only"), None
    try:
        nodes, gpus = partition_shape(partition)
    except CourseError as exc:
        return Check("slurm", "no-go", str(exc), "check SLURM_CONF / `sinfo`, or COURSE_SLURM_PARTITION"), None
    where = f"job {os.environ['SLURM_JOB_ID']}" if os.environ.get("SLURM_JOB_ID") else "no job (login node)"
    step = f", step {os.environ['SLURM_STEP_ID']}" if os.environ.get("SLURM_STEP_ID") else ""
    name = partition or "default partition"
    return (Check("slurm", "go", f"{where}{step}; {name}: {nodes} usable node(s), "
                  f"{gpus or 'no'} GPU(s) per node"), {"nodes": nodes, "gpus": gpus})


def check_node_sharing(partition: str | None) -> Check:
    """Who else may run on a learner's nodes, where TensorFlow's gRPC ports accept anyone: what
    Slurm says (`helpers.slurm.nodes.sharing_of`), and what the class layout adds (helpers.slurm.submit)."""
    from .slurm.nodes import sharing_of
    from .slurm.submit import class_layout

    try:
        layout = class_layout()
    except CourseError as exc:
        return Check("node sharing", "no-go", str(exc), "export COURSE_CLASS_LAYOUT=node (or gpu)")
    exclusive, said = sharing_of(partition)
    if exclusive:
        return Check("node sharing", "go", said)
    if layout == "node":
        return Check("node sharing", "go", f"{said}; every job the course submits adds --exclusive=user "
                     "(COURSE_CLASS_LAYOUT=node); jobs you write yourself need it too")
    return Check("node sharing", "warn", f"{said}; COURSE_CLASS_LAYOUT=gpu: classmates' jobs on the same node can "
                 "reach your TensorFlow workers' ports (gRPC, no authentication)",
                 "ExclusiveUser=YES on the class partition, or COURSE_CLASS_LAYOUT=node (a node per learner)")


def _probe_request(shape: dict, partition: str | None):
    """The layout the engines would get for one worker per GPU (or node) on up to 2 nodes."""
    from .slurm.request import SlurmRequest

    request = SlurmRequest.from_env()
    if partition:
        request.partition = partition
    nodes = max(1, min(2, shape["nodes"]))
    return request.spread(nodes * max(1, shape["gpus"]))


def _srun(args: list[str], env: dict, timeout: float = PROBE_TIMEOUT) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["srun", "--immediate=60", "--time=5", *args], env=env, capture_output=True,
                              text=True, timeout=timeout, cwd=str(Path.home()) if Path.home().is_dir() else None)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, -9, exc.stdout or "", f"no answer within {timeout:.0f} s")


class _Listener:
    """A TCP port on this host that accepts and drops connections: what the nodes must reach."""

    def __init__(self, host: str):
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
                conn.close()
            except OSError:
                continue

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def node_checks(shape: dict, partition: str | None) -> list[Check]:
    """One `srun` over the nodes: GPUs and binding, ports, controller reachable, shared files."""
    from .slurm.nodes import controller_ip

    request = _probe_request(shape, partition)
    try:
        address = controller_ip(request.partition)
    except CourseError as exc:
        return [Check("controller", "no-go", str(exc), "set COURSE_CONTROLLER_IP")]
    token = secrets.token_hex(6)
    marker = Path.home() / f".tf-hpc-course-doctor-{token}"
    try:
        listener = _Listener(address)
        port = listener.port
    except OSError as exc:
        return [Check("controller", "no-go", f"cannot listen on {address} ({exc})",
                      "set COURSE_CONTROLLER_IP to this host's address on the cluster network")]
    try:
        marker.write_text(token)
        args = [a.replace("#SBATCH ", "") for a in request.sbatch_lines() if "--time" not in a]
        env = {**os.environ, "COURSE_DOCTOR_PROBE": json.dumps({"controller": f"{address}:{port}",
                                                                "marker": str(marker), "token": token})}
        env.pop("SLURM_EXPORT_ENV", None)
        done = _srun([*args, "--export=ALL", sys.executable, "-m", "helpers", "doctor", "--probe"], env)
    finally:
        listener.close()
        marker.unlink(missing_ok=True)
    layout = " ".join(args)
    tasks = [json.loads(l[6:]) for l in done.stdout.splitlines() if l.startswith("PROBE ")]
    if not tasks:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        if "No module named" in done.stderr or "can't open file" in done.stderr or "No such file" in done.stderr:
            return [Check("course files", "no-go", f"the compute nodes cannot run the course ({why}): "
                          f"{COURSE_DIR} or {sys.executable} is not visible there",
                          "install the course on a file system the compute nodes mount (e.g. $HOME or $WORK)")]
        return [Check("nodes", "no-go", f"srun {layout} failed: {why}",
                      "check partition/account/time (COURSE_SLURM_*) and `sinfo`")]
    return [_gpu_check(tasks, layout), _port_check(tasks), _reach_check(tasks, address, port),
            _files_check(tasks)]


def probe_task() -> None:
    """What the doctor's srun runs in every task (no TensorFlow): one PROBE line of JSON."""
    from .gpus import plan_for_task
    from .resolver import step_workers
    from .slurm.step import step_layout

    want = json.loads(value("COURSE_DOCTOR_PROBE"))
    found: dict = {"host": socket.gethostname(), "rank": os.environ.get("SLURM_PROCID")}
    try:
        layout = step_layout()
        plan = plan_for_task(layout.tasks_on_my_node, layout.local_rank, layout.max_tasks_per_node)
        found.update(gpus=list(plan.gpus), how=plan.how, note=plan.note)
        found["address"] = step_workers(layout)[layout.rank]  # then the worker's port, checked free
    except CourseError as exc:
        found["gpu_error" if "gpus" not in found else "port_error"] = str(exc)
    host, port = want["controller"].rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        found["reach"] = True
    except OSError as exc:
        found["reach"] = f"{type(exc).__name__}: {exc}"
    marker = Path(want["marker"])
    found["home"] = marker.is_file() and marker.read_text() == want["token"]
    data = value("COURSE_DATA_DIR")
    found["data"] = None if not data else (Path(data) / "cifar10").is_dir()
    print("PROBE " + json.dumps(found), flush=True)


def _gpu_check(tasks: list[dict], layout: str) -> Check:
    errors = sorted({t["gpu_error"] for t in tasks if "gpu_error" in t})
    if errors:
        return Check("gpus", "no-go", f"srun {layout}: {errors[0]}", "ask for one GPU per task: "
                     "COURSE_SLURM_GPUS_PER_TASK=1 (or #SBATCH --gpus-per-task=1)")
    per_host: dict[str, list[str]] = {}
    for t in tasks:
        per_host.setdefault(t["host"], []).extend(t.get("gpus", []))
    shared = [h for h, g in per_host.items() if len(g) != len(set(g))]
    replicas = sorted({len(t.get("gpus", [])) for t in tasks})
    hosts = ", ".join(f"{h}: {','.join(sorted(g)) or 'CPU'}" for h, g in sorted(per_host.items()))
    if shared:
        return Check("gpus", "no-go", f"two workers on one GPU on {', '.join(shared)} ({hosts})",
                     "COURSE_SLURM_GPUS_PER_TASK=1 so that Slurm binds one GPU per task")
    if len(replicas) > 1:
        return Check("gpus", "no-go", f"workers have different numbers of GPUs ({replicas})",
                     "the same GPUs per task everywhere (--gpus-per-task)")
    kind = "CPU only (ring all-reduce)" if replicas == [0] else f"{replicas[0]} GPU(s) per worker (NCCL)"
    notes = sorted({t["note"] for t in tasks if t.get("note")})
    return Check("gpus", "warn" if notes else "go", f"srun {layout}: {len(tasks)} tasks, {kind}; {hosts}"
                 + (f"; {notes[0]}" if notes else ""), "ask for as many tasks per node as GPUs")


def _port_check(tasks: list[dict]) -> Check:
    taken = [t for t in tasks if "port_error" in t]
    if taken:
        return Check("node ports", "no-go", f"{taken[0]['host']}: {taken[0]['port_error']}",
                     "set COURSE_PORT_RANGE to a range free on the compute nodes")
    ports = sorted({t["address"].rsplit(":", 1)[1] for t in tasks if "address" in t})
    if not ports:
        return Check("node ports", "skip", "not checked: no task got its GPUs (see above)")
    return Check("node ports", "go", f"the step's worker ports ({', '.join(ports)}) are free on every node")


def _reach_check(tasks: list[dict], address: str, port: int) -> Check:
    failed = sorted({f"{t['host']} ({t['reach']})" for t in tasks if t["reach"] is not True})
    if failed:
        return Check("controller", "no-go", f"compute nodes cannot reach this host at {address}:{port}: "
                     f"{'; '.join(failed)}", "set COURSE_CONTROLLER_IP to this host's address on the cluster "
                     "network (or use slurm/engines.sbatch: controller inside the job)")
    return Check("controller", "go", f"every node reached this host at {address}:{port}")


def _files_check(tasks: list[dict]) -> Check:
    blind = sorted({t["host"] for t in tasks if not t["home"]})
    if blind:
        return Check("shared files", "no-go", f"your home ({Path.home()}) is not the same on {', '.join(blind)}: "
                     "connection files and results would not be found", "use a home/work file system that the "
                     "compute nodes mount, or set IPYTHONDIR and COURSE_OUTPUT_DIR to one")
    data = {t["data"] for t in tasks}
    if data == {None}:
        return Check("shared files", "warn", "course and home visible on every node; COURSE_DATA_DIR unset: "
                     "workshop and full mode have no CIFAR-10",
                     "python -m helpers data prepare ..., then export COURSE_DATA_DIR")
    if False in data:
        where = sorted({t["host"] for t in tasks if t["data"] is False})
        return Check("shared files", "no-go", f"COURSE_DATA_DIR={value('COURSE_DATA_DIR')} has no prepared "
                     f"cifar10 on {', '.join(where)}", "prepare it on a shared file system (python -m helpers data prepare)")
    return Check("shared files", "go", "course, home and the prepared dataset visible on every node")


ALLREDUCE = """
import json, socket
from helpers.strategy import make_strategy
strategy = make_strategy("multiworker", timeout_seconds=60)
import tensorflow as tf
from helpers.allreduce_probe import allreduce_seconds
from helpers.doctor import link_speed
seconds = allreduce_seconds(strategy, {elements})
peers = [w.rsplit(":", 1)[0] for w in strategy.cluster_resolver.cluster_spec().as_dict()["worker"]]
other = next((p for p in peers if p != socket.gethostname()), None)
print("ALLREDUCE " + json.dumps({{"host": socket.gethostname(), "seconds": seconds,
      "tf_gpus": len(tf.config.list_physical_devices("GPU")), "link": link_speed(other) if other else None}}),
      flush=True)
"""


def bandwidth_check(shape: dict, partition: str | None) -> Check:
    """All-reduce of 32 MiB between 2 workers on 2 nodes (ring on CPU, NCCL on GPU), timed."""
    nodes = min(2, shape["nodes"])
    args = [f"--nodes={nodes}", "--ntasks=2", "--ntasks-per-node=1" if nodes == 2 else "--ntasks-per-node=2"]
    if shape["gpus"]:
        args.append("--gpus-per-task=1")
    if partition:
        args.append(f"--partition={partition}")
    deadline = value("COURSE_RENDEZVOUS_TIMEOUT")  # 45 s unless set: a probe is short
    env = {**os.environ, "COURSE_RENDEZVOUS_TIMEOUT": "45" if deadline is None else deadline,
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("SLURM_EXPORT_ENV", None)
    code = ALLREDUCE.format(elements=ALLREDUCE_BYTES // 4)
    done = _srun([*args, "--export=ALL", sys.executable, "-c", code], env, timeout=PROBE_TIMEOUT + 60)
    rows = [json.loads(l[10:]) for l in done.stdout.splitlines() if l.startswith("ALLREDUCE ")]
    if len(rows) < 2:
        lines = [l for l in (done.stderr + done.stdout).splitlines() if "not reachable" in l or "rror" in l]
        why = (lines or (done.stderr.strip().splitlines() or ["no output"]))[-1].strip()
        return Check("all-reduce", "no-go", f"2 workers ({' '.join(args)}) did not complete an all-reduce: {why[:240]}",
                     "the compute nodes must reach each other on COURSE_PORT_RANGE (firewall between nodes?)")
    seconds = max(r["seconds"] for r in rows)
    bus = ALLREDUCE_BYTES / seconds  # 2 workers, ring: each sends and receives the buffer once
    link = next((r["link"] for r in rows if r["link"]), None)
    tf_gpus = min(r["tf_gpus"] for r in rows)
    kind = "NCCL" if tf_gpus else "ring (CPU)"
    hosts = " and ".join(sorted({r["host"] for r in rows}))
    text = (f"{kind} all-reduce of 32 MiB between {hosts}: {seconds * 1000:.0f} ms, {bus / 1e6:.0f} MB/s "
            "bus bandwidth" + (f"; the link between them: {link}" if link else ""))
    if shape["gpus"] and not tf_gpus:
        return Check("all-reduce", "warn", text + f"; the nodes have {shape['gpus']} GPU(s) each but TensorFlow "
                     "sees none (tensorflow-cpu installed, or CUDA libraries missing)", "make install EXTRA=gpu")
    return Check("all-reduce", "go", text)


def link_speed(destination: str) -> str | None:
    """The interface this node uses towards `destination` and its speed, as the kernel reports it."""
    try:
        address = socket.gethostbyname(destination)
        route = subprocess.run(["ip", "-o", "route", "get", address], capture_output=True, text=True,
                               timeout=5).stdout.split()
        device = route[route.index("dev") + 1]
        speed = int((Path("/sys/class/net") / device / "speed").read_text())
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None
    return f"{device} {speed} Mb/s = {speed / 8:.0f} MB/s" if speed > 0 else None


# ------------------------------------------------------------------------- the block
def run(slurm: bool | str = WHERE_SLURM_ANSWERS, partition: str | None = None, bandwidth: bool = True) -> list[Check]:
    """All checks; Slurm's where Slurm's commands are here (the default), required with `slurm=True`
    (none: no-go), skipped with `slurm=False`."""
    slurm = slurm_choice(slurm)
    partition = partition or value("COURSE_SLURM_PARTITION") or None
    checks = [check_versions(), check_proxies(), check_ports()]
    if slurm is False:
        return [*checks, Check("slurm", "skip", "Slurm checks not asked for")]
    state, shape = slurm_state(partition)
    if shape is None and slurm is True and state.level == "skip":
        state = Check("slurm", "no-go", "Slurm asked for, but sinfo is not on PATH", "load the Slurm module")
    checks.append(state)
    if shape is not None:
        checks.append(check_node_sharing(partition))
        checks += node_checks(shape, partition)
        if bandwidth:
            checks.append(bandwidth_check(shape, partition))
    return checks


def render(checks: list[Check]) -> str:
    """The block to paste into a ticket."""
    head = (f"TF HPC course doctor: {getpass.getuser()}@{platform.node()}, "
            f"{time.strftime('%Y-%m-%d %H:%M %Z')}, course {COURSE_DIR}")
    bad = [c for c in checks if c.level == "no-go"]
    warned = [c for c in checks if c.level == "warn"]
    verdict = (f"verdict: NO-GO ({len(bad)} check(s) failed: {', '.join(c.name for c in bad)})" if bad else
               f"verdict: GO ({sum(c.level == 'go' for c in checks)} passed, {len(warned)} warning(s))")
    return "\n".join([head, *(c.line() for c in checks), verdict])


def report(slurm: bool | str = WHERE_SLURM_ANSWERS, partition: str | None = None, bandwidth: bool = True) -> str:
    """The doctor's block, as `python -m helpers doctor` prints it (notebook 00 shows it)."""
    return render(run(slurm, partition, bandwidth))


def main(slurm: bool | str, partition: str | None, bandwidth: bool) -> int:
    checks = run(slurm, partition, bandwidth)
    print(render(checks), flush=True)
    return 1 if any(c.level == "no-go" for c in checks) else 0
