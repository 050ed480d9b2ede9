"""Report figures, each written as PNG (for report.md) and SVG (for papers): per head, a radar of normalized
scores, per-ability bars and a rank heatmap.

Figures are built on :class:`matplotlib.figure.Figure` directly (the Agg canvas), never through pyplot's
global state, so reports render the same headless, in threads and in tests.

Radar normalization: per ability, min-max across the VFMs of that head, direction respected, so 1 is the best
VFM of the report on that ability and 0 the worst (all 0.5 when every VFM scores the same); see
:func:`ava.report.ranks.normalized_scores`. It shows relative standing, not absolute skill.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ava.report.ranks import normalized_scores
from ava.report.render import arrow, table_caption, vfm_header

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ava.report.tables import HeadTable

FORMATS = ("png", "svg")


def slug(text: str) -> str:
    """A file-name-safe form of a head label: ``"llm (tiny-random-qwen2)"`` -> ``"llm-tiny-random-qwen2"``."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-") or "head"


def _caption(table: HeadTable) -> str:
    """The table caption of :func:`ava.report.render.table_caption`, wrapped to fit under a figure title."""
    return "\n".join(textwrap.wrap(table_caption(table.to_dict()), 110))


def _vfm_labels(table: HeadTable) -> list[str]:
    """The VFMs' column headers of the report's tables (random-weight VFMs marked)."""
    info = table.to_dict()
    return [vfm_header(info, v) for v in table.vfms]


def _save(fig: Figure, out_dir: Path, stem: str) -> list[str]:
    from ava.data.format import atomic_write_bytes

    names = []
    for fmt in FORMATS:
        buf = io.BytesIO()
        metadata = {"Date": None} if fmt == "svg" else None
        fig.savefig(buf, format=fmt, dpi=110, bbox_inches="tight", metadata=metadata)
        atomic_write_bytes(out_dir / f"{stem}.{fmt}", buf.getvalue())
        names.append(f"{stem}.{fmt}")
    return names


def _colors(table: HeadTable) -> list:
    """A colour per VFM of ``table.vfms``, assigned by sorted name so a VFM keeps its colour across heads."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    index = {v: i for i, v in enumerate(sorted(table.vfms))}
    return [cmap(index[v] % 10) for v in table.vfms]


def radar(table: HeadTable) -> Figure | None:
    """Normalized score (1 = best VFM of the report) per ability, one polygon per VFM; None below 3 abilities."""
    from matplotlib.figure import Figure

    abilities = [ab for ab in table.abilities if any(x is not None for x in table.values[ab].values())]
    if len(abilities) < 3:
        return None
    angles = np.linspace(0, 2 * math.pi, len(abilities), endpoint=False).tolist()
    fig = Figure(figsize=(6.5, 6.5))
    ax = fig.add_subplot(projection="polar")
    norm = {
        ab: normalized_scores({v: x for v, x in table.values[ab].items() if x is not None}, table.higher_is_better[ab])
        for ab in abilities
    }
    for vfm, label, color in zip(table.vfms, _vfm_labels(table), _colors(table), strict=True):
        r = [norm[ab].get(vfm, 0.0) for ab in abilities]
        style = "--" if table.random_weights.get(vfm) else "-"
        ax.plot(angles + angles[:1], r + r[:1], style, color=color, label=label, linewidth=1.6)
        ax.fill(angles + angles[:1], r + r[:1], color=color, alpha=0.08)
    ax.set_xticks(angles, abilities, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_rorigin(-0.15)  # so a VFM at 0 everywhere is a visible small polygon, not a point
    ax.set_yticks([0.25, 0.5, 0.75, 1.0], ["", "0.5", "", "1"], fontsize=7)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=min(3, len(table.vfms)), fontsize=8)
    fig.suptitle(f"Normalized scores (1 = best VFM here)\n{_caption(table)}", fontsize=9)
    return fig


def bars(table: HeadTable) -> Figure:
    """One small bar chart per ability: the metric value of each VFM, direction in the title."""
    from matplotlib.figure import Figure

    n = len(table.abilities)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(3.2 * cols, 2.6 * rows + 0.6))
    colors = _colors(table)
    for i, ab in enumerate(table.abilities):
        ax = fig.add_subplot(rows, cols, i + 1)
        ys = [table.values[ab].get(v) for v in table.vfms]
        heights = [y if y is not None else 0.0 for y in ys]
        container = ax.bar(range(len(table.vfms)), heights, color=colors)
        for patch, vfm, y in zip(container.patches, table.vfms, ys, strict=True):
            if table.random_weights.get(vfm):
                patch.set_hatch("//")
            if y is None:
                patch.set_alpha(0.2)
        scored = [y for y in ys if y is not None]
        if scored and min(scored) >= 0:
            ax.set_ylim(0, max(scored) * 1.1 or 1.0)  # all-zero scores: an empty 0..1 axis, not -0.05..0.05
        ax.set_title(f"{ab}: {table.metrics[ab]} {arrow(table.higher_is_better[ab])}", fontsize=8)
        ax.set_xticks(range(len(table.vfms)), table.vfms, rotation=30, ha="right", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"Per-ability scores (hatched: random weights)\n{_caption(table)}", fontsize=9)
    fig.tight_layout()
    return fig


def rank_heatmap(table: HeadTable) -> Figure:
    """Abilities x VFMs coloured by rank (1 = best), with the average rank as the last row."""
    from matplotlib.figure import Figure

    rows = [*table.abilities, "average rank"]
    grid = np.full((len(rows), len(table.vfms)), np.nan)
    for i, ab in enumerate(table.abilities):
        for j, v in enumerate(table.vfms):
            grid[i, j] = table.ranks[ab].get(v, np.nan)
    for j, v in enumerate(table.vfms):
        grid[-1, j] = table.average_rank.get(v, np.nan)
    fig = Figure(figsize=(1.1 * len(table.vfms) + 3, 0.38 * len(rows) + 1.6))
    ax = fig.add_subplot()
    im = ax.imshow(grid, cmap="viridis_r", vmin=1, vmax=max(len(table.vfms), 2), aspect="auto")
    mid = (1 + max(len(table.vfms), 2)) / 2
    for (i, j), r in np.ndenumerate(grid):
        color = "black" if np.isnan(r) or r < mid else "white"  # dark text on the light (good) end of viridis_r
        ax.text(j, i, "–" if np.isnan(r) else f"{r:.3g}", ha="center", va="center", fontsize=7, color=color)
    ax.set_xticks(range(len(table.vfms)), _vfm_labels(table), rotation=30, ha="right",
                  fontsize=8)  # fmt: skip
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.axhline(len(rows) - 1.5, color="white", linewidth=2)
    fig.colorbar(im, ax=ax, label="rank (1 = best)")
    ax.set_title(f"Ranks per ability\n{_caption(table)}", fontsize=9)
    return fig


def write_plots(table: HeadTable, out_dir: Path) -> dict[str, list[str]]:
    """All figures of one head under ``out_dir``; returns ``kind -> [file names]`` (radar may be absent)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = slug(table.head)
    written: dict[str, list[str]] = {}
    for kind, make in (("radar", radar), ("bars", bars), ("ranks", rank_heatmap)):
        fig = make(table)
        if fig is not None:
            written[kind] = _save(fig, out_dir, f"{stem}-{kind}")
    return written
