"""Jobs the lessons submit, on the local Slurm with simulated GPUs: other users kept off their nodes,
a clean environment from inside a server's job, and lesson 16's staging safe from other users.

Needs root (slurm/local/up) and a second Unix user; run under the shared lock.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.slurm.submit import job_environment, job_options
from tests.conftest import squeue_empty
from tests.support.notebooks import written_programs

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slurm
SERVER = {"SLURM_GPUS_ON_NODE": "1", "SLURM_JOB_GPUS": "0"}  # what a server job with a GPU sees


def _header(notebook: str, name: str) -> str:
    """The shebang and #SBATCH lines of a job script a lesson writes."""
    lines = written_programs(notebook)[name].splitlines()
    return "\n".join(l for l in lines if l.startswith(("#!", "#SBATCH"))) + "\n"


def _state(job: str, env: dict, want: str, within: float = 60) -> str:
    deadline = time.monotonic() + within
    while True:
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip()
        if state == want or time.monotonic() > deadline:
            return state
        time.sleep(0.3)


def _as(user: str, args: list[str], env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user, "--", "env", f"SLURM_CONF={env['SLURM_CONF']}", f"PATH={env['PATH']}",
                           *args], capture_output=True, text=True, timeout=timeout, cwd="/")


@pytest.mark.parametrize("how", ["as the lesson wrote it before", "with the class's options", "in the gpu layout"])
def test_a_lesson_08_job_keeps_another_user_off_its_nodes(slurm, other_user, tmp_path, report, how):
    """Lesson 08's job, its header and the options its notebook adds (a server with GPUs, layout
    node); while it runs, another user asks for a task on its node at once (`srun --immediate`)."""
    env = slurm["env"]
    header = _header("08_batch_job.ipynb", "{sbatch_file}")
    options = job_options({**SERVER, "COURSE_CLASS_LAYOUT": "gpu" if how == "in the gpu layout" else "node"})
    if how == "as the lesson wrote it before":  # the script and submission before: no exclusivity
        header = header.replace("#SBATCH --exclusive=user", "")
        options = [o for o in options if not o.startswith("--exclusive")]
    script = tmp_path / "job.sbatch"
    script.write_text(header + "sleep 120\n")
    job = subprocess.run(["sbatch", *options, "--parsable", "--nodes=2", "--output=/dev/null", str(script)], env=env,
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    try:
        assert _state(job_id, env, "RUNNING") == "RUNNING"
        shown = subprocess.run(["scontrol", "show", "job", "-d", "-o", job_id], env=env, capture_output=True, text=True).stdout
        began = time.monotonic()
        intruder = _as(other_user["name"], ["srun", "--immediate=5", "-w", "node1", "-n", "1", "-t", "1", "hostname"], env)
        waited = time.monotonic() - began
    finally:
        subprocess.run(["scancel", job_id], env=env, timeout=30)
    sharing = re.search(r"OverSubscribe=(\S+)", shown).group(1)
    gpus = re.search(r"JOB_GRES=gpu:(\d+)", shown)
    report(f"{Path(__file__).stem}: lesson 08's job {how} ({' '.join(options)}): OverSubscribe={sharing}, "
           f"JOB_GRES=gpu:{gpus and gpus.group(1)}; another user's srun on node1: exit {intruder.returncode} after "
           f"{waited:.1f} s ({(intruder.stdout + intruder.stderr).strip()[:120]!r})")
    assert gpus and gpus.group(1) == "2", shown  # one GPU per task, 2 tasks
    if how == "with the class's options":
        assert sharing == "USER"
        assert intruder.returncode != 0 and "node1" not in intruder.stdout, intruder.stdout + intruder.stderr
    else:  # before, and in the gpu layout (--oversubscribe undoes the script's --exclusive=user on purpose):
        # another user's task runs beside the job's TensorFlow ports
        assert sharing != "USER"
        assert intruder.returncode == 0 and intruder.stdout.strip() == "node1", intruder.stdout + intruder.stderr
    assert squeue_empty(env, within=30)


PARENT = r"""
import json, os, subprocess, sys, time
from helpers.slurm.submit import job_environment, job_options
child = '''#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=2
echo "ASKED $(scontrol show job -d -o $SLURM_JOB_ID | grep -oE ' (TRES|JOB_GRES)=[^ ]+' | tr -d '\\n')"
echo "ENV gpus_per_task=${SLURM_GPUS_PER_TASK:-} mem_per_node=${SLURM_MEM_PER_NODE:-} ntasks=${SLURM_NTASKS:-}"
srun sh -c 'echo "STEP $SLURMD_NODENAME CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-none}"'
'''
open("child.sbatch", "w").write(child)
found = {"server": {k: os.environ.get(k) for k in ("SLURM_GPUS_PER_TASK", "SLURM_MEM_PER_NODE", "SLURM_NTASKS",
                                                   "SLURM_GPUS_ON_NODE")}}
for how, options, env in (("inherited", [], dict(os.environ)), ("clean", job_options(), job_environment({}))):
    began = time.monotonic()
    done = subprocess.run(["sbatch", *options, "--wait", "--parsable", f"--output={how}.out", "child.sbatch"],
                          env=env, capture_output=True, text=True, timeout=120)
    out = open(f"{how}.out").read() if os.path.exists(f"{how}.out") else ""
    found[how] = {"options": options, "status": done.returncode, "stderr": done.stderr.strip()[-300:], "output": out,
                  "seconds": round(time.monotonic() - began, 1)}
print("CHILDREN " + json.dumps(found))
"""


def test_a_child_job_from_inside_a_server_job_gets_its_own_gpus(slurm, tmp_path, report):
    """A parent job shaped like a learner's server (2 tasks, a GPU each, --mem) submits the same
    child twice: with the environment it inherited, and with job_environment and job_options."""
    env = {**slurm["env"], "PYTHONPATH": str(ROOT)}
    (tmp_path / "parent.py").write_text(PARENT)
    done = subprocess.run(["sbatch", "--wait", "--parsable", "--nodes=1", "--ntasks=2", "--gpus-per-task=1", "--mem=1000",
                           "--output=parent.out", "--wrap", f"{sys.executable} parent.py"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    parent_out = (tmp_path / "parent.out").read_text() if (tmp_path / "parent.out").exists() else done.stderr
    assert done.returncode == 0, parent_out[-3000:]
    found = json.loads(next(l for l in parent_out.splitlines() if l.startswith("CHILDREN "))[9:])
    inherited, clean = found["inherited"], found["clean"]
    report(f"{Path(__file__).stem}: server job {found['server']}; child with the inherited environment: exit "
           f"{inherited['status']}, {_lines(inherited)}; child via job_environment + {' '.join(clean['options'])}: exit "
           f"{clean['status']}, {_lines(clean)}")
    assert clean["options"] == ["--exclusive=user", "--gpus-per-task=1"]
    assert clean["status"] == 0, clean
    assert "JOB_GRES=gpu:1" in clean["output"], clean["output"]
    assert re.search(r"STEP node\d CUDA_VISIBLE_DEVICES=\d", clean["output"]), clean["output"]
    assert "mem_per_node=1000 " not in clean["output"], clean["output"]  # not the server's memory
    # today's failure: the child's step asks for the server's GPU per task in a job that has none
    assert inherited["status"] != 0 or "JOB_GRES=gpu" not in inherited["output"], inherited
    assert "STEP " not in inherited["output"], inherited["output"]
    assert squeue_empty(slurm["env"], within=30)


def _lines(found: dict) -> str:
    return "; ".join(l.strip() for l in found["output"].splitlines() if l.startswith(("ASKED", "ENV", "STEP", "srun:")))[:400]


# ------------------------------------------------------------ lesson 16's staging
def _staging_job(tmp_path: Path, slurm: dict, reader: str, node_local: str | None = None,
                 sbcast: str = 'exec /usr/bin/sbcast "$@"') -> tuple[Path, dict]:
    """Lesson 16's read_shards.sbatch as the notebook writes it, two small shard files, and a stand-in
    reader (the test is about the staging) that lists the staged directory and each file's SHA-256 on
    its node, and the CUDA_VISIBLE_DEVICES its step sees. `sbcast` on the job's PATH logs each call to
    tmp_path/sbcast-calls, then does `sbcast`."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "read_shards.sbatch").write_text(written_programs("16_input_at_scale.ipynb")['"read_shards.sbatch"}'])
    shared = tmp_path / "shared"
    shared.mkdir()
    for k in range(2):
        (shared / f"part-{k}.tfrecord").write_bytes(os.urandom(4096))
    python = tmp_path / "reader"
    python.write_text("#!/bin/bash\n# read_shards.py --files DIR --out OUT\n"
                      "echo \"READER $SLURMD_NODENAME $(stat -c '%a %U' \"$3\") $(ls \"$3\" | tr '\\n' ' ')\"\n"
                      "echo \"COPY $SLURMD_NODENAME $(cd \"$3\" && sha256sum -- * | tr -s ' \\n' '  ')\"\n"
                      "echo \"GPUS $SLURMD_NODENAME [${CUDA_VISIBLE_DEVICES-unset}]\"\n" + reader)
    python.chmod(0o755)
    fakebin = tmp_path / "sbcast-bin"
    fakebin.mkdir()
    (fakebin / "sbcast").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "sbcast-calls"}\n{sbcast}\n')
    (fakebin / "sbcast").chmod(0o755)
    env = job_environment({"PYTHON": str(python), "SHARED": str(shared), "OUT": str(tmp_path / "out"),
                           "NODE_LOCAL": node_local or slurm["env"]["COURSE_NODE_LOCAL"]}, slurm["env"])
    env["PATH"] = f"{fakebin}:{env['PATH']}"
    return job_dir, env


def _copies(log: str, tmp_path: Path) -> tuple[dict, dict]:
    """Each node's staged files with their SHA-256 (the stand-in reader's COPY lines), and the shared files'."""
    import hashlib

    shared = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "shared").iterdir()}
    copies = {}
    for line in log.splitlines():
        if line.startswith("COPY "):
            node, *fields = line.split()[1:]
            copies[node] = dict(zip(fields[1::2], fields[0::2]))
    return copies, shared


