"""The measured tables of docs/measured.md, generated from the bench's JSON, never typed.

A table in a guide is a block between two markers naming the bench.json it comes from (kept
under docs/bench/, with the run's date and machine in it):

    <!-- bench: bench/bench-2026-11-25.json -->
    ...generated...
    <!-- end bench -->

`only="TEXT"` or `except="TEXT"` after the file keeps the rows whose figure contains TEXT, or
the others: one run's JSON can give a guide's main table and a section's table.

A "Verified on" block lists every smoke run's JSON (`make gpucheck`) matching a pattern, one row each:

    <!-- gpucheck: bench/gpucheck-*.json -->
    ...generated...
    <!-- end gpucheck -->

`python -m helpers.commands.bench_report docs/measured.md` rewrites every block from its JSON;
`--check` says which block differs (the docs test runs it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ..errors import CourseError

BLOCK = re.compile(r'(<!-- bench: (?P<source>\S+)(?: (?P<how>only|except)="(?P<text>[^"]+)")? -->\n)'
                   r"(?P<body>.*?)(?P<end><!-- end bench -->)", re.S)


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.2f}"


def render(bench: dict, source: str, how: str | None = None, text: str | None = None) -> str:
    """A markdown table of the run's rows (those whose figure has `text`, or has it not, as `how`
    says), headed by where, when and how they were measured."""
    m = bench["machine"]
    head = (f"Generated from `{source}`: {m.get('date', 'date not recorded')}, {m['host']} ({m['cpus']} CPUs, "
            f"{m['gpus']} GPUs, {m['processor']}, Python {m['python']}), {m['data']}, "
            f"{m.get('repeats', '?')} interleaved repeats, rows {', '.join(m.get('rows', ['?']))}, "
            f"{m.get('seconds', '?')} s in all.")
    lines = [head, "", "| figure | ours | baseline | ratio | target | met | note |", "|---|---|---|---|---|---|---|"]
    for row in bench["rows"]:
        if how and (text in row["figure"]) != (how == "only"):
            continue
        cells = [row["figure"].replace("|", "/"), f"{_number(row['ours'])} {row['unit']}".strip(),
                 _number(row["baseline"]), _number(row["ratio"]), row["target"], row["met"],
                 row["note"].replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


GPUCHECK = re.compile(r"(<!-- gpucheck: (?P<pattern>\S+) -->\n)(?P<body>.*?)(?P<end><!-- end gpucheck -->)", re.S)


def _step(doc: dict, name: str) -> str:
    """One step of a smoke run as a table cell: its figure when it ran, else its status and why."""
    step = doc["steps"][name]
    if step["status"] != "ok":
        return f"{step['status']}: {step['reason']}".replace("|", "/")
    f = step.get("figures", {})
    if name == "build":
        return (f"TF {f['tensorflow']}, " + (f"CUDA {f['cuda']}, cuDNN {f['cudnn']}" if f["cuda_build"] else "CPU build")
                + f", sees {f['gpus_seen']} of {f['gpus_allocated']} GPUs")
    if name.startswith("allreduce"):
        bus = f["bus_gb_per_s"]
        return f"{bus[max(bus, key=int)]:.1f} GB/s bus at {int(max(bus, key=int)) / 1e6:.0f} MB, {', '.join(f['nccl_transports'])}"
    if name == "resnet50-mixed":
        return f"{f['images_per_s']:,.0f} images/s (batch {f['batch']}), peak {f['peak_gpu_mib']:,.0f} MiB"
    if name == "lessons":
        return "; ".join(f"{r['lesson']} {r['status']} {r['minutes']:.1f} min (predicted {r['predicted_training_minutes']:.1f})"
                         for r in f["lessons"]) + f" [{f['mode']}]"
    return "ok" + (f": {step['reason']}" if step.get("reason") else "")


def render_gpuchecks(docs: list[tuple[str, dict]], pattern: str) -> str:
    """The "Verified on" table: one row per smoke run, what ran and what was skipped (and why)."""
    lines = [f"Generated from `{pattern}` ({len(docs)} file(s)).", "",
             "| date | machine | TensorFlow build | NCCL in the node | NCCL between tasks | ResNet50 mixed precision "
             "| nested job | lessons |", "|---|---|---|---|---|---|---|---|"]
    for source, doc in docs:
        m = doc["machine"]
        gpus = f"{len(m['gpu_names'])} x {m['gpu_names'][0]}" if m["gpu_names"] else "no GPU"
        cells = [doc["date"], f"{doc['host']} ({m['cpus']} CPUs, {gpus})",
                 *(_step(doc, n) for n in ("build", "allreduce-node", "allreduce-tasks", "resnet50-mixed",
                                           "nested-job", "lessons"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def update(page: Path, check: bool = False) -> list[str]:
    """Rewrite (or, with `check`, compare) every bench block of `page`; returns the blocks that differed."""
    text = page.read_text()
    differed = []

    def block(match: re.Match) -> str:
        source = match.group("source")
        path = page.parent / source
        if not path.exists():
            raise CourseError(f"{page}: the bench block names {source}, which is not there")
        body = render(json.loads(path.read_text()), source, match.group("how"), match.group("text"))
        if body != match.group("body"):
            differed.append(source)
        return match.group(1) + body + match.group("end")

    def gpucheck_block(match: re.Match) -> str:
        from .gpucheck import validate

        pattern = match.group("pattern")
        docs = []
        for path in sorted(page.parent.glob(pattern)):
            doc = json.loads(path.read_text())
            problems = validate(doc)
            if problems:
                raise CourseError(f"{path.name} is not a gpucheck document: {'; '.join(problems)}")
            docs.append((path.name, doc))
        body = render_gpuchecks(docs, pattern)
        if body != match.group("body"):
            differed.append(pattern)
        return match.group(1) + body + match.group("end")

    new = GPUCHECK.sub(gpucheck_block, BLOCK.sub(block, text))
    if not check and new != text:
        page.write_text(new)
    return differed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is not its JSON's")
    args = parser.parse_args(argv)
    try:
        stale = [f"{page}: {source}" for page in args.pages for source in update(page, args.check)]
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in stale:
        print(("differs from its JSON: " if args.check else "rewritten: ") + line)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
