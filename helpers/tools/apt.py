"""apt-get for the course's tools and tests, one at a time: `make test` runs two pytest streams side by side
(tests/streams.py), and apt refuses a second apt-get while one runs, so every apt-get of the course waits
on one lock (slurm/local/up, a shell script, takes the same file)."""

from __future__ import annotations

import subprocess

APT_LOCK = "/var/lock/course-apt.lock"


def apt_install(*packages: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`apt-get update` and `apt-get install PACKAGES` (root), after any other apt-get of the course's."""
    script = f"apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq {' '.join(packages)}"
    return subprocess.run(["flock", APT_LOCK, "sh", "-c", script], capture_output=True, text=True, timeout=timeout)
