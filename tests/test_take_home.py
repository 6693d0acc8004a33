"""helpers/take_home/mwms_slurm.py, the job programs' one plumbing file: no notebook cell keeps a copy of it, it
agrees with the course's own Slurm step and all-reduce rule, and its start-up all-reduce ends at its deadline.

The planted checks show that each test can fail: a notebook with a copy, a renamed copy and a duplicated body;
a rule that disagrees; a worker that never joins the all-reduce.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.take_home import MODULE, copy_beside
from helpers.take_home import mwms_slurm

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
PLUMBING = {"slurm_hosts", "tf_config_from_slurm", "set_tf_config_from_slurm", "choose_gpus", "all_reduce_for",
            "fix_keras_fit_for_multiworker", "make_strategy", "all_reduce_with_deadline"}
SAME_BODY_FROM = 3  # statements: a body this long in two cells is plumbing copied, not a one-line helper
PYTHON_MAGICS = ("%%writefile", "%%px", "%%time", "%%capture", "%%timeit")


# ------------------------------------------------------------------ no notebook cell holds the plumbing
def cell_trees(notebook: Path):
    """(cell index, ast) of every code cell that is Python: plain cells, %%px and %%writefile programs
    (a file that does not parse as Python, an sbatch script, is left out), magics and shell lines blanked."""
    for index, cell in enumerate(json.loads(notebook.read_text())["cells"]):
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        if lines and lines[0].startswith("%%"):
            if not lines[0].startswith(PYTHON_MAGICS):
                continue
            lines = lines[1:]
        try:
            yield index, ast.parse("\n".join("" if l.lstrip().startswith(("%", "!")) else l for l in lines))
        except SyntaxError:
            continue


def body_key(function: ast.FunctionDef) -> tuple[int, str]:
    """A function's body without its docstring: (statements, its ast as text)."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len(body), ast.dump(ast.Module(body=body, type_ignores=[]))


