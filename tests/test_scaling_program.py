"""Notebook 07's take-home program (07_measure.py) under srun: each task keeps its share of its node's GPUs."""

import json
import subprocess
import sys

from helpers.take_home import copy_beside
from tests.support.notebooks import written_program

# Runs the program as __main__ beside mwms_slurm.py, with Slurm's `scontrol show hostnames` answered
# here and make_strategy replaced by its first step (TF_CONFIG) and a report: no TensorFlow device is touched.
DRIVER = """
import json, os, runpy, sys, types
sys.path.insert(0, sys.argv[1])
import mwms_slurm
mwms_slurm.subprocess = types.SimpleNamespace(run=lambda args, **kw: types.SimpleNamespace(stdout="node1 node2"))
def report(*args, **kwargs):  # the real one's first step, then what the set-up left
    mwms_slurm.set_tf_config_from_slurm()
    print("SETUP " + json.dumps({"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "tf_config": os.environ.get("TF_CONFIG")}))
    sys.exit(0)
mwms_slurm.make_strategy = report
sys.argv = [sys.argv[2], "/nonexistent", "small", "32", "2", "64"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_each_task_of_a_gpu_node_keeps_its_share_of_the_gpus(tmp_path):
    """--gres=gpu:4 and 4 tasks per node on 2 nodes: Slurm shows every task all 4 GPUs; rank 5 (node2's second
    task) must keep GPU 1 only, as notebook 08's script does (the old program left it all 4: a replica of each)."""
    program = tmp_path / "07_measure.py"
    program.write_text(written_program("07_scaling_performance.ipynb", "{worker_program}"))
    copy_beside(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "SLURM_STEP_NUM_TASKS": "8", "SLURM_STEP_NODELIST": "node[1-2]",
           "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_PROCID": "5", "SLURMD_NODENAME": "node2",
           "SLURM_GPUS_ON_NODE": "4", "CUDA_VISIBLE_DEVICES": "0,1,2,3", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path), str(program)], env=env,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("SETUP ")]
    assert lines, f"the program stopped before make_strategy: {done.stderr[-2000:]}"
    setup = json.loads(lines[0][6:])
    assert json.loads(setup["tf_config"])["task"]["index"] == 5
    assert setup["cvd"] == "1", f"rank 5 of 4 tasks per node kept CUDA_VISIBLE_DEVICES={setup['cvd']}"