def _gpus_seen(log: str) -> list[list[str]]:
    """Each node's CUDA_VISIBLE_DEVICES in the workers' step, as the stand-in reader printed it ("[unset]": unset)."""
    return sorted(l.split()[1:] for l in log.splitlines() if l.startswith("GPUS "))


def _sbcast_calls(tmp_path: Path) -> list[str]:
    calls = tmp_path / "sbcast-calls"
    return calls.read_text().splitlines() if calls.exists() else []


def _staged_copies(slurm: dict) -> list[str]:
    """The job directories on every node's own local disk (what slurm/local/up mounts on each node)."""
    return sorted(str(p.relative_to(slurm["dir"])) for p in (slurm["dir"] / "cluster").glob("local-node*/shards-*"))


def test_lesson_16_refuses_a_directory_another_user_planted(slurm, other_user, tmp_path, report):
    """Another user plants the directory the job would use, with a link to a file of the victim
    inside; the job refuses it, writes nothing through the link, and stages nothing."""
    job_dir, env = _staging_job(tmp_path, slurm, "")
    victim = tmp_path / "victim.txt"  # a file of the job's user
    victim.write_text("precious\n")
    planted = [slurm["dir"] / "cluster" / f"local-node{k}" / "planted" for k in (1, 2)]
    for directory in planted:
        made = _as(other_user["name"], ["sh", "-c", f"mkdir -m 777 {directory} && ln -s {victim} {directory}/part-0.tfrecord"],
                   slurm["env"])
        assert made.returncode == 0, made.stderr
    # the name the job draws at random is, this once, the planted one
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    (fakebin / "mktemp").write_text(f"#!/bin/sh\necho {slurm['env']['COURSE_NODE_LOCAL']}/planted\n")
    (fakebin / "mktemp").chmod(0o755)
    env["PATH"] = f"{fakebin}:{env['PATH']}"
    done = subprocess.run(["sbatch", "--wait", "--parsable", "--nodes=2", "--ntasks=2", "read_shards.sbatch"],
                          cwd=job_dir, env=env, capture_output=True, text=True, timeout=180)
    log = next(job_dir.glob("tf-shards-*.out")).read_text()
    report(f"{Path(__file__).stem}: lesson 16 with a planted directory: "
           f"{[l for l in log.splitlines() if 'error' in l]}; the victim's file: {victim.read_text()!r}")
    # the job's exit status, from its log (sbatch --wait can miss a job that ended within a second)
    assert "could not make a new directory of your own" in log, log
    assert victim.read_text() == "precious\n", "sbcast wrote through the planted link"
    assert "READER" not in log and "STAGED" not in log, log
    try:
        assert all(sorted(p.name for p in d.iterdir()) == ["part-0.tfrecord"] for d in planted)
    finally:  # the suite's cluster is shared by the tests after this one (lesson 16's own run counts what is staged)
        for directory in planted:
            shutil.rmtree(directory, ignore_errors=True)


