"""`python -m helpers check-script`: a learner's own training script, run small and checked.

The script runs unchanged at a toy size, once as one worker with global batch B and once as N
workers with the same global batch (local processes forked after one import of TensorFlow, or
the tasks of a Slurm step), each worker watched (`worker`), which writes what it saw to a
JSON file. This module runs them, lists the files a run changed (`files`), has the runs
compared (`analysis`) and prints one PASS / FAIL / NOT SEEN line per check, with the fix in
the script's terms, then the verdict: passed (exit 0), FAILED (1) or incomplete (3: a check
could not see; `findings`). The contract and the limits are in docs/check-your-script.md.
"""

from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path

from .analysis import analyse, crash_findings
from .cwd import tree
from .files import changed, snapshot, watched_roots
from .findings import verdict
from .launch import Run, run_local, run_slurm, scratch_dir
from .options import Options, check_options, option_name, script_args

__all__ = ["Options", "main", "option_name"]


def _one_run(opts: Options, n: int, out: Path, roots: list[Path], scratch: Path) -> Run:
    """A run of `n` workers, with the files it changed under `roots`."""
    before = snapshot(roots, scratch)
    runner = run_slurm if opts.slurm else run_local
    run = runner(opts.script.resolve(), script_args(opts, n), n, out, opts.deadline_s)
    run.changed, run.existed = changed(before, snapshot(roots, scratch)), set(before)
    return run


def _hosts(run: Run) -> str:
    hosts = [run.reports[r].get("host", "?") for r in sorted(run.reports)]
    return ", ".join(dict.fromkeys(hosts)) or "(no worker reported)"


def main(opts: Options) -> int:
    check_options(opts)
    began = time.monotonic()
    scratch, remove = scratch_dir(opts.slurm, opts.keep)
    roots = watched_roots(opts.script, opts.script_args, Path.cwd(), scratch)
    try:
        tree(Path.cwd(), scratch)  # refused here, in one line, before any run, when too large to repeat per worker
        ref = _one_run(opts, 1, scratch / "1-worker", roots, scratch)
        runs = [] if (crash_findings(ref, "1 worker") or 0 not in ref.reports) else \
            [_one_run(opts, n, scratch / f"{n}-workers", roots, scratch) for n in opts.workers]
        sections = analyse(ref, runs, opts)
    finally:
        if remove:
            shutil.rmtree(scratch, ignore_errors=True)
    where = "Slurm tasks" if opts.slurm else "local processes"
    print(f"check-script {opts.script}: global batch {opts.global_batch}, {opts.batch_flag} "
          f"({'global' if opts.batch_is_global else 'per replica'}), {where}; "
          f"script options: {shlex.join(opts.script_args) or '(none)'}")
    print("  " + "; ".join(f"{r.workers} worker{'s' if r.workers > 1 else ''}: {r.seconds:.0f} s on {_hosts(r)}"
                           for r in [ref, *runs]))
    notes = dict.fromkeys(note for r in [ref, *runs] for rep in r.reports.values() for note in rep.get("notes", []))
    if notes:
        print("  turned off or kept on the CPU for the check: " + "; ".join(notes))
    findings = []
    for label, found in sections:
        print(f"{label}:")
        for finding in found:
            findings.append(finding)
            for line in finding.lines():
                print("  " + line)
    status, word, detail = verdict(findings)
    print(f"{word} in {time.monotonic() - began:.0f} s, exit status {status}: {detail} "
          "(what the command cannot see: docs/check-your-script.md)")
    return status
