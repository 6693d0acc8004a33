"""How hard a class's waiting polls Slurm's controller: every wait asks squeue about its own job
only, on the course's one schedule (fast at first, then every few seconds), with a deadline.

The count is taken on the local Slurm through a counting `squeue` in front of the real one, for
one lesson job's wait (lesson 11's `follow_job`, which lessons 08 and 16 share through
`wait_for_job`); docs/slurm.md gives the rate for a class of 300 from it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest

from tests.conftest import ROOT, squeue_empty

JOB_S = 30  # the stand-in lesson job's length: long enough to reach the schedule's 5 s polls


def test_no_lesson_runs_squeue_itself():
    """The lessons wait through the package's one helper: a loop of their own would poll at its own rate."""
    found = []
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for index, cell in enumerate(json.loads(notebook.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and re.search(r"""["']squeue["']""", source):
                found.append(f"{notebook.name} cell {index}")
    assert not found, f"these cells run squeue themselves (use helpers.slurm.queue.wait_for_job): {found}"


@pytest.mark.slurm
def test_one_lesson_jobs_wait_asks_squeue_about_that_job_alone_and_rarely(slurm, tmp_path, monkeypatch, report):
    from helpers.slurm.queue import POLL_FIRST_S, POLL_LIMIT_S
    from helpers.slurm.submit import follow_job

    real = shutil.which("squeue", path=slurm["env"]["PATH"])
    calls = tmp_path / "squeue-calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{slurm['env']['PATH']}")
    monkeypatch.setenv("SLURM_CONF", slurm["env"]["SLURM_CONF"])
    log = tmp_path / "job.out"
    sent = subprocess.run(["sbatch", "--parsable", "--job-name=tf-lesson-standin", f"--output={log}",
                           f"--wrap=echo started; sleep {JOB_S}; echo done"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    job = sent.stdout.strip().split(";")[0]
    assert job.isdigit(), sent.stderr
    began = time.monotonic()
    text = follow_job(job, log, "a lesson's job", deadline_s=300)
    waited = time.monotonic() - began
    assert "started" in text and "done" in text, text
    lines = calls.read_text().splitlines()
    whole = [line for line in lines if not re.search(rf"(^|\s)-j {job}(\s|$)", line)]
    assert not whole, f"squeue asked about more than the job: {whole}"
    # the schedule's pauses: POLL_FIRST_S growing by half each time to POLL_LIMIT_S, then every POLL_LIMIT_S
    bound = 9 + waited / POLL_LIMIT_S + 2
    assert len(lines) <= bound, f"{len(lines)} squeue calls in {waited:.0f} s (at most {bound:.0f}): {lines}"
    assert waited < JOB_S + POLL_LIMIT_S + 10, f"the end was seen {waited - JOB_S:.0f} s late"
    per_s = len(lines) / waited
    steady = 1 / POLL_LIMIT_S
    report(f"test_slurm_polling: one lesson job's wait ({waited:.0f} s) asked squeue {len(lines)} times, each "
           f"`squeue -h -t all -j {job}` (at once, then after {POLL_FIRST_S} s and longer pauses); {per_s:.2f}/s over the job, {steady:.1f}/s "
           f"once it runs longer: a class of 300 waiting at once about {300 * per_s:.0f}/s averaged over such a job, "
           f"{300 * steady:.0f}/s once jobs run longer")
    assert squeue_empty(slurm["env"])
