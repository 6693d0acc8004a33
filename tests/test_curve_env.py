"""ipyparallel's own tools (JupyterLab's cluster panel, `%ipcluster`) start controllers that use
CurveZMQ only when IPP_ENABLE_CURVE=1 is in their environment: every place the course starts
JupyterLab sets it. The hub's server job and the Open OnDemand app run here outside Slurm, their
stand-in Python noting the environment it was given; `make lab`: test_lab reads it from the server."""

from __future__ import annotations

import pytest

from tests.support.launchers import checkout_with_venv, launch


@pytest.mark.parametrize("launcher", ["hub server", "open ondemand"])
def test_the_servers_environment_asks_ipyparallel_for_curve(tmp_path, launcher, report):
    checkout, mark = checkout_with_venv(tmp_path)
    done = launch(launcher, checkout, tmp_path)
    assert mark.exists(), (done.stdout, done.stderr)
    given = dict(line.split("=", 1) for line in mark.read_text().splitlines() if "=" in line)
    assert given.get("IPP_ENABLE_CURVE") == "1", f"{launcher}: IPP_ENABLE_CURVE={given.get('IPP_ENABLE_CURVE')!r}"
    report(f"test_curve_env: {launcher}: IPP_ENABLE_CURVE=1 in the server's environment")
