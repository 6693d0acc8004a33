"""TensorFlow's multi-worker custom-loop tutorial run unchanged on a cluster of engines, and what each
engine found (the local engines' test and the Slurm engines' test check the same findings)."""

from pathlib import Path


# TensorFlow's multi-worker custom-loop tutorial as a learner brings it (tests/scripts/custom_loop.py:
# its code, data from a local file), run on every engine: the strategy with no arguments reads
# TF_CONFIG, and the tutorial's main.py reads TF_CONFIG itself for the number of workers. Then what
# the course's resolver says on the same engine, the weights, and one all-reduce more.
TUTORIAL_CELL = """
import json, os, runpy, sys
import numpy as np
import tensorflow as tf

tf_config = json.loads(os.environ['TF_CONFIG'])
num_workers = len(tf_config['cluster']['worker'])
sys.argv = [TUTORIAL_SCRIPT, *TUTORIAL_ARGS]
tutorial = runpy.run_path(TUTORIAL_SCRIPT, run_name="__main__")
strategy, task_id = tutorial["strategy"], tutorial["task_id"]
seen = {"num_workers": num_workers, "in_sync": strategy.num_replicas_in_sync, "task_id": task_id,
        "workers": strategy.cluster_resolver.cluster_spec().as_dict()["worker"],
        "steps": int(tutorial["optimizer"].iterations.numpy()),
        "weights": float(sum(np.abs(w).sum() for w in tutorial["model"].get_weights())),
        "summed": float(strategy.reduce("SUM", strategy.run(lambda: tf.constant(float(task_id + 1))), axis=None))}

from helpers.resolver import cluster_resolver, describe
course = describe(cluster_resolver())
seen["course"] = {"kind": course["kind"], "rank": course["rank"], "workers": course["workers"]}
"""


TUTORIAL_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "custom_loop.py"


def tutorial_on_engines(engines, tmp_path: Path, timeout: float = 240) -> list[dict]:
    """Run the tutorial on every engine (rank order) within `timeout` s; each engine's findings."""
    import numpy as np

    rng = np.random.default_rng(0)
    data = tmp_path / "mnist.npz"
    np.savez(data, x=rng.integers(0, 256, (64, 28, 28), dtype=np.uint8), y=rng.integers(0, 10, 64))
    engines.view.push({"TUTORIAL_SCRIPT": str(TUTORIAL_SCRIPT), "TUTORIAL_ARGS": [
        "--data", str(data), "--global-batch", "8", "--examples", "64", "--epochs", "2",
        "--steps-per-epoch", "2", "--checkpoint-dir", str(tmp_path / "ckpt")]}, block=True)
    engines.view.execute(TUTORIAL_CELL, block=False).get(timeout=timeout)
    return engines.view.pull("seen", block=True)


def check_tutorial_findings(seen: list[dict], workers: list[dict]) -> None:
    """Both engines form one 2-worker cluster, with their ranks, agreeing with the course's resolver."""
    addresses = [w["address"] for w in workers]
    assert [s["task_id"] for s in seen] == [w["rank"] for w in workers] == [0, 1]
    assert seen[0]["weights"] == seen[1]["weights"] and seen[0]["steps"] == seen[1]["steps"] == 4, seen
    for s in seen:
        assert s["num_workers"] == 2 and s["in_sync"] == 2, s
        assert s["workers"] == addresses, (s, addresses)
        assert s["course"]["workers"] == addresses and s["course"]["rank"] == s["task_id"], s
        assert s["summed"] == 3.0, s  # 1 + 2: one value from each worker, all-reduced across both
