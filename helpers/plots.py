"""Figures of the course: training curves and throughput against replicas.

Every figure names its data source in the title, so synthetic quick-mode data is never
mistaken for CIFAR-10; `save` also writes it to the figures directory of `make course`.
"""

from __future__ import annotations

from pathlib import Path

from .settings import value

FIGURES_ENV = "COURSE_FIGURES_DIR"


def figures_dir() -> Path:
    """`COURSE_FIGURES_DIR`, else figures/ in the course's output directory."""
    if value(FIGURES_ENV):
        return Path(value(FIGURES_ENV))
    from .environment import output_dir

    return output_dir() / "figures"


def save(fig, name: str) -> Path:
    """Write `fig` as PNG under `figures_dir()` and return the path."""
    target = figures_dir() / f"{name}.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110, bbox_inches="tight")
    return target


def curves(runs: dict[str, dict[str, list[float]]], data_label: str, title: str = "Training"):
    """Loss and accuracy per epoch for several labelled runs, side by side."""
    import matplotlib.pyplot as plt

    metrics = [m for m in ("loss", "accuracy") if any(m in r for r in runs.values())]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for label, history in runs.items():
            values = history.get(metric)
            if values:
                ax.plot(range(1, len(values) + 1), values, marker="o", label=label)
        ax.set_xlabel("epoch")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{title} - {data_label}")
    fig.tight_layout()
    return fig


def throughput(points: list[dict], data_label: str, title: str = "Throughput"):
    """Images/s and scaling efficiency against the number of replicas or workers.

    Each point: {"replicas": int, "images_per_s": float, "label": str (optional), "baseline": str (optional)}.
    One curve per label; each point's efficiency is per replica over the smallest run of the points sharing
    its own `baseline` (default: its label), so curves of one model share one base: a sweep's one-worker run is
    recorded as MirroredStrategy, and the multi-worker curve is measured against it, not its own 2 workers. A
    label holding points of two baselines (float32 and mixed_float16 under one) still divides each by its own.
    """
    import matplotlib.pyplot as plt

    per_replica = lambda p: p["images_per_s"] / p["replicas"]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    groups: dict[str, list[dict]] = {}
    bases: dict[str, dict] = {}
    for p in points:
        groups.setdefault(p.get("label", "measured"), []).append(p)
        key = p.get("baseline", p.get("label", "measured"))
        if key not in bases or p["replicas"] < bases[key]["replicas"]:
            bases[key] = p
    for label, group in groups.items():
        group = sorted(group, key=lambda p: p["replicas"])
        xs = [p["replicas"] for p in group]
        ys = [p["images_per_s"] for p in group]
        ax1.plot(xs, ys, marker="o", label=label)
        ax2.plot(xs, [p["images_per_s"] / (per_replica(bases[p.get("baseline", label)]) * p["replicas"]) for p in group],
                 marker="o", label=label)  # each point over its own baseline, whatever curve it is on
    ax1.set_xlabel("replicas")
    ax1.set_ylabel("images/s")
    for ax in (ax1, ax2):
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax2.set_xlabel("replicas")
    ax2.set_ylabel("scaling efficiency")
    ax2.axhline(1.0, color="grey", lw=0.8, ls="--")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{title} - {data_label}")
    fig.tight_layout()
    return fig


def bench(table: dict):
    """The benchmark's compared figures as one bar each: how many times better the helpers
    are than their baseline (baseline/ours for times, ours/baseline for rates; > 1 = better).

    `table` is what `helpers.results.load_table` returns; rows without a baseline, or whose
    baseline is another quantity (the input pipeline against training), are left out.
    """
    import matplotlib.pyplot as plt

    rows = [r for r in table["rows"] if r.get("baseline") and r.get("versus_defaults", True)]
    factors = [(r["ours"] / r["baseline"]) if r["higher_is_better"] else (r["baseline"] / r["ours"])
               for r in rows]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.2))
    colours = ["tab:green" if r["met"] in ("yes", "-") else "tab:red" for r in rows]
    ax.barh(range(len(rows)), factors, color=colours)
    ax.set_xscale("log")  # 0.95x and 20x on one axis
    for i, factor in enumerate(factors):
        ax.annotate(f"{factor:.2f}x", (factor, i), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [r["figure"][:75] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("helpers vs baseline (> 1: helpers better); red: target not met")
    machine = table.get("machine", {})
    ax.set_title(f"helpers bench on {machine.get('host', '?')} ({machine.get('cpus', '?')} CPUs) - "
                 f"{machine.get('data', '?')}", fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig
