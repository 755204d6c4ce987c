"""The figures researchers expect, as PNG files (matplotlib, no display needed).

* the alignment–uniformity plane (SimCSE Fig. 2): one point per model, a line per training trajectory;
* normalised singular values of the embedding matrix (SimCSE Fig. F.1);
* density of the cosine similarity of STS-B pairs per gold-score bucket (SimCSE Fig. G.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import gaussian_kde

GOLD_BUCKETS = ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5))


@dataclass
class PlanePoint:
    label: str
    align: float
    uniform: float
    #: (step, align, uniform) along training, if any
    trajectory: list[tuple[int, float, float]] = field(default_factory=list)


def _colors(n: int) -> list:
    """Distinct colours: matplotlib's default cycle up to 10 lines, tab20 beyond (no colour repeats)."""
    if n <= 10:
        return [f"C{i}" for i in range(n)]
    return [plt.cm.tab20(i % 20) for i in range(n)]


def _legend(ax, n: int) -> None:
    """Inside the axes for a few entries; to the right of them for many, so no point is hidden."""
    if n <= 8:
        ax.legend(fontsize=8)
    else:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def plot_alignment_uniformity(points: Sequence[PlanePoint], path: str | Path) -> Path:
    fig, ax = plt.subplots(figsize=(6 if len(points) <= 8 else 8.5, 4.5))
    markers = ("*", "P", "X", "D")  # past tab20's 20 colours, the marker tells two points apart
    for index, (color, point) in enumerate(zip(_colors(len(points)), points, strict=True)):
        if point.trajectory:
            steps, aligns, uniforms = zip(*point.trajectory, strict=True)
            ax.plot(uniforms, aligns, "-", color=color, alpha=0.6)
            ax.scatter(uniforms, aligns, s=12, color=color, alpha=0.6)
            ax.annotate(str(steps[0]), (uniforms[0], aligns[0]), fontsize=7, color=color)
            ax.annotate(str(steps[-1]), (uniforms[-1], aligns[-1]), fontsize=7, color=color)
        marker = markers[index // 20 % len(markers)]
        ax.scatter(
            [point.uniform], [point.align], s=60, color=color, marker=marker, label=point.label, zorder=3
        )
    ax.set_xlabel(r"$\ell_{uniform}$ (lower: more uniform)")
    ax.set_ylabel(r"$\ell_{align}$ (lower: positives closer)")
    ax.set_title("Alignment and uniformity (STS-B, gold > 4 as positives)")
    ax.grid(alpha=0.3)
    _legend(ax, len(points))
    return _save(fig, path)


def plot_singular_values(curves: dict[str, np.ndarray], path: str | Path) -> Path:
    fig, ax = plt.subplots(figsize=(6 if len(curves) <= 8 else 8.5, 4.5))
    styles = ("-", "--", ":", "-.")
    for index, (color, (label, values)) in enumerate(zip(_colors(len(curves)), curves.items(), strict=True)):
        ax.plot(np.arange(1, len(values) + 1), values, styles[index // 10 % 4], color=color, label=label)
    ax.set_xlabel("index")
    ax.set_ylabel("singular value / largest")
    ax.set_title("Singular spectrum of the sentence-embedding matrix")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    _legend(ax, len(curves))
    return _save(fig, path)


def plot_cosine_density(pairs: dict[str, tuple[np.ndarray, np.ndarray]], path: str | Path) -> Path:
    """``pairs[label] = (cosines, gold scores)``; one panel per model, one KDE curve per gold bucket."""
    columns = min(4, len(pairs))
    rows = -(-len(pairs) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False, sharey=True)
    grid = np.linspace(-1, 1, 400)
    for ax, (label, (cosines, gold)) in zip(axes.flat, pairs.items(), strict=False):
        for index, (low, high) in enumerate(GOLD_BUCKETS):
            inside = (gold >= low) & ((gold < high) if high < 5 else (gold <= high))
            if inside.sum() < 3 or np.ptp(cosines[inside]) == 0:
                continue
            density = gaussian_kde(cosines[inside])(grid)
            ax.plot(grid, density, color=plt.cm.viridis(index / 4), label=f"gold {low}–{high}")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("cosine similarity")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(pairs) :]:
        ax.axis("off")
    for row in axes:
        row[0].set_ylabel("density")
    axes.flat[0].legend(fontsize=7, loc="upper left")
    return _save(fig, path)


def plot_curves(
    curves: dict[str, Sequence[tuple[float, float]]], path: str | Path, ylabel: str, title: str | None = None
) -> Path:
    """Line plot of ``curves[label] = [(step, value), …]`` against the training step."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for label, points in curves.items():
        steps, values = zip(*points, strict=True)
        ax.plot(steps, values, "-o" if len(points) < 30 else "-", markersize=3, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_leaderboard(
    bars: Sequence[tuple[str, float, float | None]],
    references: Sequence[tuple[str, float]],
    path: str | Path,
    metric: str = "STS-B train Spearman ×100",
    bands: Sequence[int] | None = None,
) -> Path:
    """One horizontal bar per method (mean, with its standard deviation as an error bar), best at the top,
    and each reference row (the untrained start, a post-processed encoder) as a vertical line. ``bands``
    (one per bar): the tie band of each bar; bars of one band share a colour and a bracket with its number
    (rows within a band cannot be told apart)."""
    path = Path(path)
    ranked = sorted(range(len(bars)), key=lambda i: bars[i][1])
    order = [bars[i] for i in ranked]
    fig, ax = plt.subplots(figsize=(10.5, 0.42 * len(order) + 1.6))
    positions = np.arange(len(order))
    order_bands = [bands[i] for i in ranked] if bands is not None else None
    palette = ("#4c72b0", "#9ecae1")
    colors = [palette[b % 2] for b in order_bands] if order_bands else ["C0"] * len(order)
    ax.barh(
        positions,
        [b[1] for b in order],
        xerr=[b[2] or 0.0 for b in order],
        color=colors,
        alpha=0.85,
        capsize=3,
    )
    labels = [b[0] for b in order]
    if order_bands:
        labels = [f"{label}  (band {band})" for label, band in zip(labels, order_bands, strict=True)]
    ax.set_yticks(positions, labels)
    styles = ["-", "--", ":", "-."]
    for i, (label, value) in enumerate(references):
        ax.axvline(value, color=f"C{i + 1}", linestyle=styles[i % len(styles)], label=f"{label}: {value:.2f}")
    lows = [b[1] - (b[2] or 0.0) for b in order] + [v for _, v in references]
    highs = [b[1] + (b[2] or 0.0) for b in order] + [v for _, v in references]
    if lows:
        margin = 0.1 * (max(highs) - min(lows) + 1.0)
        ax.set_xlim(min(lows) - margin, max(highs) + margin)
    ax.set_xlabel(metric)
    if references:  # beside the axes: inside, it covered the bars' ends and error bars
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0.0)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_method_bars(
    rows: list[tuple[str, float, float]],
    references: dict[str, float],
    path: str | Path,
    ylabel: str,
    title: str,
) -> Path:
    """One bar per method (its mean, an error bar of its std over seeds) beside horizontal reference lines
    (the start, BM25, …): the domain study's figure."""
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(rows) + 2), 4.2))
    names = [name for name, _, _ in rows]
    ax.bar(names, [mean for _, mean, _ in rows], yerr=[spread for _, _, spread in rows], capsize=4,
           color="#4c72b0")  # fmt: skip
    for (label, value), color in zip(references.items(), _colors(len(references)), strict=True):
        ax.axhline(value, linestyle="--", color=color, label=f"{label} {value:.2f}")
    values = [mean for _, mean, _ in rows] + list(references.values())
    ax.set_ylim(max(0.0, min(values) - 10), max(values) + 5)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=30)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