def module_bodies() -> dict[str, str]:
    tree = ast.parse(MODULE.read_text())
    return {body_key(node)[1]: node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


def plumbing_in_cells(notebooks: list[Path]) -> list[str]:
    """What the cells of `notebooks` hold that belongs in mwms_slurm.py: a function named as one of its own, a
    function with the body of one of its functions (renamed), and a body of 3 statements or more in two cells."""
    found, seen, module = [], {}, module_bodies()
    for notebook in notebooks:
        for index, tree in cell_trees(notebook):
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                where = f"{notebook.name} cell {index}: def {node.name}"
                statements, key = body_key(node)
                if node.name in PLUMBING:
                    found.append(f"{where} (mwms_slurm.py has it)")
                elif key in module:
                    found.append(f"{where} (the body of mwms_slurm.{module[key]})")
                if statements >= SAME_BODY_FROM:
                    first = seen.setdefault(key, where)
                    if first.split(": def")[0] != where.split(": def")[0]:
                        found.append(f"{where} (the body of {first})")
    return found


def test_no_notebook_cell_defines_the_job_plumbing_or_holds_it_twice(report):
    notebooks = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert len(notebooks) >= 19
    found = plumbing_in_cells(notebooks)
    assert not found, "\n".join(found)
    report(f"{len(notebooks)} notebooks: no cell defines {sorted(PLUMBING)} nor holds a function body of "
           f"{SAME_BODY_FROM}+ statements twice")


def _notebook(path: Path, *sources: str) -> Path:
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": s} for s in sources]
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": "x"}, *cells]}))
    return path


def test_the_plumbing_check_finds_a_copy_a_renamed_copy_and_a_duplicate(tmp_path):
    import inspect

    hosts = inspect.getsource(mwms_slurm.slurm_hosts).replace("def slurm_hosts", "def where_ranks_run")
    body = "def digest(model):\n    a = 1\n    b = 2\n    return a + b\n"
    planted = [_notebook(tmp_path / "01_a.ipynb", "%%writefile {script}\nimport os\n\n\n"
                         + inspect.getsource(mwms_slurm.tf_config_from_slurm), hosts, body),
               _notebook(tmp_path / "02_b.ipynb", "%%bash\necho def make_strategy", body.replace("digest", "other"))]
    found = plumbing_in_cells(planted)
    assert found == ["01_a.ipynb cell 1: def tf_config_from_slurm (mwms_slurm.py has it)",
                     "01_a.ipynb cell 2: def where_ranks_run (the body of mwms_slurm.slurm_hosts)",
                     "02_b.ipynb cell 2: def other (the body of 01_a.ipynb cell 3: def digest)"], found


def test_the_module_imports_only_the_standard_library_at_import_and_nothing_of_the_course(tmp_path):
    """TensorFlow and Keras inside the functions that use them: a script's --plan answers without them."""
    tree = ast.parse(MODULE.read_text())
    top = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    anywhere = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    anywhere |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert top <= set(sys.stdlib_module_names) and not any(isinstance(n, ast.ImportFrom) for n in tree.body), top
    assert anywhere - set(sys.stdlib_module_names) == {"tensorflow", "keras"}, anywhere
    copy = copy_beside(tmp_path / "job")
    assert copy == tmp_path / "job" / "mwms_slurm.py" and copy.read_text() == MODULE.read_text()
    (tmp_path / "job" / "train.py").write_text("import sys\nimport mwms_slurm\n"
                                               "print(mwms_slurm.__file__, 'tensorflow' in sys.modules, 'keras' in sys.modules)\n")
    done = subprocess.run([sys.executable, str(tmp_path / "job" / "train.py")], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.stdout.split() == [str(copy), "False", "False"], done.stdout + done.stderr


def test_keras_fix_applies_the_modules_patch_with_its_own_checks():
    """helpers.keras_fix holds no patch of its own: apply() installs mwms_slurm's functions."""
    from helpers import keras_fix

    code = [n for n in ast.parse(Path(keras_fix.__file__).read_text()).body if isinstance(n, ast.FunctionDef)]
    assert [n.name for n in code] == ["keras_needs_fix", "apply"], [n.name for n in code]
    assert keras_fix.VERIFIED == mwms_slurm.VERIFIED_KERAS
    probe = ("from helpers import keras_fix\nassert keras_fix.apply()\n"
             "from keras.src.backend.tensorflow import trainer\n"
             "for f in (trainer.reduce_per_replica, trainer.TensorFlowTrainer._maybe_symbolic_build):\n"
             "    print(f.__module__, f.__qualname__)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=240, cwd=ROOT,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.stdout.splitlines() == [
        "helpers.take_home.mwms_slurm fix_keras_fit_for_multiworker.<locals>.reduce_per_replica",
        "helpers.take_home.mwms_slurm fix_keras_fit_for_multiworker.<locals>.symbolic_build"], done.stdout + done.stderr


# ------------------------------------------------------------------ make_strategy's rule, on planted devices
class _Planted:
    """Stand-ins for tf.config and MultiWorkerMirroredStrategy: what make_strategy asked of them."""

    def __init__(self, monkeypatch, gpus: int, workers: list[str]):
        import tensorflow as tf

        self.calls, self.checked = [], []
        devices = [tf.config.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU") for i in range(gpus)]
        monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: devices if kind == "GPU" else [])
        monkeypatch.setattr(tf.config.experimental, "set_memory_growth",
                            lambda device, on: self.calls.append(("growth", device.name, on)))
        monkeypatch.setattr(tf.config, "set_logical_device_configuration", lambda device, logical: self.calls.append(
            ("logical", device.name, [d.memory_limit for d in logical])))
        spec = SimpleNamespace(as_dict=lambda: {"worker": workers})
        resolver = SimpleNamespace(cluster_spec=lambda: spec)
        monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", lambda communication_options: SimpleNamespace(
            options=communication_options, cluster_resolver=resolver))
        monkeypatch.setattr(mwms_slurm, "all_reduce_with_deadline", lambda strategy, timeout: self.checked.append(timeout))


@pytest.fixture
def clean_env(monkeypatch):
    for name in [k for k in os.environ if k.startswith("SLURM") or k in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES",
                                                                         "COURSE_GPU_MEMORY_MIB")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}))
    return monkeypatch


ONE_NODE, TWO_NODES = ["node1:20000", "node1:20001"], ["node1:20000", "node2:20000"]


