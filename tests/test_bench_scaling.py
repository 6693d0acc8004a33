"""The bench's scaling rows: the model's prediction built from measured pieces, next to the measurement."""

import json

import pytest

from helpers.scaling_model import Link, ring_allreduce_s
from helpers.commands.bench_scaling import predict, slurm_nodes_from_here
from tests.conftest import run_python


def test_the_prediction_adds_the_ring_all_reduce_over_the_fitted_link():
    link = Link("known", bandwidth=200e6, latency=0.002)
    times = {size: ring_allreduce_s(size, 3, link) for size in (1e6, 4e6, 16e6, 94e6)}
    step = predict(0.5, 94e6, times, 3, "known")
    assert step["link"].bandwidth == pytest.approx(200e6, rel=1e-6)
    assert step["allreduce_s"] == pytest.approx(4 / 3 * 94e6 / 200e6 + 4 * 0.002, rel=1e-6)
    assert step["step_s"] == pytest.approx(0.5 + step["allreduce_s"], rel=1e-9)


@pytest.mark.parametrize("reachable, job, expected", [(True, None, True), (True, "12", False), (False, None, False)])
def test_the_bench_asks_for_two_slurm_nodes_where_slurm_answers_outside_a_job(monkeypatch, reachable, job, expected):
    """Its own name for its own rule (not `slurm=None`, which in the course means COURSE_ENGINES decides)."""
    import helpers.slurm

    monkeypatch.setattr(helpers.slurm, "slurm_reachable", lambda: reachable)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    if job:
        monkeypatch.setenv("SLURM_JOB_ID", job)
    assert slurm_nodes_from_here() is expected


def test_probe_over_two_logical_cpus_in_one_process(report):
    """`--devices`: what the GPU section runs over a node's GPUs, here over 2 logical CPUs."""
    done = run_python("from helpers.allreduce_probe import measure_devices; import json; "
                      "print(json.dumps(measure_devices(2, (1.0, 16.0), repeats=3)))", timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    times = {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    assert sorted(times) == [1_000_000, 16_000_000] and times[16_000_000] > times[1_000_000] > 0
    report(f"all-reduce over 2 logical CPUs in one process: 1 MB {times[1_000_000] * 1000:.2f} ms, "
           f"16 MB {times[16_000_000] * 1000:.2f} ms")


def _rows(code: str, env: dict | None = None, timeout: float = 600) -> list[dict]:
    done = run_python("import json, dataclasses\nfrom helpers.commands.bench_scaling import scaling_rows\n" + code
                      + "\nprint('ROWS ' + json.dumps([dataclasses.asdict(r) for r in rows]))", timeout=timeout, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout.split("ROWS ", 1)[1])


def _check(row: dict, label: str, report) -> None:
    assert label in row["figure"] and row["unit"] == "ms"
    measured, model = row["ours"], row["baseline"]
    compute = float(row["note"].split("compute ")[1].split(" ms")[0])
    assert "processes at once, not communicating" in row["note"]
    # the note shows compute to 0.1 ms: the model adds a positive all-reduce to it
    assert measured > 0 and compute > 0 and model >= compute - 0.05, row
    assert "ring all-reduce" in row["note"] and "MB/s" in row["note"]
    report(f"{row['figure']}: measured {measured:.0f} ms, model {model:.0f} ms ({row['note']})")


def test_two_local_workers_measured_next_to_the_model(prepared_dir, report):
    rows = _rows(f"rows = scaling_rows('cnn', {str(prepared_dir)!r}, steps=16, workers=(2,), two_slurm_nodes=False)")
    assert len(rows) == 1
    _check(rows[0], "2 local workers", report)


@pytest.mark.slurm
def test_two_workers_on_two_slurm_nodes_measured_next_to_the_model(slurm, prepared_dir, tmp_path, report):
    # an output directory that does not exist yet, as in a fresh clone with no build/
    fresh = tmp_path / "fresh-output"
    rows = _rows(f"rows = scaling_rows('cnn', {str(prepared_dir)!r}, steps=16, workers=(), two_slurm_nodes=True)",
                 env={**slurm["env"], "COURSE_OUTPUT_DIR": str(fresh)}, timeout=900)
    assert len(rows) == 1
    _check(rows[0], "2 Slurm nodes", report)
