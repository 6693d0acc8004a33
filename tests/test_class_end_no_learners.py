"""`class end` that finds no learner fails, naming the class and why: a reservation for accounts
(`Accounts=`, `Users=(null)`), or an empty hub group, once reported "class ended: 0 learner(s)"
with exit 0, while the class's servers kept running."""

from __future__ import annotations

import os

from tests.conftest import run_cli

RESERVATION = ("ReservationName=day1 StartTime=2026-11-29T08:00:00 EndTime=2026-11-29T18:00:00 Duration=10:00:00 "
               "Nodes=node[1-2] NodeCnt=2 CoreCnt=8 Features=(null) PartitionName=debug Flags=SPEC_NODES TRES=cpu=8 "
               "Users=(null) Groups=(null) Accounts=course Licenses=(null) State=ACTIVE BurstBuffer=(null) "
               "Watts=n/a MaxStartDelay=(null)")


def test_class_end_with_a_reservation_of_accounts_is_an_error_that_names_it(tmp_path, report):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho '{RESERVATION}'\n")
    (bin_dir / "squeue").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/squeue\n")  # an empty queue
    (bin_dir / "scancel").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/scancel\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "COURSE_HUB_TOKEN": "", "COURSE_HUB_GROUP": "",
           "COURSE_HUB_RESERVATION": ""}
    done = run_cli("class", "end", "--reservation", "day1", env=env)
    said = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.stdout
    assert done.returncode != 0, f"ended a class of nobody: {done.stdout}"
    assert "reservation 'day1' names no users (Users=(null), Accounts=course)" in said, said
    assert not (tmp_path / "scancel").exists(), "nothing may be cancelled"
    report(f"test_class_end_no_learners: exit {done.returncode}: {said}")


def test_an_empty_hub_group_is_an_error_too():
    import pytest

    from helpers.errors import CourseError
    from helpers.commands.class_admin import ClassSpec, class_members

    class EmptyGroup:
        def group(self, name: str) -> list[str]:
            return []

    with pytest.raises(CourseError, match="the hub group 'course' has no members"):
        class_members(ClassSpec(group="course"), EmptyGroup())
