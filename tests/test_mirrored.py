"""MirroredStrategy on logical CPU devices, in a fresh process each (device set-up is once)."""

import json

from conftest import run_python

EQUIVALENCE = r'''
import json, numpy as np
from helpers import environment
environment.split_cpu(2)
import tensorflow as tf, keras
from helpers.strategy import make_strategy
from helpers.lesson import make_train_step, replica_values, small_cnn

rng = np.random.default_rng(0)
images = rng.uniform(size=(16, 32, 32, 3)).astype("float32")
labels = rng.integers(0, 10, size=16).astype("int32")

def one_step(devices, divisor=None):
    strategy = tf.distribute.MirroredStrategy(devices=devices)
    with strategy.scope():
        model = small_cnn(seed=1, synchronized=True)  # per-replica BN statistics would differ
        opt = keras.optimizers.SGD(0.1)
    step = make_train_step(strategy, model, opt, global_batch=16, loss_divisor=divisor)
    ds = tf.data.Dataset.from_tensor_slices((images, labels)).batch(16)
    batch = next(iter(strategy.experimental_distribute_dataset(ds)))
    step(batch)
    per_replica = [replica_values(strategy, var) for var in model.trainable_variables]
    return strategy.num_replicas_in_sync, [w.numpy() for w in model.trainable_variables], per_replica

auto = make_strategy("mirrored")
n1, w1, _ = one_step(["/cpu:0"])
n2, w2, replicas = one_step(["/cpu:0", "/cpu:1"])
_, wrong, _ = one_step(["/cpu:0", "/cpu:1"], divisor=8)
diff = max(float(np.max(np.abs(a - b))) for a, b in zip(w1, w2))
wrong_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(w1, wrong))
mirrored = all(len(vals) == 2 and np.array_equal(vals[0], vals[1]) for vals in replicas)
print(json.dumps({"auto_replicas": auto.num_replicas_in_sync, "n1": n1, "n2": n2,
                  "diff": diff, "wrong_diff": wrong_diff, "mirrored": mirrored}))
'''


def test_two_replicas_equal_one_replica_over_the_global_batch():
    done = run_python(EQUIVALENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["auto_replicas"] == 2 and (result["n1"], result["n2"]) == (1, 2)
    assert result["mirrored"], "variables differ between replicas after a step"
    assert result["diff"] < 1e-5, result
    # dividing by the per-replica batch doubles the gradient: clearly different weights
    assert result["wrong_diff"] > 100 * max(result["diff"], 1e-7), result


def test_split_cpu_after_tensorflow_started_is_a_clear_error():
    done = run_python("import tensorflow as tf; tf.constant(1)\n"
                      "from helpers import environment\nenvironment.split_cpu(2)")
    assert done.returncode != 0
    assert "CourseError: TensorFlow already initialised with 1 CPU device(s)" in done.stderr
