"""The course's lesson code, kept once for reuse.

Every piece here is written out first in a notebook cell, which its comment names; later
notebooks, the batch program (`python -m helpers train`) and the bench import it from here so
that all of them train the same way. `tests/test_lesson.py` trains each notebook's version
and this one side by side and checks they end with identical weights.

Import this module after the strategy (or the logical CPU devices) exists: it imports
TensorFlow. The plumbing (engines, Slurm, cluster resolution, data preparation) is not here.
"""

from __future__ import annotations

import hashlib

import keras
import tensorflow as tf
from keras import layers

from helpers.errors import CourseError

INPUT_SHAPE = (32, 32, 3)
NUM_CLASSES = 10
MODELS = ("cnn", "resnet50")


# --------------------------------------------------------------------------------------------
# 01 · "The model" and "Train inside strategy.scope()"
# --------------------------------------------------------------------------------------------
def small_cnn(num_classes: int = NUM_CLASSES, synchronized: bool = False, seed: int = 42) -> keras.Model:
    """Two conv blocks with batch normalisation: trains on a CPU in seconds."""
    init = keras.initializers.GlorotUniform(seed=seed)

    def block(filters):
        return [layers.Conv2D(filters, 3, padding="same", use_bias=False, kernel_initializer=init),
                layers.BatchNormalization(momentum=0.9, synchronized=synchronized),
                layers.ReLU(), layers.MaxPooling2D()]

    return keras.Sequential(
        [keras.Input(INPUT_SHAPE), *block(32), *block(64), layers.GlobalAveragePooling2D(),
         layers.Dense(num_classes, kernel_initializer=init, dtype="float32")],  # float32 logits
        name="small_cnn")


