"""Where the course's Horovod build lives, and running a script under `horovodrun` with it.

Horovod is not a dependency of the course: `make horovod` (`python -m helpers horovod build`,
in `helpers.commands.horovod_build`) compiles it into its own directory, and only the processes
that use it see it, on PYTHONPATH. Lesson 13 runs the Horovod recipe for real when it is there.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

from .errors import CourseError
from .settings import value

VERSION = "0.28.1"
DIR_ENV = "COURSE_HOROVOD_DIR"


def default_dir() -> Path:
    """`COURSE_HOROVOD_DIR`, else horovod/ in the course's output directory (build/ in a checkout)."""
    if value(DIR_ENV):
        return Path(value(DIR_ENV))
    from .environment import output_dir

    return output_dir() / "horovod"


def importable(site: Path) -> bool:
    """True when `site` holds a Horovod with its compiled TensorFlow library."""
    return any((Path(site) / "horovod" / "tensorflow").glob("mpi_lib*.so"))


def cache_dir() -> Path:
    """Where this machine keeps the build for exactly these versions (`make horovod` copies it from there)."""
    root = Path(value("COURSE_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "tf-hpc-course")
    python = ".".join(platform.python_version_tuple()[:2])
    return root / f"horovod-{VERSION}-tensorflow-{tensorflow_version()}-py{python}-{platform.machine()}"


def tensorflow_version() -> str:
    """The installed TensorFlow's version: a build runs against this one only."""
    for distribution in ("tensorflow-cpu", "tensorflow"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise CourseError("TensorFlow is not installed here: Horovod is built against it (make install first)")


def searched_sites() -> list[Path]:
    """Where a finished build may be, in order: the output directory's (`COURSE_OUTPUT_DIR` moves it), the
    checkout's build/ (another owner's checkout included), and the user's cache, which a build fills."""
    sites = [default_dir() / "site", Path(__file__).resolve().parents[1] / "build" / "horovod" / "site"]
    try:
        sites.append(cache_dir() / "site")
    except CourseError:  # no TensorFlow: no cache key, and nothing built against it
        pass
    return list(dict.fromkeys(sites))


def site_dir() -> Path | None:
    """The built Horovod's directory, or None when `make horovod` has not run (anywhere `searched_sites` looks)."""
    return next((site for site in searched_sites() if importable(site)), None)


def refusal(n: int) -> str | None:
    """Why `run` refuses `n` local processes here, or None where it runs them: horovodrun's rendezvous and
    Gloo ports, which no course firewall guards, stay off a login node (open to every user) and off a node
    classmates share (`COURSE_CLASS_LAYOUT=gpu`). Lesson 13 and its stopwatch ask this one question."""
    from .slurm.login_node import check_local_workers
    from .slurm.submit import class_layout

    try:
        check_local_workers(f"horovodrun with {n} processes")
    except CourseError as refused:
        return str(refused)
    if class_layout() == "gpu":
        return "COURSE_CLASS_LAYOUT=gpu: classmates' jobs share this node, and horovodrun's ports are open to them"
    return None


def run(script: str | os.PathLike, n: int, args: list[str] | None = None, *,
        deadline_s: float = 300.0) -> subprocess.CompletedProcess:
    """`horovodrun -np n --gloo` on this host: `n` processes of `script`, killed at the deadline."""
    from .kernel_watch import end_with_kernel
    from .local_workers import kill_group

    site = site_dir()
    if site is None:
        raise CourseError(f"Horovod is not built here (looked in {', '.join(map(str, searched_sites()))}): run "
                          f"`make horovod` (or `python -m helpers horovod build`), which compiles it into {default_dir()}")
    refused = refusal(n)
    if refused:
        raise CourseError(refused)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, str(site / "bin" / "horovodrun"), "-np", str(n), "--gloo", "-H", f"localhost:{n}",
               sys.executable, str(script), *(args or [])]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    release = end_with_kernel(process)  # horovodrun's workers and its rendezvous port end with the kernel
    try:
        output, _ = process.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        kill_group(process.pid)
        output, _ = process.communicate()
        raise CourseError(f"horovodrun did not finish within {deadline_s:.0f} s (killed); its output ends with: "
                          f"{output.strip().splitlines()[-1:] or ['nothing']}") from None
    finally:
        release()
    return subprocess.CompletedProcess(command, process.returncode, output, "")
