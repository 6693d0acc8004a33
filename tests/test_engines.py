"""ipyparallel engines: start, ranks, TF_CONFIG, MWMS training through real `%%px` cells, and
TensorFlow's custom-loop tutorial run unchanged on them."""

from pathlib import Path

import psutil
import pytest

from tests.support.engines_tutorial import check_tutorial_findings, tutorial_on_engines

pytestmark = pytest.mark.multiprocess

TRAIN_CELL = """
from helpers.strategy import make_strategy
strategy = make_strategy()
import tensorflow as tf
from helpers.data import load_split
from helpers.lesson import compile_model, small_cnn, training_dataset, weights_digest
examples = load_split("train", DATA_DIR, limit=256)
ds = strategy.distribute_datasets_from_function(
    lambda context: training_dataset(examples, 32 * strategy.num_replicas_in_sync, context))
with strategy.scope():
    model = compile_model(small_cnn(), 0.05)
model.fit(ds, epochs=1, steps_per_epoch=4, verbose=0)
digest = weights_digest(model)
print("digest", digest)
"""


def _engine_pids(engines):
    return [i["pid"] for i in engines.identities()]


def test_px_cells_train_with_mwms_and_leave_nothing(prepared_dir):
    from IPython.core.interactiveshell import InteractiveShell

    from helpers.engines import start_engines

    shell = InteractiveShell.instance()
    engines = start_engines(2, timeout=60)
    pids = _engine_pids(engines)
    try:
        assert len(engines) == 2 and sorted(engines.ranks.values()) == [0, 1]
        workers = engines.setup_multiworker()
        assert [w["rank"] for w in workers] == [0, 1]
        assert len({w["address"] for w in workers}) == 2
        engines.view.push({"DATA_DIR": str(prepared_dir)}, block=True)
        shell.run_cell_magic("px", "", TRAIN_CELL)
        digests = engines.view.pull("digest", block=True)
        engines.view.execute("import os; rank = int(os.environ['COURSE_RANK'])", block=True)
        ranks = engines.view.pull("rank", block=True)
        assert ranks == [0, 1]
        assert len(digests) == 2 and digests[0] == digests[1]
    finally:
        seconds = engines.stop()
    print(f"engines started in {engines.started_s:.2f} s, stopped in {seconds:.2f} s")
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_stop_all_cleans_up_a_kept_cluster():
    from helpers.engines.cluster import start_engines, stop_all

    engines = start_engines(1, keep=True, activate=False)
    pids = _engine_pids(engines)
    stopped, _ = stop_all()
    assert stopped >= 1
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_engines_stop_when_a_notebook_cell_fails(tmp_path):
    """A notebook that starts engines and then fails leaves no engine behind."""
    import json

    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from nbformat.v4 import new_code_cell, new_notebook

    pid_file = tmp_path / "pids.json"
    nb = new_notebook(cells=[
        new_code_cell("import json\nfrom helpers.engines import cluster\nengines = cluster.start_engines(2)\n"
                      f"json.dump([i['pid'] for i in engines.identities()], open({str(pid_file)!r}, 'w'))"),
        new_code_cell("raise RuntimeError('a lesson cell fails')"),
    ])
    with pytest.raises(CellExecutionError):
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    pids = json.loads(pid_file.read_text())
    assert len(pids) == 2
    import time

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(0.2)
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


NOTES = {"0,1": [], "0": ["note: 2 workers but 1 GPU(s) on this host: the workers run on CPU (two workers "
                           "on one GPU break NCCL); start one worker per GPU"],
         "0,1,2,3": ["note: 1 of its 2 GPUs stay idle: one replica per process here"]}


@pytest.mark.parametrize("visible, most, expected", [("0,1", None, ["0", "1"]), ("0", None, ["", ""]),
                                                     ("0,1,2,3", 1, ["0", "2"])])
