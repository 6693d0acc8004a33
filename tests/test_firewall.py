"""The centre's worker-port firewall (slurm/firewall: a Slurm prolog and epilog, nftables): the
port rule it follows is the course's, and on the local Slurm a classmate cannot reach a running
job's TensorFlow worker ports while the job's own workers still all-reduce through them.

TensorFlow 2.21's gRPC server listens on every interface whatever its cluster spec names
(grpc_server_lib.cc binds "0.0.0.0:<port>"; ServerDef and RPCOptions have no address to bind):
`test_a_tensorflow_server_listens_on_every_interface` measures it here.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers.slurm.nodes import node_address
from helpers.slurm.step import STEPS_PER_JOB, StepLayout, port_base
from helpers.commands.apt import apt_install
from tests.conftest import ROOT, squeue_empty
from tests.support.hub import unix_learners

FIREWALL = ROOT / "slurm" / "firewall"
NODES = ("node3", "node4")  # the local Slurm's partition cpu
PROBE = textwrap.dedent("""
    import socket, sys
    host, port = sys.argv[1], int(sys.argv[2])
    try:
        socket.create_connection((host, port), timeout=5).close()
        print("connected")
    except OSError as exc:
        print(type(exc).__name__)
""")


def _rule_ports(job: int, width_max: int, low: int, high: int) -> set[int]:
    """The ports slurm/firewall/rules.sh claims for `job`, as the shell computes them."""
    script = f'source "{FIREWALL / "rules.sh"}"; PORT_RANGE={low}-{high}; TASKS_PER_NODE={width_max}; job_ports {job}'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=True)
    blocks = (map(int, line.split()) for line in done.stdout.strip().splitlines())
    return {port for first, last in blocks for port in range(first, last + 1)}


@pytest.mark.parametrize("job, low, high", [(1250, 10000, 20000), (7, 10000, 20000), (123457, 20000, 32000),
                                             (99, 10000, 10020)])
def test_the_firewall_claims_every_port_the_course_gives_a_job(job, low, high):
    """helpers.slurm.step.port_base for steps 0-15 with 1-8 workers per node: each port inside the claim."""
    claimed = _rule_ports(job, 8, low, high)
    given = set()
    for width in range(1, 9):
        if (high - low + 1) // width < 1:
            break
        for step in range(STEPS_PER_JOB):
            layout = StepLayout(rank=0, nodes=("n1",), tasks=(width,), hosts=("n1",) * width, job_id=job,
                                step_id=step)
            base = port_base(layout, low, high)
            given |= set(range(base, base + width))
    assert given == claimed, sorted(given ^ claimed)[:20]


def test_a_tensorflow_server_listens_on_every_interface(tmp_path, report):
    """The reason for the firewall: a server whose cluster spec names 127.0.0.1 listens on the wildcard."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = ("import sys, subprocess, tensorflow as tf; port = int(sys.argv[1]); "
            "tf.distribute.Server(tf.train.ClusterSpec({'worker': [f'127.0.0.1:{port}']}), job_name='worker', "
            "task_index=0, start=True); "
            "print(subprocess.run(['ss', '-ltnH', f'sport = :{port}'], capture_output=True, text=True).stdout)")
    done = subprocess.run([sys.executable, "-c", code, str(port)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1000:]
    local = done.stdout.split()[3]
    report(f"test_firewall: a TF server for 127.0.0.1:{port} listens on {local}")
    assert local in (f"*:{port}", f"0.0.0.0:{port}", f"[::]:{port}"), done.stdout


# ------------------------------------------------------------------ on the local Slurm
def _firewall_or_say_why() -> None:
    """nft installed and working in a network namespace, or the test says why not (a failure in CI)."""
    def unavailable(why: str) -> None:
        if os.environ.get("CI"):
            pytest.fail(f"the firewall test must run in CI: {why}")
        pytest.skip(why)

    if os.geteuid() != 0:
        unavailable("the firewall needs root (nftables rules in the nodes' network namespaces)")
    if shutil.which("nft") is None:
        done = apt_install("nftables")
        if done.returncode != 0 or shutil.which("nft") is None:
            unavailable(f"nft is missing and apt-get install nftables failed: {done.stderr[-300:]}")
    name = f"cfw-probe-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        probe = subprocess.run(["ip", "netns", "exec", name, "nft", "-f", "-"], capture_output=True, text=True,
                               timeout=30, input="table inet t {\n set s { typeof meta skuid . tcp dport; flags interval; }\n"
                                                 " chain o { type filter hook output priority filter; tcp dport 1-2 "
                                                 "meta skuid . tcp dport @s accept; tcp dport 1-2 reject with tcp reset; }\n}\n")
    finally:
        subprocess.run(["ip", "netns", "delete", name], timeout=30)
    if probe.returncode != 0:
        unavailable(f"this kernel refuses the firewall's nftables rules: {probe.stderr.strip()[-300:]}")