@pytest.mark.parametrize("workers", [ONE_NODE, TWO_NODES], ids=["one node", "two nodes"])
@pytest.mark.parametrize("share", [None, "2048"], ids=["own GPUs", "memory share"])
@pytest.mark.parametrize("gpus", [0, 1, 4])
def test_make_strategy_sets_memory_then_the_all_reduce_and_checks_it_across_nodes(clean_env, gpus, share, workers):
    """GPU memory first (a share: one logical GPU of that many MiB per GPU; else growth), NCCL only on GPUs of the
    worker's own, RING otherwise; the start-up all-reduce only across nodes over NCCL; the course's rule agrees."""
    from helpers import strategy as course

    if share:
        clean_env.setenv("COURSE_GPU_MEMORY_MIB", share)
    planted = _Planted(clean_env, gpus, workers)
    made = mwms_slurm.make_strategy(timeout_seconds=7.5, start_timeout_seconds=42)
    names = [f"/physical_device:GPU:{i}" for i in range(gpus)]
    expected_memory = [("logical", n, [2048]) for n in names] if share else [("growth", n, True) for n in names]
    assert planted.calls == expected_memory
    nccl = bool(gpus) and not share
    assert made.options.implementation.name == ("NCCL" if nccl else "RING")
    assert made.options.timeout_seconds == 7.5  # every collective's, as given
    assert planted.checked == ([42] if nccl and workers == TWO_NODES else [])
    assert mwms_slurm.all_reduce_for(gpus) == made.options.implementation.name  # what --plan prints
    # the course's processes: the same GPUs visible (CUDA_VISIBLE_DEVICES), a TensorFlow that can use them
    if gpus:
        clean_env.setenv("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(gpus))))
    clean_env.setattr(course, "tensorflow_is_cpu_build", lambda: False)
    assert course.collective_for_this_process(gpus=gpus) == made.options.implementation.name


def test_the_rule_check_fails_on_a_rule_that_disagrees(clean_env):
    """Planted: a module that keeps NCCL on a shared GPU fails the comparison with the course's rule."""
    from helpers import strategy as course

    clean_env.setenv("COURSE_GPU_MEMORY_MIB", "2048")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "0")
    clean_env.setattr(course, "tensorflow_is_cpu_build", lambda: False)
    clean_env.setattr(mwms_slurm, "all_reduce_for", lambda gpus: "NCCL" if gpus else "RING")
    _Planted(clean_env, 1, ONE_NODE)
    made = mwms_slurm.make_strategy()
    assert made.options.implementation.name != course.collective_for_this_process(gpus=1)


# ------------------------------------------------------------------ the start-up all-reduce, two CPU workers
WORKER = """
import json, os, sys, time
import mwms_slurm
strategy = mwms_slurm.make_strategy()
import tensorflow as tf
rank, deadline, joins = strategy.cluster_resolver.task_id, float(sys.argv[1]), sys.argv[2] == "both"
report = {"rank": rank, "all_reduce": strategy.extended._communication_options.implementation.name}
if rank == 1 and not joins:  # alive, never joining: sleeps past the other's deadline
    time.sleep(deadline + 6)
    print("REPORT " + json.dumps(report), flush=True)
    os._exit(0)
began = time.monotonic()
try:
    report["sums"] = mwms_slurm.all_reduce_with_deadline(strategy, deadline)
except tf.errors.DeadlineExceededError as error:
    report["error"] = type(error).__name__
report["seconds"] = time.monotonic() - began
print("REPORT " + json.dumps(report), flush=True)
os._exit(0)
"""


