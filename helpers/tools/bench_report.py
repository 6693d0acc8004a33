"""The measured tables of docs/measured.md, generated from the bench's JSON, never typed.

A table in a guide is a block between two markers naming the bench.json it comes from (kept
under docs/bench/, with the run's date and machine in it):

    <!-- bench: bench/bench-2026-11-25.json -->
    ...generated...
    <!-- end bench -->

`only="TEXT"` or `except="TEXT"` after the file keeps the rows whose figure contains TEXT, or
the others: one run's JSON can give a guide's main table and a section's table.

`python -m helpers.tools.bench_report docs/measured.md` rewrites every block from its JSON;
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

    new = BLOCK.sub(block, text)
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