LISTEN = textwrap.dedent("""
    import socket, sys, time
    server = socket.socket(socket.AF_INET6)
    server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # every interface, IPv4 and IPv6, as TensorFlow
    server.bind(("::", int(sys.argv[1])))
    server.listen(64)
    print("listening", flush=True)
    time.sleep(300)
""")


def test_the_prolog_admits_the_jobs_user_and_nodes_only_and_the_epilog_removes_it(tmp_path, report):
    """The prolog and epilog run as Slurm would run them (root, the job's variables), in a network
    namespace of their own with a second host on a veth pair: a worker of the learner's listens
    on the job's first port on every interface; the classmate reaches it before the prolog and
    after the epilog, and not between; the learner reaches it from the node, not from a host
    outside the job."""
    _firewall_or_say_why()
    job, ns, tag = 7, f"cfw-{secrets.token_hex(3)}", secrets.randbelow(200) + 20
    port = min(_rule_ports(job, 1, 10000, 20000))
    conf = tmp_path / "slurm.conf"  # for `scontrol show hostnames` only (no daemon reads it)
    conf.write_text("ClusterName=fw\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1 State=UNKNOWN\n"
                    "PartitionName=p Nodes=localhost\n")
    host_side, node_address = f"10.79.{tag}.1", f"10.79.{tag}.2"
    with unix_learners(2, prefix="fwn") as (learner, classmate):
        uid = subprocess.run(["id", "-u", learner["name"]], capture_output=True, text=True, check=True).stdout.strip()
        env = {"PATH": os.environ["PATH"], "SLURM_CONF": str(conf), "SLURM_JOB_ID": str(job), "SLURM_JOB_UID": uid,
               "SLURM_JOB_USER": learner["name"], "SLURM_JOB_NODELIST": "localhost", "SLURMD_NODENAME": "fwnode",
               "COURSE_FIREWALL_STATE": str(tmp_path / "state")}
        inside = ["ip", "netns", "exec", ns]
        subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
        listener = None
        try:
            veth = f"vcfw{tag}"
            for command in (["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
                            ["ip", "addr", "add", f"{host_side}/30", "dev", veth], ["ip", "link", "set", veth, "up"],
                            [*inside, "ip", "link", "set", "lo", "up"],
                            [*inside, "ip", "addr", "add", f"{node_address}/30", "dev", "eth0"],
                            [*inside, "ip", "link", "set", "eth0", "up"]):
                subprocess.run(command, check=True, timeout=30)
            listener = subprocess.Popen([*inside, "runuser", "-u", learner["name"], "--", "/usr/bin/python3", "-c",
                                         LISTEN, str(port)], stdout=subprocess.PIPE, text=True, cwd="/")
            assert listener.stdout.readline().strip() == "listening"

            def tries() -> dict[str, str]:
                def probe(prefix: list[str], user: str, host: str) -> str:
                    done = subprocess.run([*prefix, "runuser", "-u", user, "--", "/usr/bin/python3", "-c", PROBE, host,
                                           str(port)], capture_output=True, text=True, timeout=60, cwd="/")
                    return done.stdout.strip() or done.stderr.strip()[-200:]
                return {"classmate on the node -> 127.0.0.1": probe(inside, classmate["name"], "127.0.0.1"),
                        "classmate on the node -> ::1": probe(inside, classmate["name"], "::1"),
                        "classmate on the node -> its address": probe(inside, classmate["name"], node_address),
                        "classmate on another host": probe([], classmate["name"], node_address),
                        "learner on another host": probe([], learner["name"], node_address),
                        "learner on the node -> 127.0.0.1": probe(inside, learner["name"], "127.0.0.1"),
                        "learner on the node -> ::1": probe(inside, learner["name"], "::1")}

            before = tries()
            prolog = subprocess.run([*inside, str(FIREWALL / "prolog")], env=env, capture_output=True, text=True,
                                    timeout=60)
            assert prolog.returncode == 0, prolog.stderr
            during = tries()
            epilog = subprocess.run([*inside, str(FIREWALL / "epilog")], env=env, capture_output=True, text=True,
                                    timeout=60)
            assert epilog.returncode == 0, epilog.stderr
            tables = subprocess.run([*inside, "nft", "list", "tables"], capture_output=True, text=True, timeout=30).stdout
            after = tries()
        finally:
            if listener is not None:
                listener.kill()
                listener.wait(timeout=30)
            subprocess.run(["ip", "netns", "delete", ns], timeout=30)
    report(f"test_firewall: port {port} of job {job} in a namespace; with the prolog: "
           + "; ".join(f"{k}: {v}" for k, v in during.items())
           + f"; before the prolog and after the epilog every try connected: {set(before.values()) | set(after.values())}")
    assert set(before.values()) == {"connected"} and set(after.values()) == {"connected"}, (before, after)
    for what, result in during.items():
        expected = "connected" if what.startswith("learner on the node") else "ConnectionRefusedError"
        assert result == expected, (what, result, during)
    assert "course_firewall" not in tables, tables


@pytest.fixture
def firewall(slurm):
    """The local Slurm with the course's prolog and epilog installed, as a centre would (slurm.conf)."""
    _firewall_or_say_why()
    conf = Path(slurm["env"]["SLURM_CONF"])
    original = conf.read_text()
    conf.write_text(original + f"Prolog={FIREWALL / 'prolog'}\nEpilog={FIREWALL / 'epilog'}\nPrologFlags=Alloc\n")
    try:
        subprocess.run(["scontrol", "reconfigure"], env=slurm["env"], check=True, timeout=60)
        time.sleep(2)
        yield slurm
    finally:
        conf.write_text(original)
        subprocess.run(["scontrol", "reconfigure"], env=slurm["env"], timeout=60)
        time.sleep(2)
        for node in NODES:  # the prolog's records (root's /run): the epilog left only the lock
            state = Path("/run/course-firewall") / node
            if state.is_dir() and not list(state.glob("*.job")):
                shutil.rmtree(state)


def _in_node(node: str, user: str, *command: str) -> subprocess.CompletedProcess:
    """`command` as `user` in the network namespace of `node` (a process on that node)."""
    k = node.removeprefix("node")
    return subprocess.run(["nsenter", f"--net=/run/netns/cslurm-node{k}", "runuser", "-u", user, "--", *command],
                          capture_output=True, text=True, timeout=60, cwd="/")


def _connects(node: str | None, user: str, host: str, port: int) -> str:
    command = ["/usr/bin/python3", "-c", PROBE, host, str(port)]
    if node is None:  # the head (a login node): the host's own network
        done = subprocess.run(["runuser", "-u", user, "--", *command], capture_output=True, text=True, timeout=60, cwd="/")
    else:
        done = _in_node(node, user, *command)
    return done.stdout.strip() or done.stderr.strip()[-200:]


WORKER = textwrap.dedent("""
    import json, os, sys, time
    from helpers.strategy import make_strategy
    from helpers.resolver import describe
    strategy = make_strategy("multiworker", timeout_seconds=120)
    import tensorflow as tf
    resolver = strategy.cluster_resolver
    me = describe(resolver)
    total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(float(me["rank"] + 1))), axis=None)
    print(json.dumps({"rank": me["rank"], "address": me["address"], "sum": float(total)}), flush=True)
    deadline = time.monotonic() + 240
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.2)  # the ports stay open while the test probes them
""")


def test_a_classmate_cannot_reach_a_running_jobs_worker_ports(firewall, tmp_path, report):
    slurm = firewall
    with unix_learners(2, prefix="fw") as (learner, classmate):
        user, home = learner["name"], learner["home"]
        (home / "worker.py").write_text(WORKER)
        done_flag = home / "probed"
        script = home / "job.sh"
        script.write_text(f"#!/bin/bash\n#SBATCH -p cpu -N 2 --ntasks-per-node=1 -t 10 -o {home}/job.out\n"
                          f"srun {sys.executable} {home}/worker.py {done_flag}\n")
        subprocess.run(["chown", "-R", f"{user}:{user}", str(home)], check=True)
        sent = subprocess.run(["runuser", "-u", user, "--", "sbatch", "--parsable", str(script)], env=slurm["env"],
                              capture_output=True, text=True, timeout=60, cwd=str(home))
        assert sent.returncode == 0, sent.stderr
        job = sent.stdout.strip().split(";")[0]
        out = home / "job.out"
        try:
            deadline = time.monotonic() + 240
            while True:
                lines = [json.loads(x) for x in (out.read_text() if out.exists() else "").splitlines() if x.startswith("{")]
                if len(lines) == 2:
                    break
                if time.monotonic() > deadline:
                    logs = "".join(f"--- {log.name}\n" + log.read_text()[-1500:]
                                   for log in sorted((slurm["dir"] / "cluster").glob("slurmd-node[34].log")))
                    raise AssertionError((out.read_text() if out.exists() else "no job output") + logs)
                time.sleep(0.5)
            workers = sorted(lines, key=lambda w: w["rank"])
            host, port = workers[0]["address"].rsplit(":", 1)
            port = int(port)
            address = node_address(host)  # the nodes' names resolve inside their namespaces only
            tables = _in_node(host, "root", "nft", "list", "table", "inet", "course_firewall")
            other = NODES[1] if host == NODES[0] else NODES[0]
            tries = {
                "classmate on the login node (head) -> node address": _connects(None, classmate["name"], address, port),
                f"classmate on {host} (the job's node) -> 127.0.0.1": _connects(host, classmate["name"], "127.0.0.1", port),
                f"classmate on {host} -> ::1": _connects(host, classmate["name"], "::1", port),
                f"classmate on {host} -> node address": _connects(host, classmate["name"], address, port),
                f"classmate on {other} (the job's other node) -> {host}": _connects(other, classmate["name"], address, port),
                "classmate on node1 (not the job's) -> node address": _connects("node1", classmate["name"], address, port),
                f"learner on {host} -> 127.0.0.1": _connects(host, user, "127.0.0.1", port),
                f"learner on {other} -> {host}": _connects(other, user, address, port),
            }
            done_flag.touch()
        finally:
            subprocess.run(["scancel", job], env=slurm["env"], timeout=30)
        assert squeue_empty(slurm["env"], within=60)
        time.sleep(1)
        after = _in_node(host, "root", "nft", "list", "tables")
    lines_out = [f"{what}: {result}" for what, result in tries.items()]
    report(f"test_firewall: job {job}, rank 0 at {host}:{port}, all-reduce sum {workers[0]['sum']} on both ranks; "
           + "; ".join(lines_out) + f"; after the job, tables on {host}: {after.stdout.split() or 'none'}")
    print("\n".join(lines_out))
    assert tables.returncode == 0, f"no course_firewall table on {host} while the job ran: {tables.stderr}"
    assert [w["sum"] for w in workers] == [3.0, 3.0], workers
    for what, result in tries.items():
        expected = "connected" if what.startswith("learner") else "ConnectionRefusedError"
        assert result == expected, (what, result)
    assert "course_firewall" not in after.stdout, f"the epilog left the table: {after.stdout}"