def test_lesson_16_stages_once_where_the_nodes_share_one_directory(slurm, tmp_path, report):
    """`slurm/local/up` as docs/slurm.md offers it, without COURSE_NODE_LOCAL: every node's /tmp is the
    same directory. Each node made the job's directory in turn, and the second's `mkdir` failed ("File
    exists ... could not make a new directory of your own", `make course`'s lesson 16). Now the first
    makes it, the others find it theirs, and the files are copied once; both workers read them, and the
    copy is gone at the end."""
    shared_local = tmp_path / "one-tmp-for-all"
    shared_local.mkdir()
    job_dir, env = _staging_job(tmp_path, slurm, "", node_local=str(shared_local))
    done = subprocess.run(["sbatch", "--wait", "--parsable", "--nodes=2", "--ntasks=2", "read_shards.sbatch"],
                          cwd=job_dir, env=env, capture_output=True, text=True, timeout=180)
    log = next(job_dir.glob("tf-shards-*.out")).read_text()
    readers = sorted(l for l in log.splitlines() if l.startswith("READER "))
    report(f"{Path(__file__).stem}: lesson 16 on nodes sharing one directory: {readers}; "
           f"{[l for l in log.splitlines() if l.startswith(('STAGED', 'error'))]}; left: {list(shared_local.iterdir())}; "
           f"CUDA_VISIBLE_DEVICES in the workers' step: {_gpus_seen(log)}")
    assert done.returncode == 0 and "could not make" not in log, log
    assert [l.split()[1:4] for l in readers] == [["node1", "700", "root"], ["node2", "700", "root"]], log
    assert all(l.split()[4:] == ["part-0.tfrecord", "part-1.tfrecord"] for l in readers), log
    assert re.search(r"^STAGED 2 nodes \d+ ms \(one cp, one directory for all nodes\)$", log, re.M), log
    copies, shared = _copies(log, tmp_path)
    assert copies == {"node1": shared, "node2": shared} and len(shared) == 2, (copies, shared)
    assert _sbcast_calls(tmp_path) == [], "one directory for all nodes: copied with cp, not sent with sbcast"
    # twentieth review, finding 1: the script's export never reached the step (Slurm unsets it in a step with no GPU)
    assert _gpus_seen(log) == [["node1", "[]"], ["node2", "[]"]], f"the workers should see no GPU: {_gpus_seen(log)}"
    assert list(shared_local.iterdir()) == [], "the job should remove its copy"
    assert squeue_empty(slurm["env"], within=30)


