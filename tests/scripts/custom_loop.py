"""A custom training loop over `strategy.run`, as TensorFlow's multi-worker CTL tutorial writes it.

Data from a local .npz file (--data), sizes as options, Keras 3 names (`reset_state`); the loss is
averaged over the global batch (`tf.nn.compute_average_loss`). A fixture of
tests/test_check_script.py: the planted mistakes are edits of copies of this file.
"""
import argparse
import json  # noqa: F401 - the planted mistakes (tests/test_check_script.py) use it
import os

import numpy as np
import tensorflow as tf
import keras

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--global-batch", type=int, default=64)
parser.add_argument("--examples", type=int, default=60000)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=70)
parser.add_argument("--checkpoint-dir", default="/tmp/ckpt")
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task_id = strategy.cluster_resolver.task_id
global_batch_size = args.global_batch


def dataset_fn(input_context):
    with np.load(args.data) as data:
        x, y = data["x"][:args.examples] / np.float32(255), data["y"][:args.examples].astype(np.int64)
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    dataset = dataset.shuffle(1000, seed=7).repeat().batch(batch_size)
    return dataset


with strategy.scope():
    model = keras.Sequential([
        keras.layers.InputLayer(shape=(28, 28)),
        keras.layers.Reshape(target_shape=(28, 28, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(learning_rate=0.1)
    train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")

per_worker_dataset = strategy.distribute_datasets_from_function(dataset_fn)
loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            per_example_loss = loss_object(y, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_accuracy.update_state(y, predictions)
        return loss
    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
write_dir = args.checkpoint_dir if task_id == 0 else os.path.join(args.checkpoint_dir, f"workertemp_{task_id}")
iterator = iter(per_worker_dataset)
for epoch in range(args.epochs):
    total = 0.0
    for _ in range(args.steps_per_epoch):
        total += train_step(iterator)
    train_accuracy.reset_state()
checkpoint.write(os.path.join(write_dir, "ckpt"))
if task_id != 0:
    tf.io.gfile.rmtree(write_dir)