def compile_model(model: keras.Model, learning_rate: float, *, steps_per_execution: int = 1,
                  jit_compile: bool = False) -> keras.Model:
    """SGD with momentum and cross-entropy on logits; call inside `strategy.scope()`.

    Accuracy is a *weighted* metric, so that the weight-0 padding of `evaluation_dataset`
    counts for nothing.
    """
    model.compile(optimizer=keras.optimizers.SGD(learning_rate, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=["accuracy"], steps_per_execution=steps_per_execution,
                  jit_compile=jit_compile)
    return model


def weights_digest(model: keras.Model, trainable_only: bool = True) -> str:
    """A short hash of the weights: equal digests mean bit-identical weights (03, "Evaluate,
    and let only the chief save"; reused in 04, 06 and 07)."""
    digest = hashlib.sha256()
    for variable in (model.trainable_weights if trainable_only else model.weights):
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()[:16]


def replica_values(strategy, variable) -> list:
    """The value of a variable on each local replica (01, "Proof: what is mirrored")."""
    return [v.numpy() for v in strategy.experimental_local_results(variable.value)]


# --------------------------------------------------------------------------------------------
# 02 · "The course pipeline" and "Every test image exactly once"
# --------------------------------------------------------------------------------------------
def normalize(image, label):
    return tf.cast(image, tf.float32) / 255.0, tf.cast(label, tf.int32)


def refuse_endless(cardinality: int, name: str) -> None:
    """Raise if TensorFlow knows the examples never end: neither pipeline can cut, cache or count them."""
    if cardinality == tf.data.INFINITE_CARDINALITY:
        raise CourseError(f"{name} needs a finite dataset, and this one never ends (INFINITE_CARDINALITY, "
                          "after repeat(), say): pass it without repeat(), or cut it with take(n)")


def training_dataset(examples: tf.data.Dataset, global_batch: int, input_context=None,
                     seed: int = 42) -> tf.data.Dataset:
    """Shard, then map, cache, shuffle, batch, prefetch: each worker scales and caches only its share.

    Not decodes: `load_split`'s examples come decoded by tfds, so every worker reads and decodes
    the whole split before the shard keeps its n-th (notebook 02, "The course pipeline").

    Given an `input_context` (from `strategy.distribute_datasets_from_function`), this worker
    keeps every n-th example and batches by the per-replica batch; without one, the dataset is
    batched by the global batch for `model.fit` or `experimental_distribute_dataset`.
    For finite examples only, of known or unknown size: where TensorFlow does not know the size
    (after a `filter`), the cut to whole global batches batches and unbatches instead of `take`,
    with no pass to count it first. An endless dataset (`INFINITE_CARDINALITY`, after `repeat()`)
    is refused: no cut ever happens on it and `cache()` would keep every example read, without end.
    """
    count = int(examples.cardinality())
    refuse_endless(count, "training_dataset")
    if count >= 0:  # whole global batches only: the same steps on every worker
        examples = examples.take(count - count % global_batch)
    else:  # size unknown (after a filter, say): the same cut, as the examples are read
        examples = examples.batch(global_batch, drop_remainder=True).unbatch()
    batch = global_batch
    if input_context is not None:
        examples = examples.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        batch = input_context.get_per_replica_batch_size(global_batch)
    return (examples.map(normalize, num_parallel_calls=tf.data.AUTOTUNE)
            .cache()
            .shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
            .batch(batch, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))


def evaluation_dataset(examples: tf.data.Dataset, global_batch: int, input_context=None) -> tf.data.Dataset:
    """Every test example exactly once, whatever the worker count.

    Dropping the last partial batch would skip up to global_batch - 1 examples (a number that
    depends on the worker count); a partial batch would leave some replicas an empty one.
    Instead the set is padded with weight-0 copies to a whole number of global batches, and
    every (image, label, weight) triple is weighted in the metrics. Keras's loss is not: its
    default reduction divides by every example, padding included, so a padded evaluation's
    loss is lower than its real examples' (lessons 02 and 03 show it).
    An unknown size is counted in a pass first; an endless dataset is refused (its count would
    never end). One TensorFlow cannot tell is endless (`repeat().filter(...)`) would still be
    counted forever: pass finite examples.
    """
    count = int(examples.cardinality())
    refuse_endless(count, "evaluation_dataset")
    if count < 0:
        count = sum(1 for _ in examples)
    padding = -count % global_batch
    weighted = examples.map(lambda image, label: (image, label, 1.0))
    pad = examples.repeat().take(padding).map(lambda image, label: (image, label, 0.0))
    examples = weighted.concatenate(pad)
    batch = global_batch
    if input_context is not None:
        examples = examples.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        batch = input_context.get_per_replica_batch_size(global_batch)
    return (examples.map(lambda image, label, weight: (*normalize(image, label), weight),
                         num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE))


# --------------------------------------------------------------------------------------------
# 04 · "The replica step", "The distributed evaluation step", "The loops around the steps"
# --------------------------------------------------------------------------------------------
def make_train_step(strategy, model: keras.Model, optimizer, global_batch: int, loss_divisor: int | None = None):
    """The distributed training step: per-example loss / global batch, `strategy.run`, SUM.

    `loss_divisor` exists only to show the classic mistake (notebook 04); leave it None.
    Under a float16 policy, wrap the optimizer in `keras.optimizers.LossScaleOptimizer`:
    the step scales the loss with it, so small gradients do not underflow to zero.
    """
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    divisor = loss_divisor or global_batch
    scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    if not optimizer.built:  # slots (momentum) built lazily inside a replica step fail: build them here
        with strategy.scope():
            optimizer.build(model.trainable_variables)

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=divisor)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            to_differentiate = optimizer.scale_loss(loss) if scaled else loss
        gradients = tape.gradient(to_differentiate, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))  # unscales if scaled
        return loss, correct_predictions(labels, logits)

    # jit_compile explicit, as in notebook 04: TF_FUNCTION_JIT_COMPILE_DEFAULT=true would
    # give a step left at None XLA, while `helpers train` and the bench report it ran without
    @tf.function(jit_compile=False)
    def train_step(batch):
        loss, correct = strategy.run(replica_step, args=batch)
        return (strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, correct, axis=None))

    return train_step


