"""Multi-worker TensorFlow where other users are: refused on a login node, allowed on a laptop,
in an allocation, or when the machine's only user says so."""

from __future__ import annotations

import pytest

from helpers.errors import CourseError
from helpers.local_workers import run_local_workers


@pytest.fixture
def slurm_answers(tmp_path, monkeypatch):
    """A machine whose `sinfo` answers (exit status given), outside any allocation."""
    def make(status: int) -> None:
        sinfo = tmp_path / "sinfo"
        sinfo.write_text(f"#!/bin/sh\necho debug\nexit {status}\n")
        sinfo.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    for name in ("SLURM_JOB_ID", "COURSE_LOCAL_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    return make


def test_local_workers_are_refused_where_slurm_answers_outside_an_allocation(slurm_answers, monkeypatch):
    slurm_answers(0)
    with pytest.raises(CourseError, match=r"login node\?.*COURSE_ENGINES=slurm.*COURSE_LOCAL_WORKERS=allow"):
        run_local_workers(["-c", "pass"], 2, deadline_s=30)
    from helpers.engines import start_engines

    with pytest.raises(CourseError, match="2 local engines would run multi-worker TensorFlow here"):
        start_engines(2)


@pytest.mark.parametrize("where", ["no slurm", "slurm down", "allocation", "opted in"])
def test_local_workers_run_on_a_laptop_a_compute_node_or_when_allowed(slurm_answers, monkeypatch, tmp_path, where):
    if where == "no slurm":
        (tmp_path / "empty").mkdir()
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    else:
        slurm_answers(1 if where == "slurm down" else 0)
    if where == "allocation":
        monkeypatch.setenv("SLURM_JOB_ID", "42")
    if where == "opted in":
        monkeypatch.setenv("COURSE_LOCAL_WORKERS", "allow")
    outcomes = run_local_workers(["-c", "import os; print(os.environ['TF_CONFIG'][:12])"], 2, deadline_s=60)
    assert [o.returncode for o in outcomes] == [0, 0], [o.output for o in outcomes]
