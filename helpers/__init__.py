"""Cluster plumbing for the data-parallel TensorFlow course.

Importing this package never imports TensorFlow: several decisions (logical CPU
devices, TF_CONFIG, collective ops) must be taken before TensorFlow initialises,
so each module imports TensorFlow lazily, only where it is needed.
"""

import warnings

__version__ = "0.1.0"

# Our pipelines shuffle before batching (as the course teaches); Keras warns on every fit
# that its own `shuffle=True` does not apply to a tf.data.Dataset. Noise in every lesson.
warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed", category=UserWarning)
