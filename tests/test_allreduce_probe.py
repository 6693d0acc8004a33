"""The all-reduce probe: parsing the workers' lines, and a real ring between two local workers."""

import json

from helpers.allreduce_probe import PREFIX, measure_local, parse
from helpers.scaling_model import fit_link


def _line(rank: int, size: int, seconds: float) -> str:
    return PREFIX + json.dumps({"host": "h", "rank": rank, "workers": 2, "bytes": size, "seconds": seconds})


def test_the_slowest_worker_sets_each_size():
    output = "\n".join([_line(0, 4000, 0.10), "noise", _line(1, 4000, 0.25), _line(0, 1000, 0.05), _line(1, 1000, 0.01)])
    assert parse(output) == {1000: 0.05, 4000: 0.25}


def test_two_local_workers_measure_a_ring_that_slows_with_size(report):
    times = measure_local(workers=2, sizes_mb=(1.0, 16.0), repeats=3, deadline_s=240)
    assert sorted(times) == [1_000_000, 16_000_000]
    assert times[16_000_000] > times[1_000_000] > 0
    link = fit_link("loopback", list(times), list(times.values()), workers=2)
    report(f"all-reduce between 2 local workers: 1 MB {times[1_000_000] * 1000:.1f} ms, 16 MB "
           f"{times[16_000_000] * 1000:.1f} ms; fitted {link.bandwidth / 1e6:.0f} MB/s, latency {link.latency * 1e6:.0f} us")
    assert link.bandwidth > 1e6  # over loopback, at least 1 MB/s even on a loaded machine