def test_lesson_16_copies_are_private_and_gone_at_the_end_and_on_scancel(slurm, tmp_path, report):
    """Each node's own local disk (COURSE_NODE_LOCAL): the job script's sbcast branch. One sbcast (of a
    tar of the files, not one per file: man sbcast, PERFORMANCE) from the batch node to another name,
    unpacked on every node: each node's copy holds every shared file, byte for byte, in a directory of
    mode 700; gone at the end, unseen from the login side, and gone on scancel."""
    job_dir, env = _staging_job(tmp_path, slurm, "")
    done = subprocess.run(["sbatch", "--wait", "--parsable", "--nodes=2", "--ntasks=2", "read_shards.sbatch"],
                          cwd=job_dir, env=env, capture_output=True, text=True, timeout=180)
    log = next(job_dir.glob("tf-shards-*.out")).read_text()
    assert done.returncode == 0, log
    assert "User defined signal" not in log, log  # the cleaner step's own output is dropped
    readers = sorted(l for l in log.splitlines() if l.startswith("READER "))
    assert [l.split()[1:4] for l in readers] == [["node1", "700", "root"], ["node2", "700", "root"]], log
    assert all(l.split()[4:] == ["part-0.tfrecord", "part-1.tfrecord"] for l in readers), log
    assert re.search(r"^STAGED 2 nodes \d+ ms \(one sbcast of a tar\)$", log, re.M), log
    copies, shared = _copies(log, tmp_path)
    assert copies == {"node1": shared, "node2": shared} and len(shared) == 2, (copies, shared)
    calls = _sbcast_calls(tmp_path)
    assert len(calls) == 1 and calls[0].endswith("/shards.tar"), calls  # one sbcast, of the tar
    gpus_seen = _gpus_seen(log)
    left_at_end = _staged_copies(slurm)

    (tmp_path / "cancelled").mkdir()
    job_dir, env = _staging_job(tmp_path / "cancelled", slurm, "sleep 300\n")
    job = subprocess.run(["sbatch", "--parsable", "--nodes=2", "--ntasks=2", "read_shards.sbatch"], cwd=job_dir, env=env,
                         capture_output=True, text=True, timeout=60).stdout.strip().split(";")[0]
    deadline = time.monotonic() + 90
    while len(_staged_copies(slurm)) < 2 or "READER" not in "".join(p.read_text() for p in job_dir.glob("*.out")):
        assert time.monotonic() < deadline, f"the copies were not staged: {list(job_dir.glob('*.out'))}"
        time.sleep(0.3)
    staged = _staged_copies(slurm)
    # each node's copy is on that node's own disk: the login side's mount point (the same path) stays empty
    seen_outside = sorted(p.name for p in Path(slurm["env"]["COURSE_NODE_LOCAL"]).iterdir())
    began = time.monotonic()
    subprocess.run(["scancel", job], env=slurm["env"], timeout=30)
    while _staged_copies(slurm) and time.monotonic() - began < 60:
        time.sleep(0.2)
    gone_s = time.monotonic() - began
    report(f"{Path(__file__).stem}: lesson 16 staging to node-local disks: {readers}; sbcast calls {calls}; "
           f"{[l for l in log.splitlines() if l.startswith('STAGED')]}; left after a normal end: {left_at_end}; "
           f"staged {staged}, {'gone' if not _staged_copies(slurm) else 'still there'} {gone_s:.1f} s after scancel; "
           f"CUDA_VISIBLE_DEVICES in the workers' step (nodes with GPUs): {gpus_seen}")
    assert left_at_end == [], log
    # twentieth review, finding 1: an `export CUDA_VISIBLE_DEVICES=` in the script printed [unset] on every node (Slurm
    # 22.05 unsets it in a step with no GPU), so a CUDA TensorFlow would see every GPU of the node
    assert gpus_seen == [["node1", "[]"], ["node2", "[]"]], f"the workers should see no GPU: {gpus_seen}\n{log}"
    assert seen_outside == [], f"the staged copies should not be visible outside the nodes: {seen_outside}"
    cancelled_log = "".join(p.read_text() for p in job_dir.glob("*.out"))
    assert not _staged_copies(slurm), f"scancel left the copies: {_staged_copies(slurm)}\n{cancelled_log}"
    assert squeue_empty(slurm["env"], within=30)


