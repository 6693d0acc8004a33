"""`make course`: run every notebook headless in quick mode, executed copies in build/.

Prints a summary table (notebook, status, seconds) and exits non-zero if any failed.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="build")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("notebooks", nargs="*", help="default: every notebooks/NN_*.ipynb")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("COURSE_MODE", "quick")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("COURSE_FIGURES_DIR", str(out / "figures"))
    paths = [Path(p) for p in args.notebooks] or lessons()
    rows = []
    total = time.perf_counter()
    for path in paths:
        print(f"[{len(rows) + 1}/{len(paths)}] {path.name} ...", end=" ", flush=True)
        rows.append((path.name, *run_notebook(path.resolve(), out / "notebooks", args.timeout)))
        print(f"{rows[-1][1]} in {rows[-1][2]:.0f} s", flush=True)
    width = max((len(r[0]) for r in rows), default=8)
    print(f"\n{'notebook':<{width}}  status  seconds")
    for name, status, seconds, detail in rows:
        print(f"{name:<{width}}  {status:<6}  {seconds:7.1f}  {detail}")
    print(f"{'total':<{width}}          {time.perf_counter() - total:7.1f}")
    print(f"executed notebooks in {out / 'notebooks'}, figures in {out / 'figures'}")
    return 1 if any(r[1] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
