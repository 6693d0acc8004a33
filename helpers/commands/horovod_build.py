"""`python -m helpers horovod build`: Horovod 0.28.1 built against this TensorFlow (CPU, Gloo).

Horovod's last release (June 2023) predates Keras 3 and does not build against TensorFlow 2.21
as it is. Tried as a user would (`HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1
HOROVOD_WITHOUT_MPI=1 pip install --no-build-isolation horovod==0.28.1`), it fails in one source
file, and, built without it, at run time with Keras 3. This build makes the first change and nothing
else; the second is the user's script's:

1. `horovod/tensorflow/xla_mpi_ops.cc` includes TensorFlow's XLA headers, which need
   `highwayhash/arch_specific.h` and `farmhash.h` (the wheel ships both, under
   `tensorflow/include/external/`, outside the include path Horovod's build uses: `fatal error`),
   and then `tensorflow/compiler/xla/client/xla_builder.h`, which is gone (XLA moved to `xla/...`).
   Those ops only matter with `HOROVOD_ENABLE_XLA_OPS=1`; the build leaves the file out, and with it
   every include of the two hash headers (no other source of Horovod's includes them), so it needs no
   system header package, no apt-get and no root: a C++ compiler and CMake.
2. At run time, with Keras 3: `broadcast_variables` and `DistributedGradientTape.gradient` need
   TensorFlow variables (`'SymbolicTensor' object has no attribute 'assign'`, `'Variable' object
   has no attribute 'ref'`): pass each Keras variable's `.value` (lesson 13's script does).

Horovod goes into its own directory (`--target`), not into the course's environment: processes
that use it get it on PYTHONPATH (`helpers.horovod_env`). A finished build is also kept in the
user's cache (`COURSE_CACHE_DIR`, default `~/.cache/tf-hpc-course`), under a name that holds
every version it was compiled against (Horovod, TensorFlow, Python, machine): a fresh checkout
on the same machine (CI's clean clone) copies it instead of compiling again (87 s here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from ..errors import CourseError
from .apt import apt_install
from ..horovod_env import VERSION, cache_dir, default_dir, importable

# PyPI's sha256 of horovod-0.28.1.tar.gz, the only archive this recipe builds
SDIST_SHA256 = "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"

TOOLS = {"cmake": "cmake", "c++": "g++"}
XLA_LINE = 'list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc")'
BUILD_ENV = {"HOROVOD_WITH_TENSORFLOW": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1",
             "HOROVOD_WITHOUT_PYTORCH": "1", "HOROVOD_WITHOUT_MXNET": "1"}


def build(into: Path | None = None, *, quiet: bool = False) -> Path:
    """Build Horovod into `into` (default build/horovod) unless it is there; returns its site dir."""
    into = Path(into or default_dir())
    site = into / "site"
    if importable(site):
        _say(quiet, f"Horovod {VERSION} is already built in {site}")
        return site
    cached = cache_dir() / "site"
    if importable(cached):
        shutil.copytree(cached, site, symlinks=True, dirs_exist_ok=True)
        _say(quiet, f"Horovod {VERSION} copied from the build cache {cached.parent}")
        return site
    started = time.perf_counter()
    _build_tools(quiet)
    source = _patched_source(into / "src", quiet)
    _say(quiet, f"compiling Horovod {VERSION} with Gloo against TensorFlow (a few minutes on 2 cores; "
                f"log: {into / 'build.log'})")
    env = {**os.environ, **BUILD_ENV, "MAKEFLAGS": f"-j{os.cpu_count() or 2}"}
    with open(into / "build.log", "w") as log:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                               "--target", str(site), str(source)], env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0 or not importable(site):
        raise CourseError(f"Horovod did not build (exit status {done.returncode}): the first error is in "
                          f"{into / 'build.log'} (grep -n 'error' it)")
    _dependencies(site)
    _say(quiet, f"Horovod {VERSION} built in {time.perf_counter() - started:.0f} s: {site}")
    _keep_in_cache(site)
    return site


def _keep_in_cache(site: Path) -> None:
    """Copy the build into the cache whole, or not at all (renamed into place when complete)."""
    target = cache_dir() / "site"
    if importable(target):
        return
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = target.with_name(f"site.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(site, partial, symlinks=True)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, flush=True)


def _build_tools(quiet: bool) -> None:
    """A compiler and CMake, the build's only needs beyond TensorFlow's wheel; installed with apt-get when root."""
    missing = sorted(package for tool, package in TOOLS.items() if shutil.which(tool) is None)
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise CourseError(f"Horovod's build needs {', '.join(missing)}: ask for them "
                          f"(`apt-get install {' '.join(missing)}`, or your centre's modules), then run this again")
    _say(quiet, f"installing {', '.join(missing)} with apt-get")
    done = apt_install(*missing)
    if done.returncode != 0:
        raise CourseError(f"apt-get install {' '.join(missing)} failed (exit status {done.returncode}): "
                          f"{done.stderr.strip()[-500:]}")


def _patched_source(where: Path, quiet: bool) -> Path:
    """Horovod's sdist from PyPI, with the XLA ops left out of its TensorFlow library."""
    where.mkdir(parents=True, exist_ok=True)
    source = where / f"horovod-{VERSION}"
    if not source.exists():
        _say(quiet, f"downloading horovod=={VERSION} (source)")
        # pinned: its setup.py runs as whoever builds (root in CI), so only this exact archive may
        pinned = where / "horovod-requirement.txt"
        pinned.write_text(f"horovod=={VERSION} --hash=sha256:{SDIST_SHA256}\n")
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        "--require-hashes", "-d", str(where), "-r", str(pinned)], check=True)
        with tarfile.open(where / f"horovod-{VERSION}.tar.gz") as archive:
            # the "data" filter refuses links out of the tree (Python 3.11.4+; PyPI's own sdist otherwise)
            archive.extractall(where, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    leave_out_xla_ops(source / "horovod" / "tensorflow" / "CMakeLists.txt")
    return source


def leave_out_xla_ops(cmake: Path) -> bool:
    """Comment out the XLA ops in Horovod's TensorFlow CMakeLists; False when already done."""
    text = cmake.read_text()
    lines = text.splitlines(keepends=True)
    listed = [i for i, line in enumerate(lines) if line.strip() == XLA_LINE]
    if not listed:
        if XLA_LINE in text:  # commented out by an earlier build
            return False
        raise CourseError(f"{cmake} does not list xla_mpi_ops.cc: this build recipe is for Horovod {VERSION} only")
    for i in listed:
        lines[i] = f"# left out by the course (TensorFlow moved XLA's headers): {lines[i]}"
    cmake.write_text("".join(lines))
    return True


# What Horovod 0.28.1 imports beyond TensorFlow, by module, pinned: pip runs as whoever builds
# (root in CI), so only these releases may come in (psutil and PyYAML as in the course's environment,
# where lesson 13 runs with them; cloudpickle, which that environment lacks, at 3.1.2)
DEPENDENCIES = {"cloudpickle": "cloudpickle==3.1.2", "psutil": "psutil==7.2.2", "yaml": "pyyaml==6.0.4"}


def _dependencies(site: Path) -> None:
    """What Horovod imports and the course's environment lacks, into Horovod's directory."""
    import importlib.util

    missing = [pinned for module, pinned in DEPENDENCIES.items() if importlib.util.find_spec(module) is None]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(site), "--no-deps", *missing],
                       check=True)
