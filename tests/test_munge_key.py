"""slurm/local/up creates the munge key owner-only from its first byte (before its chown/chmod).

The script's key-creation block runs as written, with /etc/munge moved into a temporary
directory and `chown` replaced by a shell function that records the key's mode at that moment:
right after the key is written, before any chmod. Under a umask of 022 (root's usual) or 000,
a key created plainly is readable by every user until the chmod runs; the key signs every
Slurm message, so whoever reads it can act as any user of the cluster.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import ROOT


def key_block() -> str:
    """The `if [ ! -s /etc/munge/munge.key ]; then ... fi` block of slurm/local/up."""
    text = (ROOT / "slurm" / "local" / "up").read_text()
    found = re.search(r"^( *)if \[ ! -s /etc/munge/munge\.key \]; then\n.*?^\1fi\n", text, re.M | re.S)
    assert found, "slurm/local/up no longer creates /etc/munge/munge.key in an `if [ ! -s ... ]` block"
    return found.group(0)


@pytest.mark.parametrize("umask", ["022", "000"])
@pytest.mark.parametrize("left", ["no key", "an empty key left readable"])
def test_the_munge_key_is_never_readable_by_others(tmp_path, umask, left, report):
    etc = tmp_path / "etc" / "munge"
    if left != "no key":
        etc.mkdir(parents=True)
        (etc / "munge.key").touch(mode=0o666)
        (etc / "munge.key").chmod(0o666)
    block = key_block().replace("/etc/munge", str(etc))
    script = (f'umask {umask}\nchown() {{ stat -c %a "${{@: -1}}" >> "{tmp_path}/modes"; }}\n' + block)
    done = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    at_chown = (tmp_path / "modes").read_text().split()
    final = oct((etc / "munge.key").stat().st_mode & 0o777)
    assert (etc / "munge.key").stat().st_size == 1024
    assert at_chown and int(at_chown[0], 8) & 0o077 == 0, f"the key was mode {at_chown[0]} before its chmod"
    assert final == "0o400", final
    report(f"{__name__.rsplit('.', 1)[-1]}: umask {umask}, {left}: key mode {at_chown[0]} when written, {final[2:]} after")
