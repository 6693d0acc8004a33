"""Multi-worker TensorFlow where other users are: refused on a login node (and wherever that cannot
be ruled out: it fails closed), allowed on a laptop, on an allocation's own nodes, or when the
machine's only user says so.

Each case builds the machine it needs: PATH holds only a directory of fake Slurm commands, the
configuration files the check looks for are moved into a temporary directory, and no Slurm or
module variable is left in the environment.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from helpers.slurm import login_node
from helpers.errors import CourseError
from helpers.local_workers import run_local_workers

SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURMD_NODENAME", "SLURM_CONF",
                   "MODULEPATH", "COURSE_LOCAL_WORKERS", *login_node.MODULE_VARIABLES)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A machine with no Slurm, outside any allocation; `machine.sinfo(script)` adds a fake sinfo,
    `machine.config` is where the check looks for slurm.conf."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))  # not /usr/bin: a real sinfo may be installed there
    for name in SLURM_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "etc" / "slurm" / "slurm.conf"
    monkeypatch.setattr(login_node, "CONFIG_FILES", (str(config),))

    class Machine:
        def sinfo(self, body: str) -> None:
            script = bin_dir / "sinfo"
            script.write_text(f"#!/bin/sh\n{body}\n")
            script.chmod(0o755)
    Machine.config = config
    return Machine()


def _refused(what: str = "2 local workers") -> str:
    with pytest.raises(CourseError) as raised:
        login_node.check_local_workers(what)
    return str(raised.value)


def test_local_workers_are_refused_where_slurm_answers_outside_an_allocation(machine):
    machine.sinfo("echo debug")
    with pytest.raises(CourseError, match=r"login node\?.*sinfo answers.*COURSE_ENGINES=slurm.*COURSE_LOCAL_WORKERS"
                                          r"=allow.*never on a login node"):
        run_local_workers(["-c", "pass"], 2, deadline_s=30)
    from helpers.engines import start_engines

    with pytest.raises(CourseError, match="2 local engines would run multi-worker TensorFlow here"):
        start_engines(2)


def test_salloc_shell_on_the_login_node_is_not_a_compute_node(machine, monkeypatch, report):
    """salloc sets SLURM_JOB_ID, but its shell stays where salloc ran: the job id proves nothing."""
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    monkeypatch.setattr(socket, "gethostname", lambda: "login1.cluster")
    message = _refused()
    assert "not a node of Slurm job 42 (node[1-2])" in message and "login1" in message, message
    with pytest.raises(CourseError, match="salloc leaves its shell on the login node"):
        run_local_workers(["-c", "pass"], 2, deadline_s=30)
    monkeypatch.delenv("SLURM_JOB_NODELIST")  # no node list at all: not provably a node either
    _refused()
    report(f"{__name__.rsplit('.', 1)[-1]}: salloc shell on login1 refused: {message}")


@pytest.mark.parametrize("setting", ["SLURM_CONF", "slurm.conf", "module variable", "modulefile"])
def test_a_slurm_configuration_without_sinfo_on_path_counts_as_a_cluster(machine, monkeypatch, tmp_path, setting):
    """Slurm loaded as a module, or its commands elsewhere: no sinfo on PATH does not mean no cluster."""
    if setting == "SLURM_CONF":
        monkeypatch.setenv("SLURM_CONF", "/somewhere/slurm.conf")
    elif setting == "slurm.conf":
        machine.config.parent.mkdir(parents=True)
        machine.config.write_text("ClusterName=site\n")
    elif setting == "module variable":
        monkeypatch.setenv("EBROOTSLURM", "/apps/slurm/23.02")
    else:
        modules = tmp_path / "modulefiles"
        (modules / "slurm").mkdir(parents=True)
        (modules / "slurm" / "23.02.lua").write_text("prepend_path('PATH', '/apps/slurm/bin')\n")
        monkeypatch.setenv("MODULEPATH", f"{tmp_path / 'nothing'}:{modules}")
    message = _refused()
    assert {"SLURM_CONF": "SLURM_CONF is set", "slurm.conf": f"{machine.config} exists",
            "module variable": "EBROOTSLURM is set", "modulefile": "a Slurm module slurm in"}[setting] in message, message


@pytest.mark.parametrize("failure", ["hangs", "controller down"])
def test_an_sinfo_that_hangs_or_finds_a_dead_controller_counts_as_a_cluster(machine, monkeypatch, failure, report):
    hang_s = 60.0  # what the check would take if it waited for sinfo: far beyond any load's slowness
    if failure == "hangs":
        machine.sinfo(f"exec /bin/sleep {hang_s:.0f}")
    else:
        machine.sinfo("echo 'slurm_load_partitions: Unable to contact slurm controller (connect failure)' >&2; exit 1")
    monkeypatch.setattr(login_node, "SINFO_TIMEOUT_S", 0.5)
    started = time.monotonic()
    message = _refused()
    took = time.monotonic() - started
    expected = "sinfo did not answer within 0.5 s" if failure == "hangs" else "Unable to contact slurm controller"
    assert expected in message, message
    assert took < hang_s, f"the check took {took:.1f} s: it waited for sinfo instead of its 0.5 s deadline"
    report(f"{__name__.rsplit('.', 1)[-1]}: sinfo {failure}: refused in {took:.2f} s")


@pytest.mark.parametrize("where", ["no slurm", "sinfo without configuration", "batch job or step",
                                   "allocation node by name", "opted in on a cluster"])
def test_local_workers_run_on_a_laptop_an_allocation_node_or_when_allowed(machine, monkeypatch, where):
    if where == "sinfo without configuration":  # Slurm's commands installed, nothing configured
        machine.sinfo("echo 'sinfo: fatal: Could not establish a configuration source' >&2; exit 1")
    elif where == "batch job or step":
        monkeypatch.setenv("SLURM_JOB_ID", "42")
        monkeypatch.setenv("SLURMD_NODENAME", "node1")
        machine.sinfo("echo debug")
    elif where == "allocation node by name":
        host = socket.gethostname().split(".")[0]
        monkeypatch.setenv("SLURM_JOB_ID", "42")
        monkeypatch.setenv("SLURM_JOB_NODELIST", f"other[1-3],{host}")
        machine.sinfo("echo debug")
    elif where == "opted in on a cluster":
        monkeypatch.setenv("COURSE_LOCAL_WORKERS", "allow")
        monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    outcomes = run_local_workers(["-c", "import os; print(os.environ['TF_CONFIG'][:12])"], 2, deadline_s=60)
    assert [o.returncode for o in outcomes] == [0, 0], [o.output for o in outcomes]


@pytest.mark.parametrize("listed, names", [
    ("node1", ["node1"]),
    ("node[1-3,7]", ["node1", "node2", "node3", "node7"]),
    ("gpu[08-10],login", ["gpu08", "gpu09", "gpu10", "login"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("a[1],b[2-3].site", ["a1", "b2.site", "b3.site"]),
])
def test_node_lists_expand_as_scontrol_show_hostnames_does(listed, names):
    assert login_node.expand_hostlist(listed) == names


@pytest.mark.parametrize("listed", ["node[1-", "node[a-b]", "node]1["])
def test_an_unreadable_node_list_proves_no_node(machine, monkeypatch, listed):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NODELIST", listed)
    assert not login_node.on_allocation_node()
    _refused()


def test_this_host_in_a_compressed_node_list_is_a_node(monkeypatch):
    for name in ("SLURMD_NODENAME", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu09.cluster.example")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[08-10]")
    assert login_node.on_allocation_node()
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[1-8,10]")
    assert not login_node.on_allocation_node()
    assert os.environ.get("SLURMD_NODENAME") is None


@pytest.mark.slurm
def test_on_the_local_slurm_the_salloc_shell_is_refused_and_the_jobs_step_allowed(slurm, report):
    """What Slurm really sets: salloc's command runs where salloc ran (this host, not node1) with
    SLURM_JOB_ID; an srun step of the same allocation runs on node1 with SLURMD_NODENAME."""
    import subprocess
    import sys

    code = ("from helpers.slurm.login_node import check_local_workers\n"
            "check_local_workers('2 local workers')\nprint('ALLOWED')")
    env = {k: v for k, v in slurm["env"].items() if k != "COURSE_LOCAL_WORKERS"}
    shell = subprocess.run(["salloc", "-N", "1", "-n", "1", "--time=2", sys.executable, "-c", code], env=env,
                           capture_output=True, text=True, timeout=120)
    step = subprocess.run(["salloc", "-N", "1", "-n", "1", "--time=2", "srun", "-n", "1", sys.executable, "-c", code],
                          env=env, capture_output=True, text=True, timeout=120)
    refusal = next((line for line in shell.stderr.splitlines() if "not a node" in line), shell.stderr[-300:])
    report(f"{__name__.rsplit('.', 1)[-1]}: salloc shell: {refusal[:160]} | its srun step: {step.stdout.strip()}")
    assert shell.returncode != 0 and "which is not a node of Slurm job" in shell.stderr, shell.stdout + shell.stderr
    assert step.returncode == 0 and step.stdout.strip() == "ALLOWED", step.stdout + step.stderr
