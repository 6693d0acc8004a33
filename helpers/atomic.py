"""Files written whole or not at all, under names nobody can guess.

A result or archive is written to a temporary file in the target's directory and renamed into
place, so a crash never leaves half a file under the real name. The temporary name is random and
created exclusively (`mkstemp`: O_CREAT|O_EXCL, no symlink followed): with a predictable name
(`results.json.partial`, `.results.json.PID.tmp`) another user of a shared directory could plant
a link there and have the course overwrite a file of the learner's choosing.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def replaced(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary path beside `path`; on success it becomes `path`, else it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(name, 0o666 & ~umask)  # the modes a plain open() would give, not mkstemp's 0600
    try:
        yield Path(name)
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    with replaced(path) as tmp:
        tmp.write_text(text)
    return Path(path)
