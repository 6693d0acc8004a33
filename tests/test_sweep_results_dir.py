"""slurm/sweep writes its runs' results where lesson 07 reads them: the course's output directory's results/
(helpers.environment.output_dir), whatever COURSE_DIR the sweep is run from; `python -m helpers results --where`."""

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LESSON_07_READS = "from helpers.environment import output_dir; print(output_dir() / 'results')"


def _made(path: Path, existed: bool) -> None:
    """Remove `path` again when this test made it and it is still empty (the checkout's build/results, logs)."""
    if not existed and path.is_dir() and not any(path.iterdir()):
        path.rmdir()


def test_the_sweeps_jobs_write_where_lesson_07_reads(tmp_path):
    """The sweep run from a course directory that is not the helpers' checkout (a course installed once for
    everybody, run with COURSE_DIR set) and no COURSE_OUTPUT_DIR: the COURSE_OUTPUT_DIR its jobs get (a
    stand-in sbatch records it) holds the results/ lesson 07 reads in the same environment. The old sweep
    gave them $COURSE_DIR/build, which lesson 07 never reads."""
    bin_dir, saw = tmp_path / "bin", tmp_path / "sbatch-saw"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/sh\necho "$COURSE_OUTPUT_DIR" >> "$SBATCH_SAW"\necho 4242\n')
    (bin_dir / "sbatch").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "COURSE_OUTPUT_DIR"}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", SBATCH_SAW=str(saw), COURSE_DIR=str(tmp_path / "installed"),
               COURSE_PYTHON=sys.executable)
    reads = Path(subprocess.run([sys.executable, "-c", LESSON_07_READS], env=env, capture_output=True, text=True,
                                check=True, cwd=tmp_path).stdout.strip())
    existed = {p: p.exists() for p in (reads, reads.parent / "logs")}
    try:
        done = subprocess.run([str(ROOT / "slurm/sweep"), "--workers", "1 2", "--no-wait"], env=env,
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        given = saw.read_text().split()
        assert len(given) == 2 and {Path(g) / "results" for g in given} == {reads}, (given, reads)
        assert reads.is_dir()
    finally:
        for path, was in existed.items():
            _made(path, was)


def test_results_where_prints_the_directory_and_the_table_reads_it(tmp_path):
    env = {**os.environ, "COURSE_OUTPUT_DIR": str(tmp_path / "out")}
    where = subprocess.run([sys.executable, "-m", "helpers", "results", "--where"], env=env, capture_output=True,
                           text=True, check=True, cwd=tmp_path).stdout.strip()
    assert where == str(tmp_path / "out" / "results")
    none = subprocess.run([sys.executable, "-m", "helpers", "results"], env=env, capture_output=True, text=True,
                          cwd=tmp_path)
    assert none.returncode == 2 and f"no results in {where}" in none.stderr, none.stderr