def plot_learning_curve(
    curves: dict[str, list[tuple[int, float, float]]],
    references: dict[str, float],
    path: str | Path,
    xlabel: str,
    ylabel: str,
    title: str,
) -> Path:
    """One line per setting through its (size, mean, std over seeds) points, on a log x axis, beside
    horizontal reference lines (the start, BM25, the start's hybrid): a learning curve."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for (label, points), color in zip(curves.items(), _colors(len(curves) + len(references)), strict=False):
        xs, means, spreads = zip(*sorted(points), strict=True) if points else ((), (), ())
        ax.errorbar(xs, means, yerr=spreads, marker="o", capsize=3, color=color, label=label)
    colors = _colors(len(curves) + len(references))[len(curves) :]
    for (label, value), color in zip(references.items(), colors, strict=True):
        ax.axhline(value, linestyle="--", color=color, label=f"{label} {value:.2f}")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, path)


def plot_frontier(
    points: list[tuple[str, float, float]],
    references: dict[str, float],
    path: str | Path,
    xlabel: str,
    ylabel: str,
    title: str,
) -> Path:
    """Speed (log x) against quality, one marker per point named in the legend (the points crowd), beside
    horizontal reference lines (BM25, …): the students' frontier figures."""
    fig, ax = plt.subplots(figsize=(11, 5))
    markers = "osD^vP*Xph"
    for index, (name, speed, quality) in enumerate(points):
        ax.scatter(speed, quality, s=50, marker=markers[index % len(markers)],
                   label=f"{name}: {speed:,.0f}/s, {quality:.2f}")  # fmt: skip
    for (label, value), color in zip(references.items(), _colors(len(references)), strict=True):
        ax.axhline(value, linestyle="--", color=color, label=f"{label} {value:.2f}")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _save(fig, path)
