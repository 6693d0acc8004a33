"""A step-time model for synchronous data parallelism: predict scaling from measured pieces.

    step time (N workers) = compute time + exposed all-reduce time
    all-reduce (ring)     = 2 (N-1)/N x gradient bytes / bandwidth + 2 (N-1) x latency
    exposed               = all-reduce x (1 - overlap)     (overlap: share hidden behind the backward pass)
    efficiency            = single-worker step time / N-worker step time   (same per-replica batch)

Every input is a number the course measures (compute time per step from the bench, bandwidth
and latency from an all-reduce of several message sizes) or one the learner enters (their GPU's
images/s, their link's bandwidth). Why a ring: it is what MWMS uses on CPU and one of the
algorithms NCCL chooses from across nodes (NCCL also uses trees, whose latency grows with log N, so
the ring's 2(N-1) latency term overstates large GPU counts: lesson 14 says so), and its traffic per
worker does not grow with N (only the latency terms do).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CourseError


@dataclass(frozen=True)
class Link:
    """What the all-reduce sees of a network: bandwidth in bytes/s (bus bandwidth) and latency in s."""

    name: str
    bandwidth: float
    latency: float

    def __post_init__(self):
        if not self.bandwidth > 0 or self.latency < 0:
            raise CourseError(f"link {self.name!r}: bandwidth must be above 0 and latency at least 0 "
                              f"(got {self.bandwidth} B/s, {self.latency} s)")


def ring_allreduce_s(message_bytes: float, workers: int, link: Link) -> float:
    """Seconds for a ring all-reduce of `message_bytes` over `workers` (0 for one worker)."""
    if workers < 1:
        raise CourseError(f"an all-reduce needs at least 1 worker, not {workers}")
    if workers == 1:
        return 0.0
    return 2 * (workers - 1) / workers * message_bytes / link.bandwidth + 2 * (workers - 1) * link.latency


def step_s(compute_s: float, gradient_bytes: float, workers: int, link: Link, overlap: float = 0.0) -> float:
    """Predicted seconds per synchronous step: compute plus the all-reduce not hidden by overlap."""
    if not 0.0 <= overlap <= 1.0:
        raise CourseError(f"overlap is the share of the all-reduce hidden by the backward pass: 0 to 1, not {overlap}")
    return compute_s + (1.0 - overlap) * ring_allreduce_s(gradient_bytes, workers, link)


def efficiency(compute_s: float, gradient_bytes: float, workers: int, link: Link, overlap: float = 0.0) -> float:
    """Scaling efficiency: images/s per replica at N workers over images/s of one (same per-replica batch)."""
    return compute_s / step_s(compute_s, gradient_bytes, workers, link, overlap)


def fit_link(name: str, sizes_bytes: list[float], seconds: list[float], workers: int) -> Link:
    """Bandwidth and latency from all-reduce times of several message sizes (least squares on the ring formula).

    t = 2(N-1)/N x size / bandwidth + 2(N-1) x latency is a straight line in size: its slope gives
    the bandwidth, its intercept the latency (clipped at 0: a negative intercept is noise).
    """
    if workers < 2 or len(sizes_bytes) != len(seconds) or len(set(sizes_bytes)) < 2:
        raise CourseError("fitting a link needs at least 2 workers and all-reduce times for 2 or more message sizes")
    n = len(sizes_bytes)
    mean_x, mean_y = sum(sizes_bytes) / n, sum(seconds) / n
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes_bytes, seconds))
             / sum((x - mean_x) ** 2 for x in sizes_bytes))
    if slope <= 0:
        raise CourseError(f"all-reduce times do not grow with the message size ({seconds}): measure again, "
                          "on an idle machine, with larger messages")
    intercept = mean_y - slope * mean_x
    factor = 2 * (workers - 1)
    return Link(name, bandwidth=factor / workers / slope, latency=max(0.0, intercept) / factor)