def _two_workers(tmp_path: Path, deadline: float, joins: str) -> list[dict]:
    from helpers.resolver import free_port, make_tf_config

    copy_beside(tmp_path)
    (tmp_path / "worker.py").write_text(WORKER)
    addresses = [f"localhost:{free_port()}" for _ in range(2)]
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "worker.py"), str(deadline), joins], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                                                                        "TF_CONFIG": json.dumps(make_tf_config(addresses, r))})
             for r in range(2)]
    outputs, end = [], time.monotonic() + 120
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=max(1.0, end - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            proc.kill()
            outputs.append(proc.communicate()[0])
    reports = [json.loads(l[7:]) for out in outputs for l in out.splitlines() if l.startswith("REPORT ")]
    assert len(reports) == 2, "\n".join(o[-2000:] for o in outputs)
    return sorted(reports, key=lambda r: r["rank"])


def test_the_start_up_all_reduce_sums_the_replicas_over_ring(tmp_path, report):
    reports = _two_workers(tmp_path, 30, "both")
    assert [(r["all_reduce"], r["sums"]) for r in reports] == [("RING", [2.0])] * 2, reports
    report(f"start-up all-reduce, 2 CPU workers over RING: sums {[r['sums'] for r in reports]} "
           f"in {max(r['seconds'] for r in reports):.2f} s")


def test_the_start_up_all_reduce_ends_at_its_deadline_when_a_worker_never_joins(tmp_path, report):
    deadline = 3.0
    waiter = _two_workers(tmp_path, deadline, "one")[0]
    assert waiter.get("error") == "DeadlineExceededError", waiter
    assert deadline <= waiter["seconds"] < deadline + 5, waiter
    report(f"start-up all-reduce beside a worker that never joins: {waiter['error']} after {waiter['seconds']:.1f} s "
           f"(deadline {deadline:.0f} s)")


# ------------------------------------------------------------------ TF_CONFIG from a real Slurm step
PROBE = """
import json, os, sys
sys.path.insert(0, os.environ["TAKE_HOME_DIR"])
import mwms_slurm
from helpers.errors import CourseError
from helpers.slurm.step import step_layout
if os.environ.get("CLAIMED_DISTRIBUTION"):  # a task told the wrong distribution: both must refuse
    os.environ["SLURM_DISTRIBUTION"] = os.environ["CLAIMED_DISTRIBUTION"]
me = {"rank": int(os.environ["SLURM_PROCID"]), "node": os.environ["SLURMD_NODENAME"]}
try:
    layout = step_layout()
    me["course"] = {"hosts": list(layout.hosts), "workers": layout.workers(int(os.environ["MWMS_PORT_BASE"]))}
except CourseError as error:
    me["course"] = str(error)
try:
    config, hosts = mwms_slurm.tf_config_from_slurm()
    me["module"] = {"hosts": hosts, "config": config}
except SystemExit as stop:
    me["module"] = str(stop)
print("TASK " + json.dumps(me), flush=True)
"""


@pytest.mark.slurm
@pytest.mark.parametrize("distribution, claim", [("block", None), ("cyclic", None), ("cyclic", "block")],
                         ids=["block", "cyclic", "cyclic, told block"])
def test_tf_config_from_slurm_agrees_with_the_course_on_a_real_step(slurm, distribution, claim, report):
    """srun -N 2 -n 4 (2 tasks a node: without --ntasks-per-node Slurm put 3 on node1) on the local Slurm: every
    task's TF_CONFIG from mwms_slurm names the same workers, ports and rank as the course's own reading of the step
    (helpers.slurm.step), every rank on the node it ran on; a task told the wrong distribution stops in both."""
    env = {**slurm["env"], "MWMS_PORT_BASE": "23000", "TAKE_HOME_DIR": str(MODULE.parent),
           "PYTHONPATH": str(ROOT), **({"CLAIMED_DISTRIBUTION": claim} if claim else {})}
    done = subprocess.run(["srun", "--time=5", "-N", "2", "-n", "4", "--ntasks-per-node=2", f"--distribution={distribution}",
                           sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tasks = sorted((json.loads(l[5:]) for l in done.stdout.splitlines() if l.startswith("TASK ")), key=lambda t: t["rank"])
    assert [t["rank"] for t in tasks] == [0, 1, 2, 3], done.stdout
    expected = {"block": ["node1", "node1", "node2", "node2"], "cyclic": ["node1", "node2", "node1", "node2"]}[distribution]
    assert [t["node"] for t in tasks] == expected, tasks
    if claim:  # the ranks block would put elsewhere stop: ranks 1 and 2
        wrong = [t for t in tasks if isinstance(t["module"], str)]
        assert [t["rank"] for t in wrong] == [1, 2] and all(isinstance(t["course"], str) for t in wrong), tasks
        assert all(f"rank {t['rank']} runs on {t['node']}, not on" in t["module"] for t in wrong), wrong
        report(f"srun -N 2 -n 4 cyclic, told block: ranks {[t['rank'] for t in wrong]} stop: {wrong[0]['module']}")
        return
    ports = {"node1": 23000, "node2": 23000}
    workers = []
    for host in expected:
        workers.append(f"{host}:{ports[host]}")
        ports[host] += 1
    for t in tasks:
        assert t["module"]["hosts"] == t["course"]["hosts"] == expected, t
        assert t["module"]["config"] == {"cluster": {"worker": t["course"]["workers"]},
                                         "task": {"type": "worker", "index": t["rank"]}}, t
        assert t["course"]["workers"] == workers, t
    report(f"srun -N 2 -n 4 --distribution={distribution}: mwms_slurm and helpers.slurm.step agree on {workers}")
