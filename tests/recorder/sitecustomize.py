"""Test support, not a test: with this directory on PYTHONPATH and TEST_RECORD_DIR set, every Python
process records, as JSON lines in that directory, its GPU environment when TensorFlow initialises and every
all-reduce it asks for (CommunicationOptions, NcclAllReduce) or MirroredStrategy picks for it. tests/test_lessons_in_class_layouts.py reads
them for every process a lesson started: kernel, engines, local workers."""

import json
import os
import socket
import sys
from importlib.abc import MetaPathFinder

OUT = os.environ.get("TEST_RECORD_DIR")
SEEN = ("CUDA_VISIBLE_DEVICES", "COURSE_GPU_MEMORY_MIB", "TF_FORCE_GPU_ALLOW_GROWTH", "COURSE_CLASS_LAYOUT",
        "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_STEP_ID", "IPP_COURSE_LOCAL")


def record(kind: str, **fields) -> None:
    entry = {"kind": kind, "pid": os.getpid(), "host": socket.gethostname(), "argv": sys.argv[:3],
             "env": {name: os.environ.get(name) for name in SEEN}, "tf_config": "TF_CONFIG" in os.environ, **fields}
    with open(os.path.join(OUT, f"{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(entry) + "\n")


def _patch(module) -> None:
    name = module.__name__
    if name == "tensorflow.python.eager.context":
        original = module.Context.ensure_initialized

        def ensure_initialized(self):
            first = self._context_handle is None
            original(self)
            if first:
                record("tensorflow started")
        module.Context.ensure_initialized = ensure_initialized
    elif name == "tensorflow.python.distribute.collective_util":
        # the public CommunicationOptions(...) only: TensorFlow makes Options of its own inside (MirroredStrategy
        # starts from NCCL and then picks RING on CPUs), recorded below where they end up
        original_new = module._OptionsExported.__new__

        def options_new(cls, *args, **kwargs):
            options = original_new(cls, *args, **kwargs)
            record("collective", implementation=str(getattr(options.implementation, "name", options.implementation)))
            return options
        module._OptionsExported.__new__ = options_new
    elif name == "tensorflow.python.distribute.mirrored_strategy":
        original_extended = module.MirroredExtended.__init__

        def extended_init(self, container_strategy, devices=None, cross_device_ops=None):
            original_extended(self, container_strategy, devices, cross_device_ops)
            chosen = getattr(self, "_cross_device_ops", None)
            if cross_device_ops is None and type(chosen).__name__ == "CollectiveAllReduce":  # TensorFlow's choice
                implementation = self._communication_options.implementation
                record("collective", implementation=str(getattr(implementation, "name", implementation)),
                       strategy="MirroredStrategy")
        module.MirroredExtended.__init__ = extended_init
    elif name == "tensorflow.python.distribute.cross_device_ops":
        original_nccl = module.NcclAllReduce.__init__

        def nccl_init(self, *args, **kwargs):
            record("collective", implementation="NcclAllReduce")
            original_nccl(self, *args, **kwargs)
        module.NcclAllReduce.__init__ = nccl_init


class _AfterImport(MetaPathFinder):
    """Patches the three TensorFlow modules right after they are first executed."""

    WANTED = ("tensorflow.python.eager.context", "tensorflow.python.distribute.collective_util",
              "tensorflow.python.distribute.cross_device_ops", "tensorflow.python.distribute.mirrored_strategy")

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.WANTED:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def patched_exec(module, exec_module=exec_module):
                    exec_module(module)
                    _patch(module)
                spec.loader.exec_module = patched_exec
                return spec
        return None


if OUT:
    sys.meta_path.insert(0, _AfterImport())
