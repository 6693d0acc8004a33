"""Models of the course: a small CNN for fast lessons and ResNet50 for 32x32 CIFAR-10.

Synchronized batch normalisation is Keras 3's `BatchNormalization(synchronized=True)`
(TensorFlow backend): under a distribution strategy it all-reduces the batch statistics,
so every replica normalises with the global batch's mean and variance.
"""

from __future__ import annotations

from .errors import CourseError

MODELS = ("cnn", "resnet50")
INPUT_SHAPE = (32, 32, 3)


def small_cnn(num_classes: int = 10, sync_bn: bool = False, seed: int = 42):
    """A four-layer CNN with batch normalisation, trainable on CPU in seconds."""
    import keras
    from keras import layers

    init = keras.initializers.GlorotUniform(seed=seed)

    def block(filters):
        return [layers.Conv2D(filters, 3, padding="same", use_bias=False, kernel_initializer=init),
                layers.BatchNormalization(momentum=0.9, synchronized=sync_bn),
                layers.ReLU(), layers.MaxPooling2D()]

    return keras.Sequential(
        [keras.Input(INPUT_SHAPE), *block(32), *block(64),
         layers.GlobalAveragePooling2D(),
         layers.Dense(num_classes, kernel_initializer=init, dtype="float32")],  # float32 logits
        name="small_cnn")


def resnet50(num_classes: int = 10, sync_bn: bool = False, seed: int = 42):
    """ResNet50 (23.6 M parameters) from random weights on 32x32 inputs, logits out."""
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.applications.ResNet50(weights=None, input_shape=INPUT_SHAPE,
                                        classes=num_classes, classifier_activation=None)
    if sync_bn:
        synchronize_batch_norm(model)
    return model


def synchronize_batch_norm(model) -> int:
    """Switch every BatchNormalization layer of `model` to synchronized; returns how many.

    Works on a built model before its first training step: the flag is read when the
    layer's training call is traced, and the weights stay as they are.
    """
    import keras

    count = 0
    for layer in model._flatten_layers(include_self=False):  # noqa: SLF001 - nested models too
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.synchronized = True
            count += 1
    return count


def build_model(name: str, num_classes: int = 10, sync_bn: bool = False, seed: int = 42):
    """The model called `name` (one of MODELS)."""
    if name == "cnn":
        return small_cnn(num_classes, sync_bn=sync_bn, seed=seed)
    if name == "resnet50":
        return resnet50(num_classes, sync_bn=sync_bn, seed=seed)
    raise CourseError(f"unknown model {name!r}: use one of {', '.join(MODELS)}")


def compile_for_classification(model, learning_rate: float, steps_per_execution: int = 1,
                               xla: bool = False):
    """Compile with SGD+momentum and sparse cross-entropy on logits, the course's recipe.

    `xla=True` compiles the train step with XLA (`jit_compile`), which pays on GPUs.
    """
    import keras

    model.compile(optimizer=keras.optimizers.SGD(learning_rate, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], steps_per_execution=steps_per_execution, jit_compile=xla)
    return model


def use_mixed_precision(enabled: bool) -> str:
    """Set Keras's global dtype policy: mixed_float16 (GPU tensor cores) or float32.

    Call before building the model; Keras computes the loss in float32 either way.
    """
    import keras

    policy = "mixed_float16" if enabled else "float32"
    keras.mixed_precision.set_global_policy(policy)
    return policy
