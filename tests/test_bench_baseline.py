"""The bench's ipyparallel baseline runs with CurveZMQ, and its engines' key never travels in
their environment (where a Slurm job's environment may be read by others): run locally, its
connection file, its settings and its engine's environment are read while it runs."""

from __future__ import annotations

import json
from pathlib import Path

import psutil


def test_the_ipyparallel_baseline_runs_curvezmq_with_the_key_out_of_the_environment(monkeypatch, tmp_path, report):
    import ipyparallel as ipp

    from helpers.commands import bench

    seen = {}

    class Recording(ipp.Cluster):
        async def connect_client(self, *args, **kwargs):
            client = await super().connect_client(*args, **kwargs)  # once the controller wrote its files
            security = Path(self.profile_dir) / "security"
            seen["client"] = json.loads((security / f"ipcontroller-{self.cluster_id}-client.json").read_text())
            seen["send_env"] = self.send_engines_connection_env
            pids = [launcher.process.pid for engine_set in self.engines.values()
                    for launcher in getattr(engine_set, "launchers", {}).values() if launcher.process]
            seen["engine_env"] = [set(psutil.Process(pid).environ()) for pid in pids]
            return client

    monkeypatch.setattr(ipp, "Cluster", Recording)
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    start_s, stop_s = bench._ipyparallel_defaults(1, hold_tf=False)
    assert seen["client"].get("curve_serverkey"), f"no CurveZMQ key in the client's connection file: {seen['client']}"
    assert seen["send_env"] is False
    assert seen["engine_env"] and all("IPP_CONNECTION_INFO" not in env for env in seen["engine_env"]), seen
    report(f"{Path(__file__).stem}: ipyparallel baseline with CurveZMQ: 1 engine ready in {start_s:.2f} s, "
           f"stopped in {stop_s:.2f} s; no IPP_CONNECTION_INFO in the engine's environment")