@pytest.mark.parametrize("broken", ["no files in SHARED", "sbcast fails"])
def test_lesson_16_job_that_fails_early_ends_promptly_and_leaves_no_copy(slurm, tmp_path, report, broken):
    """A wrong SHARED path stops the job before it makes anything; a copy that fails half-way
    (sbcast fails: planted on the job's PATH, after the tar was made) exits at once, when the cleaner
    step may not have started yet: the job still ends within seconds, not at its time limit, and
    removes its directories."""
    failing = 'echo "sbcast: error: planted failure" >&2; exit 1'
    job_dir, env = _staging_job(tmp_path, slurm, "", **({"sbcast": failing} if broken == "sbcast fails" else {}))
    if broken == "no files in SHARED":
        env["SHARED"] = str(tmp_path / "no-such-dir")
    began = time.monotonic()
    done = subprocess.run(["sbatch", "--wait", "--parsable", "--nodes=2", "--ntasks=2", "read_shards.sbatch"],
                          cwd=job_dir, env=env, capture_output=True, text=True, timeout=400)
    ended_s = time.monotonic() - began
    log = "".join(p.read_text() for p in job_dir.glob("tf-shards-*.out"))
    report(f"{Path(__file__).stem}: lesson 16, {broken}: job ended in {ended_s:.1f} s, "
           f"copies left {_staged_copies(slurm)}, {[l for l in log.splitlines() if 'error' in l][:2]}")
    # the script's own bounds (10 s resending USR1, a removal step of at most 60 s) end it in about a
    # minute; a job that held its nodes would run to its 20-minute limit: 300 s tells them apart under load
    assert ended_s < 300, f"the job held its nodes {ended_s:.0f} s:\n{log}"
    assert "STAGED" not in log and "READER" not in log, log
    if broken == "no files in SHARED":
        assert "no .tfrecord file in SHARED" in log, log
    else:
        assert "planted failure" in log and len(_sbcast_calls(tmp_path)) == 1, log
    assert not _staged_copies(slurm), f"the failed job left copies: {_staged_copies(slurm)}\n{log}"
    assert squeue_empty(slurm["env"], within=30)


def test_the_doctor_reads_node_sharing_from_slurm(slurm, monkeypatch, report):
    from helpers import doctor

    for name in ("SBATCH_RESERVATION", "SLURM_JOB_RESERVATION", "COURSE_CLASS_LAYOUT"):
        monkeypatch.delenv(name, raising=False)
    before = doctor.check_node_sharing(None)
    subprocess.run(["scontrol", "update", "PartitionName=cpu", "ExclusiveUser=YES"], env=slurm["env"], check=True, timeout=30)
    try:
        after = doctor.check_node_sharing("cpu")
    finally:
        subprocess.run(["scontrol", "update", "PartitionName=cpu", "ExclusiveUser=NO"], env=slurm["env"], timeout=30)
    report(f"{Path(__file__).stem}: doctor on the local Slurm: {before.line().strip()} | after ExclusiveUser=YES: "
           f"{after.line().strip()}")
    assert before.level == "go" and "partition debug lets users share nodes" in before.detail, before
    assert after.level == "go" and "partition cpu is ExclusiveUser=YES" in after.detail, after
