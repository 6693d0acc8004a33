"""What `slurm=` means, one meaning per name (issue 52, finding 3), without a Slurm.

- `slurm=None` means one thing in code: COURSE_ENGINES decides where engines start
  (`start_engines`, `want_slurm`; their own tests are in test_slurm_engines.py).
- The tools that run with or without Slurm (`doctor`, the ipcluster profile) take True, False or
  `WHERE_SLURM_ANSWERS`, their default, and refuse None.
- The bench asks Slurm for two nodes where `slurm_nodes_from_here()` says so (test_bench_scaling.py).
- On the command line every command that may use Slurm takes `--slurm` and `--no-slurm`.
"""

from __future__ import annotations

import pytest

from helpers.errors import CourseError
from helpers.slurm.commands import WHERE_SLURM_ANSWERS, slurm_choice
from helpers.commands.cli import build_parser


@pytest.mark.parametrize("command, default", [
    (("cluster", "start"), None),  # COURSE_ENGINES decides
    (("cluster", "profile"), WHERE_SLURM_ANSWERS),
    (("doctor",), WHERE_SLURM_ANSWERS),
])
def test_every_command_that_may_use_slurm_takes_slurm_and_no_slurm(command, default):
    parser = build_parser()
    assert parser.parse_args([*command]).slurm == default
    assert parser.parse_args([*command, "--slurm"]).slurm is True
    assert parser.parse_args([*command, "--no-slurm"]).slurm is False


def test_none_is_not_a_tools_choice():
    assert [slurm_choice(c) for c in (True, False, WHERE_SLURM_ANSWERS)] == [True, False, WHERE_SLURM_ANSWERS]
    for wrong in (None, "yes", "auto"):
        with pytest.raises(CourseError, match=r"slurm=.* is not understood: use True, False or 'where Slurm answers'"):
            slurm_choice(wrong)


def test_the_doctor_takes_slurms_checks_where_its_commands_are(tmp_path, monkeypatch):
    from helpers import doctor

    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo here
    slurm = {asked: {c.name: c for c in doctor.run(asked, bandwidth=False)}["slurm"]
             for asked in (WHERE_SLURM_ANSWERS, True, False)}
    assert slurm[WHERE_SLURM_ANSWERS].level == "skip" and "no Slurm commands on PATH" in slurm[WHERE_SLURM_ANSWERS].detail
    assert slurm[True].level == "no-go" and "Slurm asked for" in slurm[True].detail
    assert slurm[False].level == "skip" and "not asked for" in slurm[False].detail
    with pytest.raises(CourseError, match="slurm=None is not understood"):
        doctor.run(None, bandwidth=False)


@pytest.mark.parametrize("asked, answers, slurm_side", [
    (WHERE_SLURM_ANSWERS, True, True), (WHERE_SLURM_ANSWERS, False, False),
    (False, True, False), (True, False, True),
])
def test_the_profile_writes_its_slurm_side_where_slurm_answers(tmp_path, monkeypatch, asked, answers, slurm_side):
    from helpers.engines import ipcluster_profile

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    monkeypatch.setenv("COURSE_CONTROLLER_IP", "10.1.2.3")  # the nodes' network, without asking Slurm
    monkeypatch.setenv("COURSE_SLURM_NODES", "2")  # a shape given: no sinfo for the template
    monkeypatch.setattr(ipcluster_profile, "slurm_reachable", lambda: answers)
    path, decided = ipcluster_profile.write_profile(slurm=asked)
    written = path.read_text()
    assert ("controller on 10.1.2.3" in decided) is slurm_side, decided
    assert ("#SBATCH --nodes=2" in written) is slurm_side and ("no Slurm here" in written) is not slurm_side
    with pytest.raises(CourseError, match="slurm=None is not understood"):
        ipcluster_profile.write_profile(slurm=None)
