"""TensorFlow's multi-worker Keras tutorial (multi_worker_with_keras), as the tutorial writes it.

Two changes, both needed to run here: MNIST comes from a local .npz file (--data; compute nodes do
not download), and Keras 3's `fit` under MultiWorkerMirroredStrategy gets the fix lesson 08's
script carries (keras-team/keras#20585). Sizes are options (what `check-script` passes).
A fixture of tests/test_check_script.py: the planted mistakes are edits of copies of this file.
"""
import argparse
import json
import os
import sys  # noqa: F401 - the planted mistakes (tests/test_check_script.py) use it

import numpy as np
import tensorflow as tf
import keras


def fix_keras_fit_for_multiworker():
    """model.fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585); verified on Keras 3.15.1."""
    from keras.src import tree
    from keras.src.backend.tensorflow import trainer

    def symbolic_build(self, iterator=None, data_batch=None):  # from the data's shapes; never read a batch
        spec = getattr(getattr(iterator, "_distributed_dataset", None), "element_spec", None)
        if self._distribute_strategy is None or spec is None:
            return original_build(self, iterator, data_batch)
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=tree.map_structure(lambda s: getattr(s, "_value_specs", [s])[0], spec))

    def reduce_per_replica(values, strategy, reduction):  # scalar logs: reduce over no axis
        def one(value):
            if reduction in ("auto", "mean") and strategy.experimental_local_results(value)[0].shape.rank == 0:
                return strategy.reduce("MEAN", value, axis=None)
            return original_reduce(value, strategy, reduction)
        return tree.map_structure(one, values)

    original_build, original_reduce = trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica
    trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica = symbolic_build, reduce_per_replica


def mnist_dataset(path, batch_size, examples):
    with np.load(path) as data:
        x_train, y_train = data["x"][:examples], data["y"][:examples]
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = tf.data.Dataset.from_tensor_slices(
        (x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
    return train_dataset


def build_and_compile_cnn_model():
    model = keras.Sequential([
        keras.layers.InputLayer(shape=(28, 28)),
        keras.layers.Reshape(target_shape=(28, 28, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10)
    ])
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        metrics=["accuracy"])
    return model


def _is_chief(task_type, task_id):
    return task_type == "worker" and task_id == 0


def _get_temp_dir(dirpath, task_id):
    base_dirpath = "workertemp_" + str(task_id)
    temp_dir = os.path.join(dirpath, base_dirpath)
    tf.io.gfile.makedirs(temp_dir)
    return temp_dir


def write_filepath(filepath, task_type, task_id):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id):
        dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)


parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--per-worker-batch", type=int, default=64)
parser.add_argument("--examples", type=int, default=60000)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=70)
parser.add_argument("--model-dir", default="/tmp/keras-model")
args = parser.parse_args()

fix_keras_fit_for_multiworker()
per_worker_batch_size = args.per_worker_batch
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_dataset(args.data, global_batch_size, args.examples)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = build_and_compile_cnn_model()

multi_worker_model.fit(multi_worker_dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                       verbose=0)

model_path = os.path.join(args.model_dir, "model.keras")
task_type, task_id = (strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id)
write_model_path = write_filepath(model_path, task_type, task_id)
tf.io.gfile.makedirs(os.path.dirname(write_model_path))  # Keras 3 saves one .keras file, into a directory that exists
multi_worker_model.save(write_model_path)
if not _is_chief(task_type, task_id):
    tf.io.gfile.rmtree(os.path.dirname(write_model_path))
