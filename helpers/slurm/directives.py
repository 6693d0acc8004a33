"""The options a batch script's `#SBATCH` lines give, read as `sbatch` reads them.

`man sbatch`: options come from lines starting with `#SBATCH` *before any executable command*;
sbatch stops reading them at the first line that is neither blank nor a comment. So a
commented-out `# #SBATCH --exclusive=user` (or `##SBATCH ...`) asks for nothing, and neither does
an `#SBATCH` line after the first command: a search of the file's text for the line would count
both. Words after `#SBATCH` split as a shell would, a word starting with `#` beginning a comment.
"""

from __future__ import annotations

import shlex

from ..errors import CourseError

DIRECTIVE = "#SBATCH"


def sbatch_options(script: str) -> list[str]:
    """The options of `script`'s `#SBATCH` block, in order (e.g. ['--nodes=2', '--exclusive=user'])."""
    options = []
    for number, line in enumerate(script.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break  # the first command: sbatch reads no directive after it
        if line.startswith(DIRECTIVE) and line[len(DIRECTIVE):len(DIRECTIVE) + 1] in (" ", "\t"):
            try:
                options += shlex.split(line[len(DIRECTIVE):], comments=True)
            except ValueError as exc:
                raise CourseError(f"line {number} of the batch script: {exc}: {line.strip()!r}") from None
    return options
