"""The lesson module: models, the input pipeline, exact evaluation, the custom loop's pieces."""

import numpy as np
import pytest


def test_small_cnn_shapes_and_sync_switch():
    import keras

    from helpers import lesson

    model = lesson.small_cnn()
    assert model.output_shape == (None, 10)
    norms = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
    assert norms and not any(l.synchronized for l in norms)
    assert lesson.synchronize_batch_norm(model) == len(norms)
    assert all(l.synchronized for l in norms)
    assert all(l.synchronized for l in lesson.small_cnn(synchronized=True).layers
               if isinstance(l, keras.layers.BatchNormalization))


def test_resnet50_for_cifar():
    import keras

    from helpers import lesson

    model = lesson.build_model("resnet50", synchronized=True)
    assert model.input_shape == (None, 32, 32, 3) and model.output_shape == (None, 10)
    assert 23.5e6 < model.count_params() < 23.7e6
    norms = [l for l in model._flatten_layers() if isinstance(l, keras.layers.BatchNormalization)]
    assert len(norms) == 53 and all(l.synchronized for l in norms)
    with pytest.raises(ValueError, match="unknown model"):
        lesson.build_model("vgg")


def _ids(n: int):
    """n (image, label) pairs whose label is the example's id, to see who got what."""
    import tensorflow as tf

    return tf.data.Dataset.range(n).map(lambda i: (tf.zeros((32, 32, 3), tf.uint8), tf.cast(i, tf.int32)))


def _contexts(workers: int):
    import tensorflow as tf

    return [tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=i,
                                       num_replicas_in_sync=workers) for i in range(workers)]


def test_training_dataset_shards_before_batching_whole_batches_seeded():
    from helpers import lesson

    one = [y.numpy().tolist() for _, y in lesson.training_dataset(_ids(300), 64)]
    assert [len(b) for b in one] == [64] * 4  # 300 -> 256 whole global batches
    again = [y.numpy().tolist() for _, y in lesson.training_dataset(_ids(300), 64)]
    other = [y.numpy().tolist() for _, y in lesson.training_dataset(_ids(300), 64, seed=4)]
    assert one == again and one != other
    shards = [sorted(v for _, y in lesson.training_dataset(_ids(300), 64, c) for v in y.numpy().tolist())
              for c in _contexts(2)]
    assert [len(s) for s in shards] == [128, 128], "each worker: the same number of whole batches"
    assert not set(shards[0]) & set(shards[1]), "two workers read the same example"
    assert sorted(shards[0] + shards[1]) == list(range(256))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_evaluation_counts_every_example_exactly_once(workers):
    from helpers import lesson

    counted = []
    for context in _contexts(workers):
        for _, labels, weights in lesson.evaluation_dataset(_ids(100), 16 * workers, context):
            counted += [int(l) for l, w in zip(labels.numpy(), weights.numpy()) if w == 1.0]
    assert sorted(counted) == list(range(100)), f"{workers} workers: not every example once"


def test_custom_loop_counts_every_test_example_and_scales_float16_losses():
    """In a fresh process: the float16 policy is global to Keras."""
    from conftest import run_python

    done = run_python(r'''
import json
from helpers import environment
environment.split_cpu(2)
import keras, tensorflow as tf
from helpers import lesson
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
examples = tf.data.Dataset.range(100).map(
    lambda i: (tf.cast(tf.fill((32, 32, 3), i), tf.uint8), tf.cast(i % 10, tf.int32)))
keras.mixed_precision.set_global_policy("mixed_float16")
with strategy.scope():
    model = lesson.small_cnn()
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01))
step = lesson.make_train_step(strategy, model, optimizer, 32)
train = strategy.distribute_datasets_from_function(lambda c: lesson.training_dataset(examples, 32, c))
epoch = lesson.train_epoch(step, train, 32)
test = strategy.distribute_datasets_from_function(lambda c: lesson.evaluation_dataset(examples, 32, c))
result = lesson.evaluate(lesson.make_eval_step(strategy, model), test)
print(json.dumps({"compute": model.layers[0].compute_dtype, "loss": epoch["loss"],
                  "scale": float(optimizer.dynamic_scale.numpy()), "examples": result["examples"]}))
''')
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["compute"] == "float16"
    assert np.isfinite(result["loss"]) and result["scale"] > 1, result
    assert result["examples"] == 100, "evaluation must count 100 examples on 2 replicas"