def make_eval_step(strategy, model: keras.Model):
    """The distributed evaluation step: sums of loss, correct predictions and weights."""
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def replica_step(images, labels, weights):
        logits = model(images, training=False)
        return (tf.reduce_sum(loss_object(labels, logits) * weights),
                correct_predictions(labels, logits, weights), tf.reduce_sum(weights))

    @tf.function(jit_compile=False)  # as train_step
    def eval_step(batch):
        sums = strategy.run(replica_step, args=batch)
        return tuple(strategy.reduce(tf.distribute.ReduceOp.SUM, s, axis=None) for s in sums)

    return eval_step


def correct_predictions(labels, logits, weights=1.0):
    hits = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), tf.cast(labels, tf.int32))
    return tf.reduce_sum(tf.cast(hits, tf.float32) * weights)


def train_epoch(train_step, dist_dataset, global_batch: int, steps: int | None = None, timer=None,
                record=None) -> dict:
    """One pass (or `steps` steps) over a distributed dataset: mean loss and accuracy. `record`, when
    given, is called with every batch the loop feeds the step (notebook 04 fingerprints them)."""
    total_loss = total_correct = 0.0
    done = 0
    for batch in dist_dataset:
        if steps is not None and done >= steps:
            break
        if record:
            record(batch)
        if timer:
            timer.start()
        loss, correct = train_step(batch)
        total_loss, total_correct = total_loss + float(loss), total_correct + float(correct)
        if timer:
            timer.stop()
        done += 1
    if done == 0:
        raise ValueError("the training dataset yielded no batch: it holds fewer examples than "
                         "one global batch (batches drop their remainder)")
    return {"loss": total_loss / done, "accuracy": total_correct / (done * global_batch), "steps": done}


def evaluate(eval_step, dist_dataset, record=None) -> dict:
    """Loss and accuracy over every example of a distributed `evaluation_dataset`; `record`, when
    given, is called with every batch the loop feeds the step."""
    total_loss = total_correct = count = 0.0
    for batch in dist_dataset:
        if record:
            record(batch)
        loss, correct, weight = eval_step(batch)
        total_loss, total_correct, count = (total_loss + float(loss), total_correct + float(correct),
                                            count + float(weight))
    if count == 0:
        raise ValueError("the evaluation dataset yielded no example")
    return {"loss": total_loss / count, "accuracy": total_correct / count, "examples": int(count)}


# --------------------------------------------------------------------------------------------
# 05 · "ResNet50 on CIFAR-10, both ways"
# --------------------------------------------------------------------------------------------
def resnet50(num_classes: int = NUM_CLASSES) -> keras.Model:
    """ResNet50 (23.6 M parameters) from random weights on 32x32 inputs, logits out.

    Its initial weights come from Keras's global seed (`keras.utils.set_random_seed`).
    """
    return keras.applications.ResNet50(weights=None, input_shape=INPUT_SHAPE, classes=num_classes,
                                       classifier_activation=None)


def synchronize_batch_norm(model: keras.Model) -> int:
    """Switch every BatchNormalization layer of `model` (nested ones too) to synchronized.

    Works on a built model before its first training step: the flag is read when the layer's
    training call is traced, and the weights stay as they are. Returns how many layers.
    """
    norms = [layer for layer in model._flatten_layers(include_self=False)  # noqa: SLF001
             if isinstance(layer, layers.BatchNormalization)]
    for layer in norms:
        layer.synchronized = True
    return len(norms)


def build_model(name: str, synchronized: bool = False, seed: int = 42) -> keras.Model:
    """The model called `name` (one of MODELS), for the batch program and the bench."""
    if name == "cnn":
        return small_cnn(synchronized=synchronized, seed=seed)
    if name == "resnet50":  # seeded by the caller's keras.utils.set_random_seed
        model = resnet50()
        if synchronized:
            synchronize_batch_norm(model)
        return model
    raise ValueError(f"unknown model {name!r}: use one of {', '.join(MODELS)}")
