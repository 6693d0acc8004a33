"""The step-time model: the ring formula, the fit that recovers a link from timings, bad input."""

import pytest

from helpers.errors import CourseError
from helpers import scaling_model
from helpers.scaling_model import Link, efficiency, fit_link, ring_allreduce_s, step_s

LINK = Link("test", bandwidth=1e9, latency=1e-5)


def test_one_worker_needs_no_all_reduce():
    assert ring_allreduce_s(94e6, 1, LINK) == 0.0
    assert efficiency(0.2, 94e6, 1, LINK) == 1.0


def test_ring_traffic_per_worker_approaches_twice_the_message():
    two = ring_allreduce_s(1e9, 2, Link("x", 1e9, 0.0))
    many = ring_allreduce_s(1e9, 64, Link("x", 1e9, 0.0))
    assert two == pytest.approx(1.0)          # 2 (2-1)/2 = 1 message's worth
    assert many == pytest.approx(2 * 63 / 64)  # -> 2 messages' worth, whatever N


def test_latency_terms_grow_with_workers():
    assert ring_allreduce_s(0, 8, LINK) == pytest.approx(2 * 7 * 1e-5)


def test_overlap_hides_the_all_reduce():
    exposed = step_s(0.2, 94e6, 8, LINK, overlap=0.0)
    hidden = step_s(0.2, 94e6, 8, LINK, overlap=1.0)
    assert hidden == 0.2 and exposed > 0.2
    assert efficiency(0.2, 94e6, 8, LINK, overlap=0.5) > efficiency(0.2, 94e6, 8, LINK)


def test_fit_recovers_the_link_it_was_given():
    sizes = [1e6, 4e6, 16e6, 94e6]
    times = [ring_allreduce_s(s, 3, LINK) for s in sizes]
    fitted = fit_link("fitted", sizes, times, workers=3)
    assert fitted.bandwidth == pytest.approx(LINK.bandwidth, rel=1e-6)
    assert fitted.latency == pytest.approx(LINK.latency, rel=1e-6)


@pytest.mark.parametrize("call,match", [
    (lambda: Link("bad", 0, 0), "bandwidth must be above 0"),
    (lambda: ring_allreduce_s(1, 0, LINK), "at least 1 worker"),
    (lambda: step_s(0.1, 1, 2, LINK, overlap=1.5), "0 to 1"),
    (lambda: fit_link("x", [1e6], [0.1], 2), "2 or more message sizes"),
    (lambda: fit_link("x", [1e6, 2e6], [0.2, 0.1], 2), "do not grow"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(CourseError, match=match):
        call()


def test_notebook_14_writes_out_the_same_model():
    """Lesson 14 writes the formula out for learners; the bench uses this module: both must agree."""
    from pathlib import Path

    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[1] / "notebooks" / "14_predicting_scaling.ipynb", as_version=4)
    [source] = [c.source for c in nb.cells if c.cell_type == "code" and "def ring_allreduce_s" in c.source]
    lesson: dict = {}
    exec(source, lesson)
    for workers in (1, 2, 3, 8, 64):
        for size, overlap in ((1e6, 0.0), (94e6, 0.0), (94e6, 0.7)):
            ours, theirs = lesson["Link"]("x", 3e9, 2e-5), scaling_model.Link("x", 3e9, 2e-5)
            assert lesson["ring_allreduce_s"](size, workers, ours) == pytest.approx(
                scaling_model.ring_allreduce_s(size, workers, theirs), rel=1e-12)
            assert lesson["step_s"](0.05, size, workers, ours, overlap) == pytest.approx(
                scaling_model.step_s(0.05, size, workers, theirs, overlap), rel=1e-12)
            assert lesson["efficiency"](0.05, size, workers, ours, overlap) == pytest.approx(
                scaling_model.efficiency(0.05, size, workers, theirs, overlap), rel=1e-12)
