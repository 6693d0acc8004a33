"""Take-home modules: files a lesson copies beside its program, which then imports nothing from the course.

`mwms_slurm.py` is the plumbing of every multi-worker job program (TF_CONFIG from Slurm, the GPU
choice, Keras 3's fit fix, the strategy); lesson 08 explains it, lessons 06, 07, 11, 16 and 17 copy
it. It imports nothing of the course, so a copy runs wherever TensorFlow does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

MODULE = Path(__file__).with_name("mwms_slurm.py")


def copy_beside(directory: str | Path) -> Path:
    """Copy `mwms_slurm.py` into `directory` (made if missing), beside a program that imports it; the copy's path.

    Python puts a script's own directory first on `sys.path`, so `import mwms_slurm` finds the copy."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(MODULE, target / MODULE.name))
