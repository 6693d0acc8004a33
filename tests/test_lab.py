"""JupyterLab as `make lab` starts it: token authentication on, loopback only."""

from __future__ import annotations

import urllib.error

import psutil

from tests.conftest import ROOT, Lab


def test_lab_requires_its_token_and_listens_on_loopback(tmp_path):
    lab = Lab(ROOT / "notebooks", tmp_path)
    try:
        try:
            lab.get("/api/contents", token=False)
            raise AssertionError("the API answered without a token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 403
        assert lab.api("/api/contents")["type"] == "directory"  # with the token
        ips = {c.laddr.ip for c in psutil.Process(lab.proc.pid).net_connections("tcp")
               if c.status == psutil.CONN_LISTEN}
        assert ips and ips <= {"127.0.0.1", "::1"}, ips
    finally:
        lab.stop()