def test_local_engines_get_a_gpu_each(monkeypatch, capsys, visible, most, expected):
    """Two local engines on a node whose process sees `visible` GPUs: one GPU each, or (one GPU
    for two engines) CPU for both with a note that reaches the kernel (printed there, once, not
    left in an engine's apply result), or (4 GPUs, capped at one each as lesson 12 asks) the first
    of each engine's two; and the start-up line says what each engine will use before
    setup_multiworker gives it (the cap included). This TensorFlow is the CPU wheel: the engines get their
    CUDA_VISIBLE_DEVICES and memory growth, which is what is checked."""
    import socket

    from helpers.engines import start_engines

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setenv("COURSE_CLASS_LAYOUT", "node")
    engines = start_engines(2, timeout=60, activate=False, most_gpus=most)
    try:
        host = socket.gethostname()
        uses = [f"({'GPU ' + g if g else 'CPU'})" for g in expected]
        assert engines.placement() == f"rank 0 on {host} {uses[0]}, rank 1 on {host} {uses[1]}"
        capsys.readouterr()
        workers = engines.setup_multiworker()
        notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
        assert notes == NOTES[visible], notes
        assert [w["gpus"] for w in workers] == expected
        engines.view.execute("import os; cvd = os.environ.get('CUDA_VISIBLE_DEVICES'); "
                             "growth = os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH')", block=True)
        assert engines.view.pull("cvd", block=True) == expected
        assert engines.view.pull("growth", block=True) == ["true", "true"]
        assert ("rank 1 on" in engines.placement()) and (("GPU 1" in engines.placement()) == (visible == "0,1"))
    finally:
        engines.stop()


def test_local_engines_that_cannot_start_are_a_clear_error(monkeypatch):
    """The local path: engines that die at start (here: a broken Python environment) end the wait
    with one line at the deadline, and nothing is left running."""
    import time

    from helpers.engines import cluster
    from helpers.errors import CourseError

    monkeypatch.setattr(cluster, "ENGINE_ENV", {**cluster.ENGINE_ENV, "PYTHONHOME": "/nonexistent"})
    started = time.perf_counter()
    with pytest.raises(CourseError, match=r"only 0 of 2 engines registered \((within 5 s|they exited at start)\): check that engines can start"):
        cluster.start_engines(2, timeout=5, activate=False)
    # the message says the code's own 5 s deadline (or the engines' exit) ended the wait; the clock
    # only guards against a wait that never ends (generous: a loaded machine stops engines slowly)
    assert time.perf_counter() - started < 120, "the wait outlasted its 5 s deadline by minutes"
    left = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "ipyparallel" in " ".join(proc.info["cmdline"] or []) and proc.environ().get(
                    "PYTEST_CURRENT_TEST", "").endswith("test_local_engines_that_cannot_start_are_a_clear_error (call)"):
                left.append(proc.pid)
        except psutil.Error:
            continue
    assert not left, f"processes left: {left}"


def test_px_cells_show_every_engines_last_line_every_time(capsys):
    """%%px streams output until the result arrives; a line still buffered on an engine then
    was lost now and then. Engines flush after every cell: 15 cells, every line shown."""
    from IPython.core.interactiveshell import InteractiveShell

    from helpers.engines import start_engines

    shell = InteractiveShell.instance()
    engines = start_engines(2, timeout=60)
    try:
        engines.setup_multiworker()
        capsys.readouterr()
        for i in range(15):
            shell.run_cell_magic("px", "", f"import time\nprint('first {i}')\ntime.sleep(0.02)\nprint('last {i}', end='')")
        shown = capsys.readouterr().out
    finally:
        engines.stop()
    assert "Error in callback" not in shown, shown[-2000:]
    missing = [f"[rank {r}] last {i}" for i in range(15) for r in (0, 1) if f"[rank {r}] last {i}" not in shown]
    assert not missing, f"lines missing from %%px output: {missing}\n{shown[-2000:]}"


