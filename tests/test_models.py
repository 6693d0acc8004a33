import pytest

from helpers import models
from helpers.errors import CourseError


def test_small_cnn_shapes_and_sync_switch():
    import keras

    model = models.small_cnn()
    assert model.output_shape == (None, 10)
    bns = [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
    assert bns and not any(l.synchronized for l in bns)
    assert models.synchronize_batch_norm(model) == len(bns)
    assert all(l.synchronized for l in bns)
    assert all(l.synchronized for l in models.small_cnn(sync_bn=True).layers
               if isinstance(l, keras.layers.BatchNormalization))


def test_resnet50_for_cifar():
    model = models.resnet50(sync_bn=True)
    assert model.input_shape == (None, 32, 32, 3) and model.output_shape == (None, 10)
    assert 23.5e6 < model.count_params() < 23.7e6
    import keras

    bns = [l for l in model._flatten_layers() if isinstance(l, keras.layers.BatchNormalization)]
    assert len(bns) == 53 and all(l.synchronized for l in bns)


def test_unknown_model():
    with pytest.raises(CourseError, match="unknown model"):
        models.build_model("vgg")