NOTEBOOK_VERSUS_MODULE = r'''
import json, sys
import nbformat
from helpers import environment
environment.split_cpu(2)
import numpy as np, keras, tensorflow as tf
from keras import layers
from helpers import lesson

notebook = {"tf": tf, "keras": keras, "layers": layers, "np": np}
for path in sys.argv[1:]:
    for cell in nbformat.read(path, as_version=4).cells:
        if "lesson" in cell.metadata.get("tags", []):
            exec(cell.source, notebook)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
examples = tf.data.Dataset.range(96).map(
    lambda i: (tf.cast(tf.fill((32, 32, 3), i * 2), tf.uint8), tf.cast(i % 10, tf.int32)))

def train(source):
    """Two epochs of the custom loop, every piece taken from `source` (the notebooks or the module)."""
    pick = (lambda name: notebook[name]) if source == "notebook" else (lambda name: getattr(lesson, name))
    with strategy.scope():
        model = pick("small_cnn")(seed=3)
        optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    step = pick("make_train_step")(strategy, model, optimizer, 32)
    train_ds = strategy.distribute_datasets_from_function(lambda c: pick("training_dataset")(examples, 32, c))
    for _ in range(2):
        pick("train_epoch")(step, train_ds, 32)
    test_ds = strategy.distribute_datasets_from_function(lambda c: pick("evaluation_dataset")(examples, 32, c))
    result = pick("evaluate")(pick("make_eval_step")(strategy, model), test_ds)
    return [w.numpy() for w in model.weights], result

weights_nb, result_nb = train("notebook")
weights_mod, result_mod = train("module")
keras.utils.set_random_seed(5)
resnet_nb = notebook["resnet50"]()
keras.utils.set_random_seed(5)
resnet_mod = lesson.resnet50()
print(json.dumps({
    "defined": sorted(k for k in notebook if not k.startswith("_") and callable(notebook[k]) and k not in ("layers",)),
    "weights_equal": len(weights_nb) == len(weights_mod) and all(np.array_equal(a, b) for a, b in zip(weights_nb, weights_mod)),
    "results": [result_nb, result_mod],
    "resnet_equal": all(np.array_equal(a, b) for a, b in zip(resnet_nb.get_weights(), resnet_mod.get_weights())),
    "synchronized": [notebook["synchronize_batch_norm"](resnet_nb), lesson.synchronize_batch_norm(resnet_mod)],
}))
'''


def test_the_notebooks_lesson_cells_and_the_module_train_to_identical_weights():
    """The lesson module keeps the pieces the notebooks write out: the cells tagged `lesson`
    (01's model, 02's pipelines, 04's steps and loops, 05's ResNet50) and the module's
    functions train the same model on the same data to bit-identical weights."""
    from conftest import ROOT

    notebooks = [str(ROOT / "notebooks" / n) for n in ("01_mirrored_strategy.ipynb", "02_input_pipelines.ipynb",
                                                       "04_custom_training_loop.ipynb", "05_sync_batch_norm.ipynb")]
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", NOTEBOOK_VERSUS_MODULE, *notebooks], capture_output=True,
                          text=True, timeout=400, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("small_cnn", "training_dataset", "evaluation_dataset", "make_train_step", "make_eval_step",
                 "train_epoch", "evaluate", "resnet50", "synchronize_batch_norm"):
        assert name in result["defined"], f"no notebook cell tagged `lesson` defines {name}"
    assert result["weights_equal"], "the notebooks' lesson code and helpers.lesson trained to different weights"
    assert result["results"][0] == result["results"][1] and result["results"][0]["examples"] == 96
    assert result["resnet_equal"] and result["synchronized"] == [53, 53]
