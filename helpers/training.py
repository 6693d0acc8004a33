"""The distributed custom training loop of the course, and evaluation.

The loss follows the tf.distribute rule: each replica computes a per-example loss and
divides its sum by the *global* batch size (`tf.nn.compute_average_loss`), so that the
all-reduce SUM of the replicas' gradients equals the gradient of the mean loss over the
global batch. Dividing by the per-replica batch instead would multiply the gradient by
the number of replicas (notebook 04 shows it).
"""

from __future__ import annotations

from dataclasses import dataclass

from .throughput import StepTimer


@dataclass
class EpochResult:
    loss: float
    accuracy: float
    steps: int


class DistributedLoop:
    """Train and evaluate `model` with `optimizer` under `strategy`, one global batch a step.

    Create the model and the optimizer inside `strategy.scope()` before this.
    `per_replica_divisor` exists to demonstrate the classic mistake; leave it None.
    """

    def __init__(self, strategy, model, optimizer, global_batch: int,
                 per_replica_divisor: int | None = None):
        import tensorflow as tf

        self.strategy, self.model, self.optimizer = strategy, model, optimizer
        self.global_batch = global_batch
        self._divisor = per_replica_divisor or global_batch
        import keras

        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        if not optimizer.built:
            # Building the optimizer's slots (e.g. momentum) lazily inside the first
            # replica step fails under MirroredStrategy ("must feed a value for placeholder
            # ... cond"); build them up front, in the strategy's scope.
            with strategy.scope():
                optimizer.build(model.trainable_variables)
        self._train = tf.function(self._distributed_train_step)
        self._eval = tf.function(self._distributed_eval_step)

    # -- one replica ---------------------------------------------------------------
    def _replica_train_step(self, images, labels):
        import tensorflow as tf

        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            per_example = self._loss(labels, logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=self._divisor)
            if self.model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss, self._correct(labels, logits)

    def _replica_eval_step(self, images, labels):
        import tensorflow as tf

        logits = self.model(images, training=False)
        loss = tf.reduce_sum(self._loss(labels, logits))
        return loss, self._correct(labels, logits), tf.cast(tf.shape(labels)[0], tf.float32)

    @staticmethod
    def _correct(labels, logits):
        import tensorflow as tf

        hits = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), tf.cast(labels, tf.int32))
        return tf.reduce_sum(tf.cast(hits, tf.float32))

    # -- all replicas ----------------------------------------------------------------
    def _distributed_train_step(self, batch):
        import tensorflow as tf

        loss, correct = self.strategy.run(self._replica_train_step, args=batch)
        sum_ = tf.distribute.ReduceOp.SUM
        return (self.strategy.reduce(sum_, loss, axis=None),
                self.strategy.reduce(sum_, correct, axis=None))

    def _distributed_eval_step(self, batch):
        import tensorflow as tf

        loss, correct, count = self.strategy.run(self._replica_eval_step, args=batch)
        sum_ = tf.distribute.ReduceOp.SUM
        return tuple(self.strategy.reduce(sum_, v, axis=None) for v in (loss, correct, count))

    def train_step(self, batch) -> tuple[float, float]:
        """One step on a distributed batch; returns (mean loss, correct predictions)."""
        loss, correct = self._train(batch)
        return float(loss), float(correct)

    def train_epoch(self, dist_dataset, steps: int | None = None,
                    timer: StepTimer | None = None) -> EpochResult:
        """The seed's `train_epoch`: one pass (or `steps` steps) over a distributed dataset."""
        total_loss = total_correct = 0.0
        done = 0
        for batch in dist_dataset:
            if steps is not None and done >= steps:
                break
            if timer:
                timer.start()
            loss, correct = self.train_step(batch)
            if timer:
                timer.stop()
            total_loss += loss
            total_correct += correct
            done += 1
        if done == 0:
            raise ValueError("the training dataset yielded no batch: it is smaller than one "
                             "global batch (drop_remainder=True)")
        return EpochResult(total_loss / done, total_correct / (done * self.global_batch), done)

    def evaluate(self, dist_dataset) -> EpochResult:
        """Mean loss and accuracy over a distributed dataset, summed over all replicas."""
        total_loss = total_correct = total = 0.0
        steps = 0
        for batch in dist_dataset:
            loss, correct, count = self._eval(batch)
            total_loss, total_correct, total = (total_loss + float(loss),
                                                total_correct + float(correct), total + float(count))
            steps += 1
        if total == 0:
            raise ValueError("the evaluation dataset yielded no batch")
        return EpochResult(total_loss / total, total_correct / total, steps)
