"""`make course`: run every notebook headless in the mode `COURSE_MODE` picks, executed copies in build/.

`auto` (the default) is workshop where a GPU is visible and quick elsewhere, as in a learner's
kernel: on a GPU node the day before a class this is the trainer's dry run at the class's size.
The first line says the mode and why; workshop and full without prepared data stop there, not
in the first lesson. Prints a summary table (notebook, status, seconds), keeps it with the run's date, commit and load in
build/course-times.json (`make course-record`: helpers/commands/course_times.py); non-zero if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

from ..settings import text, value

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def lessons() -> list[Path]:
    """The course's lessons, in course order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def executed_whole(path: Path) -> bool:
    """Every code cell of the notebook ran, and none ended in an error."""
    import nbformat

    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    return all(c.get("execution_count") for c in code) and not any(
        o.get("output_type") == "error" for c in code for o in c.get("outputs", []))


def run_notebook(path: Path, out_dir: Path, timeout: int) -> tuple[str, float, str]:
    import tempfile

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    status, detail = "ok", ""
    try:
        # IPC sockets in a private directory, not TCP on localhost: no other user can reach the
        # kernel, and the kernel has no "running over TCP without encryption" warning to print
        with tempfile.TemporaryDirectory(prefix="course-kernel-") as sockets:
            kernel = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets, "kernel"))
            try:
                NotebookClient(nb, km=kernel, timeout=timeout,
                               resources={"metadata": {"path": str(path.parent)}}).execute()
            finally:  # nbclient shuts down only kernels it made: each would hold its TensorFlow to the end
                if kernel.has_kernel:
                    kernel.shutdown_kernel()
    except CellExecutionError as exc:
        status, detail = "FAILED", _ANSI.sub("", str(exc).strip().splitlines()[-1])[:200]
    except Exception as exc:  # noqa: BLE001 - a dead kernel, a timeout: report and go on
        status, detail = "FAILED", f"{type(exc).__name__}: {exc}"[:200]
    nbformat.write(nb, out_dir / path.name)
    return status, time.perf_counter() - started, detail


def announce_mode() -> str:
    """The line that says which mode the lessons will run and why; CourseError when it cannot run."""
    from ..data import DATA_DIR_ENV, ensure_data
    from ..gpus import gpu_count_without_tf
    from ..mode import MODE_ENV, resolve_mode

    asked = text(MODE_ENV).lower() or "auto"
    mode = resolve_mode()
    why = f"{MODE_ENV}={asked}" if asked != "auto" else (
        f"auto: {gpu_count_without_tf()} GPU(s) visible" if mode == "workshop" else "auto: no GPU visible")
    if mode != "quick":
        data = ensure_data(False)  # CourseError naming COURSE_DATA_DIR when there is none
        return f"mode {mode} ({why}); data: {data.label} in {value(DATA_DIR_ENV)}"
    return f"mode quick ({why}); small SYNTHETIC data (COURSE_MODE=workshop with {DATA_DIR_ENV} for the class's size)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="build")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("notebooks", nargs="*", help="default: every notebooks/NN_*.ipynb")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    from ..errors import CourseError

    try:
        print(announce_mode(), flush=True)  # before the first kernel: a wrong mode or no data is one line
    except CourseError as exc:
        print(f"make course: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("COURSE_FIGURES_DIR", str(out / "figures"))
    paths = [Path(p) for p in args.notebooks] or lessons()
    rows = []
    total, load_before = time.perf_counter(), os.getloadavg()[0]
    for path in paths:
        print(f"[{len(rows) + 1}/{len(paths)}] {path.name} ...", end=" ", flush=True)
        rows.append((path.name, *run_notebook(path.resolve(), out / "notebooks", args.timeout)))
        print(f"{rows[-1][1]} in {rows[-1][2]:.0f} s", flush=True)
    width = max((len(r[0]) for r in rows), default=8)
    print(f"\n{'notebook':<{width}}  status  seconds")
    for name, status, seconds, detail in rows:
        print(f"{name:<{width}}  {status:<6}  {seconds:7.1f}  {detail}")
    total = time.perf_counter() - total
    print(f"{'total':<{width}}          {total:7.1f}")
    from ..atomic import write_text
    from ..mode import resolve_mode
    from .course_times import run_entry

    times = write_text(out / "course-times.json", json.dumps(
        run_entry(rows, resolve_mode(), (load_before, os.getloadavg()[0]), total), indent=1) + "\n")
    print(f"executed notebooks in {out / 'notebooks'}, figures in {out / 'figures'}, times in {times}")
    return 1 if any(r[1] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
