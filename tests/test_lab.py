"""JupyterLab as `make lab` starts it: token authentication on, loopback only."""

from __future__ import annotations

import urllib.error

import psutil

from tests.conftest import ROOT, Lab


def test_lab_requires_its_token_and_listens_on_loopback(tmp_path):
    """`make lab` itself (not a command of the test's own), with only a free port and no browser added."""
    lab = Lab(ROOT / "notebooks", tmp_path,
              command=["make", "-s", "-C", str(ROOT), "lab", "LAB_OPTS=--no-browser --port=0"])
    try:
        try:
            lab.get("/api/contents", token=False)
            raise AssertionError("the API answered without a token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 403
        assert lab.api("/api/contents")["type"] == "directory"  # with the token
        ips = {c.laddr.ip for p in lab.processes() for c in p.net_connections("tcp")
               if c.status == psutil.CONN_LISTEN}
        assert ips and ips <= {"127.0.0.1", "::1"}, ips
    finally:
        lab.stop()