def test_engines_sign_messages_with_a_key_that_travels_in_owner_only_files():
    """CurveZMQ made ipyparallel drop the HMAC key, and every engine then warned `Message signing
    is disabled`; the course keeps a per-cluster key, handed over in files only the owner reads."""
    import json
    import stat

    from helpers.engines import start_engines

    engines = start_engines(1, activate=False)
    try:
        security = Path(engines.cluster.profile_dir) / "security"
        keyfile = security / f"ipcontroller-{engines.cluster_id}-session.key"
        mode = stat.S_IMODE(keyfile.stat().st_mode)
        infos = [json.loads(f.read_text()) for f in security.glob(f"ipcontroller-{engines.cluster_id}-*.json")]
        assert engines.view.apply_sync(int, "42") == [42]
        output = "".join(s.get_output() for s in engines.cluster.engines.values())
        command_lines = [line for p in __import__("psutil").process_iter(["cmdline"])  # a zombie's cmdline is None
                         if engines.cluster_id in (line := " ".join(p.info["cmdline"] or []))]
    finally:
        engines.stop()
    assert mode == 0o600, oct(mode)
    assert infos and all(info["key"] for info in infos), "the connection files carry no signing key"
    assert not any(infos[0]["key"] in line for line in command_lines), "the key is on a command line"
    assert "Completed registration" in output and "Message signing is disabled" not in output, output[-1500:]
    assert not keyfile.exists(), "the key file outlived its cluster"


def test_tutorial_code_with_no_argument_strategy_on_local_engines(tmp_path):
    """Issue 44: TensorFlow's custom-loop tutorial (`MultiWorkerMirroredStrategy()` with no arguments)
    on the course's local engines after `setup_multiworker`: one cluster of 2 workers, not 2 alone."""
    import time

    from helpers.engines import start_engines

    engines = start_engines(2, timeout=60, activate=False)
    try:
        workers = engines.setup_multiworker()
        started = time.perf_counter()
        seen = tutorial_on_engines(engines, tmp_path)
        print(f"the tutorial on 2 local engines: {seen} in {time.perf_counter() - started:.1f} s")
    finally:
        engines.stop()
    check_tutorial_findings(seen, workers)
    assert all(s["course"]["kind"] == "TFConfigClusterResolver" for s in seen), seen


def test_slurm_engines_of_different_steps_are_refused_with_one_line():
    """Engines that each resolve another Slurm step (started by separate sruns) cannot share one
    TF_CONFIG: setup_multiworker says so instead of letting each train alone or hang."""
    from helpers.engines.cluster import _step_addresses
    from helpers.errors import CourseError

    def config(workers, index):
        return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}

    class Engine:
        def __init__(self, found):
            self.found = found

        def apply_sync(self, function, *args):
            return self.found

    class Client(dict):
        pass

    one_step = Client({3: Engine(config(["node1:10000", "node2:10000"], 0)),
                       4: Engine(config(["node1:10000", "node2:10000"], 1))})
    assert _step_addresses(one_step, [3, 4], {3: 0, 4: 1}) == ["node1:10000", "node2:10000"]
    two_steps = Client({3: Engine(config(["node1:10000"], 0)), 4: Engine(config(["node2:10016"], 0))})
    with pytest.raises(CourseError, match="start all engines as the tasks of one srun step"):
        _step_addresses(two_steps, [3, 4], {3: 0, 4: 1})
    with pytest.raises(CourseError, match="start all engines as the tasks of one srun step"):  # ranks not SLURM_PROCID
        _step_addresses(one_step, [3, 4], {3: 1, 4: 0})
    with pytest.raises(CourseError, match="has 2 tasks but 1 engines registered"):
        _step_addresses(Client({3: one_step[3]}), [3], {3: 0})


def test_engines_wait_minutes_for_their_controller_to_answer_registration():
    """ipengine gives up after IPEngine.timeout (5 s by default) without the controller's answer to its
    registration: four learners starting engines at once on a loaded node lost one learner's engines that
    way. The course's engines are started with a longer wait (helpers.engines.cluster.ENGINE_ARGS), read
    here from the engine processes' command lines and from the engine itself."""
    import psutil

    from helpers.engines import start_engines
    from helpers.engines.cluster import ENGINE_ARGS

    engines = start_engines(1, activate=False)
    try:
        command_lines = [line for p in psutil.Process().children(recursive=True)
                         if "run_module('ipyparallel.engine'" in (line := " ".join(p.cmdline()))]  # LOCAL_ENGINE_CMD
        timeout = engines.view.apply_sync(eval, "__import__('ipyparallel').engine.app.IPEngine.instance().timeout")
    finally:
        engines.stop()
    assert command_lines and all(ENGINE_ARGS[0] in line for line in command_lines), command_lines
    assert timeout == [float(ENGINE_ARGS[0].split("=")[1])] and timeout[0] >= 60, timeout
