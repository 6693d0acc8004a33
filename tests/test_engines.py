"""ipyparallel engines: start, ranks, TF_CONFIG, MWMS training through real `%%px` cells."""

import os

import psutil
import pytest

pytestmark = pytest.mark.multiprocess

TRAIN_CELL = """
from helpers.strategy import make_strategy
strategy = make_strategy()
import tensorflow as tf
from helpers.data import make_pipeline
from helpers.models import small_cnn, compile_for_classification
from helpers.train import weights_digest
ds = make_pipeline("train", 32 * strategy.num_replicas_in_sync, data_dir=DATA_DIR, limit=256)
with strategy.scope():
    model = compile_for_classification(small_cnn(), 0.05)
model.fit(ds, epochs=1, steps_per_epoch=4, verbose=0)
digest = weights_digest(model)
print("digest", digest)
"""


def _engine_pids(engines):
    return [i["pid"] for i in engines.identities()]


def test_px_cells_train_with_mwms_and_leave_nothing(prepared_dir):
    from IPython.core.interactiveshell import InteractiveShell

    from helpers.cluster import start_engines

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
    from helpers.cluster import start_engines, stop_all

    engines = start_engines(1, keep=True, activate=False)
    pids = _engine_pids(engines)
    assert stop_all() >= 1
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_engines_stop_when_a_notebook_cell_fails(tmp_path):
    """A notebook that starts engines and then fails leaves no engine behind."""
    import json

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from nbformat.v4 import new_code_cell, new_notebook

    pid_file = tmp_path / "pids.json"
    nb = new_notebook(cells=[
        new_code_cell("import json\nfrom helpers import cluster\nengines = cluster.start_engines(2)\n"
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
