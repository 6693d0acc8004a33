"""`python -m helpers check-script`, a learner's own training script run as 1 and N workers and checked: its modules.

The command and its options (`command`, `options`); the runs (`launch`); on the workers' side the launcher
each worker runs under (`worker`), its wrappers on TensorFlow and Keras (`watch`), what it records (`record`)
and its working directory of its own (`cwd`); the checks (`analysis`, `inputs`, `files`) and a report's lines
and verdicts (`findings`).
"""

from .command import main
from .options import Options, option_name

__all__ = ["Options", "main", "option_name"]
