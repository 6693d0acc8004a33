"""Cluster plumbing for the data-parallel TensorFlow course.

Importing this package never imports TensorFlow: several decisions (logical CPU
devices, TF_CONFIG, collective ops) must be taken before TensorFlow initialises,
so each module imports TensorFlow lazily, only where it is needed.
"""

__version__ = "0.1.0"
