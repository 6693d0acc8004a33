"""`make fullcheck`: every notebook in workshop and full mode at full data size, on a CPU.

No GPU with TensorFlow can be had on the course's test machines, so this runs the modes a GPU
class uses on SYNTHETIC CIFAR-10 of the real size (50,000 / 10,000 images in the real binary
format, prepared once), with the class override turned down to the smallest run that still
does the full-size arithmetic (`COURSE_EPOCHS=1`, `COURSE_MAX_STEPS`), and the lessons with a
replica or worker count again with other counts. Prints one row per run (notebook, mode, shape,
status, minutes) and writes them to `fullcheck.md` in its output directory.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

from ..data import TEST_SIZE as FULL_TEST
from ..data import TRAIN_SIZE as FULL_TRAIN
from ..data import quick_data_dir
from .course_run import lessons, run_notebook
# other shapes: the parameter cell's names, and the values tried beside the default
SHAPES = {
    "CPU_REPLICAS": (1, 4),  # logical CPU replicas of the one-process lessons
    "MAX_REPLICAS": (4,),  # lesson 07's largest replica count
    "N_ENGINES": (3, 4),  # workers of the engine lessons (4: lesson 15's kernel then has 3 replicas, lcm 12)
    "NODES": (3,),  # workers of the batch-job lessons (local processes here)
    "WORKERS": (3,),  # lesson 14's engines
    "PS_WORKERS": (3,),  # lesson 12's parameter-server workers
}
# a notebook's own further shapes: lesson 10 at 3 replicas, which its small global batch of 32 does not divide;
# lesson 18 at a global batch of 18, whose 48 examples make an epoch's last step shorter (18, 18, 12)
NOTEBOOK_SHAPES = {"10_large_batches.ipynb": ({"CPU_REPLICAS": 3},), "18_your_own_script.ipynb": ({"GLOBAL_BATCH": 18},)}


def full_size_data(cache: Path) -> Path:
    """SYNTHETIC CIFAR-10 at the real split sizes, prepared once into `cache`."""
    from ..data import dataset_info, prepare, synth_archive

    target = cache / f"synthetic-cifar10-{FULL_TRAIN}"
    try:
        info = dataset_info(target)
        if info.train_size == FULL_TRAIN and info.test_size == FULL_TEST:
            return target
    except Exception:  # noqa: BLE001 - not prepared yet
        pass
    print(f"preparing SYNTHETIC CIFAR-10 at full size ({FULL_TRAIN} / {FULL_TEST} images) in {target} ...", flush=True)
    archive = synth_archive(cache / f"synthetic-{FULL_TRAIN}.tar.gz", FULL_TRAIN, FULL_TEST)
    prepare(archive, target)
    archive.unlink()
    return target


def with_parameters(path: Path, values: dict[str, int], out_dir: Path) -> Path:
    """A copy of the notebook whose parameter cell (its first code cell) sets `values`."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    for name, value in values.items():
        cell.source, found = re.subn(rf"^{name}\s*=\s*[^#\n]*", f"{name} = {value!r}  ", cell.source, flags=re.M)
        if not found:
            raise ValueError(f"{path.name} has no parameter {name}")
    copy = out_dir / path.name
    nbformat.write(nb, copy)
    return copy


def shapes_of(path: Path) -> list[dict[str, int]]:
    """The default shape, then each other value of each count the notebook's parameter cell has, then its own."""
    import nbformat

    first = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code").source
    found = [{name: value} for name, values in SHAPES.items() if re.search(rf"^{name}\s*=", first, re.M)
             for value in values]
    return [{}, *found, *NOTEBOOK_SHAPES.get(path.name, ())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="build/fullcheck")
    parser.add_argument("--modes", default="workshop,full")
    parser.add_argument("--max-steps", type=int, default=4, help="COURSE_MAX_STEPS of every run (default 4)")
    parser.add_argument("--no-shapes", action="store_true", help="the notebooks' own counts only")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument("notebooks", nargs="*", help="default: every notebooks/NN_*.ipynb")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    data_dir = full_size_data(quick_data_dir().parent)  # beside quick mode's synthetic data
    os.environ.update({"COURSE_DATA_DIR": str(data_dir), "COURSE_EPOCHS": "1", "COURSE_MAX_STEPS": str(args.max_steps),
                       "TF_CPP_MIN_LOG_LEVEL": "2", "COURSE_FIGURES_DIR": str(out / "figures")})
    os.environ.pop("SLURM_CONF", None)  # the laptop path: local processes, not a Slurm that may be up
    paths = [Path(p) for p in args.notebooks] or lessons()
    rows = []
    for mode in args.modes.split(","):
        os.environ["COURSE_MODE"] = mode
        for path in paths:
            for shape in ([{}] if args.no_shapes else shapes_of(path)):
                label = ", ".join(f"{k}={v}" for k, v in shape.items()) or "default"
                run_dir = out / "notebooks" / f"{mode}-{label.replace('=', '').replace(', ', '-')}"
                run_dir.mkdir(parents=True, exist_ok=True)
                source = with_parameters(path, shape, run_dir) if shape else path
                print(f"[{len(rows) + 1}] {path.name} {mode} {label} ...", end=" ", flush=True)
                status, seconds, detail = run_notebook(source, run_dir, args.timeout)
                rows.append((path.name, mode, label, status, seconds / 60, detail))
                print(f"{status} in {seconds / 60:.1f} min", flush=True)
    table = ["| notebook | mode | shape | status | minutes |", "|---|---|---|---|---|"]
    table += [f"| {n} | {m} | {s} | {st}{' (' + d + ')' if d else ''} | {mins:.1f} |" for n, m, s, st, mins, d in rows]
    table.append(f"\nCOURSE_EPOCHS=1, COURSE_MAX_STEPS={args.max_steps}, SYNTHETIC data at {FULL_TRAIN} / {FULL_TEST} "
                 f"images, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")
    (out / "fullcheck.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0 if all(r[3] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
