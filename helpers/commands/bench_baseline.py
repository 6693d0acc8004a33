"""The baseline of `helpers bench`: plain, hand-written Keras training, no helpers plumbing.

It reads the same prepared tfds data and builds the same model architecture, then trains
with a tf.data pipeline and `model.fit` (or a GradientTape loop, `--loop custom`) written
the way a Keras tutorial would, so that the
benchmark can show what the helpers' training path costs or saves against it.
Prints one `RESULT {json}` line like `python -m helpers train`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--loop", choices=["fit", "custom"], default="fit")
    parser.add_argument("--examples", type=int, help="train on the first N examples (default: all)")
    args = parser.parse_args()

    import keras
    import tensorflow as tf
    import tensorflow_datasets as tfds

    from helpers.lesson import build_model  # the architecture only

    keras.utils.set_random_seed(42)
    ds = tfds.load("cifar10", data_dir=args.data_dir, split="train", as_supervised=True, download=False)
    if args.examples:
        ds = ds.take(args.examples)
    ds = (ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))
            .cache().shuffle(10_000, seed=42).batch(args.batch, drop_remainder=True)
            .repeat().prefetch(tf.data.AUTOTUNE))
    model = build_model(args.model)
    # jit_compile explicit, as `helpers train` sets it: Keras's "auto" would give this model XLA on a GPU
    # (one process, no strategy) and the comparison would be XLA against no XLA, not the plumbing
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                  jit_compile=False)
    durations: list[float] = []
    if args.loop == "fit":
        class Timer(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                self.t = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                durations.append(time.perf_counter() - self.t)

        model.fit(ds, epochs=1, steps_per_epoch=args.steps + 1, callbacks=[Timer()], verbose=0)
    else:  # the textbook loop: GradientTape, apply_gradients, loss and hits out of the step
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = model.optimizer

        @tf.function(jit_compile=False)  # explicit, as reported: TF_FUNCTION_JIT_COMPILE_DEFAULT=true would give it XLA
        def train_step(images, labels):
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = loss_fn(labels, logits)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            hits = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), tf.cast(labels, tf.int32))
            return loss, tf.reduce_sum(tf.cast(hits, tf.float32))

        for images, labels in ds.take(args.steps + 1):
            started = time.perf_counter()
            loss, hits = train_step(images, labels)
            float(loss), float(hits)  # wait for the step, as the helpers' loop does
            durations.append(time.perf_counter() - started)
    median = statistics.median(durations[1:])
    print("RESULT " + json.dumps({"images_per_s": args.batch / median, "median_step_s": median,
                                  "first_step_s": durations[0], "steps": len(durations),
                                  "xla": args.loop == "fit" and bool(model.jit_compile)}), flush=True)  # as Keras ran it


if __name__ == "__main__":
    main()
