"""Report figures, each written as PNG (for report.md) and SVG (for papers): per head, per-ability bars with
95% intervals and the chance / majority lines, normalized scores with intervals (and a radar from 3 VFMs on),
and a rank heatmap.

Figures are built on :class:`matplotlib.figure.Figure` directly (the Agg canvas), never through pyplot's
global state, so reports render the same headless, in threads and in tests.

Normalization: per ability, 0 is the better of the chance and majority baselines and 1 the metric's best
possible value (:func:`ava.report.ranks.normalized_scores`): an absolute scale that does not stretch a 0.1
difference between two VFMs into a full spike. Abilities without a baseline are left out of those plots.

Colours: each VFM gets a fixed colour from its id (a hash into an 18-colour palette), the same in every report.
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def save_figure(fig: Figure, out_dir: Path, stem: str) -> list[str]:
    from ava.data.format import atomic_write_bytes

    fig.set_dpi(110)
    names = []
    for fmt in FORMATS:
        buf = io.BytesIO()
        metadata = {"Date": None} if fmt == "svg" else None
        fig.savefig(buf, format=fmt, dpi=110, bbox_inches="tight", metadata=metadata)
        atomic_write_bytes(out_dir / f"{stem}.{fmt}", buf.getvalue())
        names.append(f"{stem}.{fmt}")
    return names


PALETTE = ("tab10", "Dark2")  # 18 saturated colours that read on white (tab20's pale half does not)


def vfm_color(vfm: str) -> tuple[float, float, float, float]:
    """The fixed colour of a VFM: its id hashed (SHA-256, stable across runs and machines) into the palette.
    Two VFMs of one report can share a colour (1 in 18 per pair); their labels and markers still tell them apart."""
    from matplotlib import colormaps

    colors = [c for name in PALETTE for c in colormaps[name].colors]
    return (*colors[int(hashlib.sha256(vfm.encode("utf-8")).hexdigest(), 16) % len(colors)], 1.0)


def _colors(table: HeadTable) -> list:
    return [vfm_color(v) for v in table.vfms]


def baseline_value(table: HeadTable, ab: str) -> tuple[float | None, str | None]:
    """The better of the chance and majority baselines of ``ab`` and its name, or (None, None)."""
    found = [(b["value"], kind) for kind, b in table.baselines.get(ab, {}).items() if b.get("value") is not None]
    if not found:
        return None, None
    pick = max if table.higher_is_better[ab] else min
    return pick(found, key=lambda x: x[0])


def _normalized(table: HeadTable) -> tuple[list[str], dict[str, dict[str, tuple[float, float, float]]]]:
    """Abilities with a baseline and ``ability -> vfm -> (value, low, high)`` on the normalized scale."""
    out, keep = {}, []
    for ab in table.abilities:
        base, _ = baseline_value(table, ab)
        best = table.best.get(ab)
        if base is None or best is None or base == best:
            continue
        vals = {v: x for v, x in table.values[ab].items() if x is not None}
        cis = table.intervals.get(ab, {})
        norm = normalized_scores(vals, base, best)
        cells = {}
        for v, x in norm.items():
            ci = cis.get(v)
            lo, hi = (normalized_scores({"lo": ci[0], "hi": ci[1]}, base, best).values()) if ci else (x, x)
            cells[v] = (x, min(lo, hi), max(lo, hi))
        keep.append(ab)
        out[ab] = cells
    return keep, out


def radar(table: HeadTable) -> Figure | None:
    """Normalized score per ability (0 = baseline, 1 = best possible), one polygon per VFM; None below 3 VFMs
    or 3 abilities with a baseline (a radar of 1 or 2 VFMs is a shape with nothing to compare)."""
    from matplotlib.figure import Figure

    abilities, norm = _normalized(table)
    if len(abilities) < 3 or len(table.vfms) < 3:
        return None
    angles = np.linspace(0, 2 * math.pi, len(abilities), endpoint=False).tolist()
    fig = Figure(figsize=(7.5, 7.5))
    ax = fig.add_subplot(projection="polar")
    lo = -0.5
    for vfm, label, color in zip(table.vfms, _vfm_labels(table), _colors(table), strict=True):
        r = [float(np.clip(norm[ab].get(vfm, (lo,))[0], lo, 1.0)) for ab in abilities]
        style = "--" if table.random_weights.get(vfm) else "-"
        ax.plot(angles + angles[:1], r + r[:1], style, color=color, label=label, linewidth=1.6)
        ax.fill(angles + angles[:1], r + r[:1], color=color, alpha=0.06)
    ax.plot(np.linspace(0, 2 * math.pi, 200), np.zeros(200), color="0.3", linewidth=1, linestyle=":")
    ax.set_xticks(angles, [ab.replace("_", " ") for ab in abilities], fontsize=10)
    ax.tick_params(axis="x", pad=12)
    ax.set_ylim(lo, 1)
    ax.set_yticks([0.0, 0.5, 1.0], ["baseline", "0.5", "best"], fontsize=8, color="0.35")
    ax.set_rlabel_position(90 / len(abilities))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=min(3, len(table.vfms)), fontsize=9)
    fig.suptitle(
        f"Normalized scores: 0 = chance/majority baseline, 1 = best possible\n{_caption(table)}", fontsize=9, y=0.995
    )
    return fig


def normalized(table: HeadTable) -> Figure | None:
    """Normalized score with 95% interval per ability and VFM (0 = baseline, 1 = best possible), as dots with
    error bars: readable for any number of VFMs. None when no ability has a baseline."""
    from matplotlib.figure import Figure

    abilities, norm = _normalized(table)
    if not abilities:
        return None
    fig = Figure(figsize=(8, 0.45 * len(abilities) * max(1, len(table.vfms)) ** 0.5 + 2.2))
    ax = fig.add_subplot()
    k = len(table.vfms)
    for j, (vfm, label, color) in enumerate(zip(table.vfms, _vfm_labels(table), _colors(table), strict=True)):
        ys, xs, err = [], [], [[], []]
        for i, ab in enumerate(abilities):
            if vfm in norm[ab]:
                x, lo, hi = norm[ab][vfm]
                ys.append(i + (j - (k - 1) / 2) * 0.7 / max(k, 1))
                xs.append(x)
                err[0].append(x - lo)
                err[1].append(hi - x)
        marker = "s" if table.random_weights.get(vfm) else "o"
        ax.errorbar(xs, ys, xerr=err, fmt=marker, color=color, label=label, capsize=2, markersize=5)
    ax.axvline(0, color="0.3", linestyle=":", linewidth=1)
    ax.axvline(1, color="0.3", linestyle="-", linewidth=0.8)
    ax.set_yticks(range(len(abilities)), [ab.replace("_", " ") for ab in abilities], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("normalized score (0 = better of chance and majority baseline, 1 = best possible)", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=min(4, k), fontsize=8)
    ax.set_title(f"Normalized scores with 95% bootstrap intervals\n{_caption(table)}", fontsize=9)
    return fig


def _panel_state(table: HeadTable, ab: str) -> str | None:
    """ "all unparsed" / "all zero" when no VFM's score says anything on this ability; else None."""
    scored = [v for v in table.vfms if table.values[ab].get(v) is not None]
    if scored and all(table.n_unparsed[ab].get(v, 0) >= table.n[ab].get(v, 1) > 0 for v in scored):
        return "all replies unparsed"
    if scored and all(table.values[ab][v] == 0 for v in scored):
        return "all scores zero"
    return None


def bars(table: HeadTable) -> Figure:
    """One small bar chart per ability: each VFM's value with its 95% interval, the chance (dashed) and
    majority (dotted) baselines; a panel where every reply was unparsed or every score zero is marked so."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    n = len(table.abilities)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(3.6 * cols, 3.0 * rows + 1.0))
    colors = _colors(table)
    for i, ab in enumerate(table.abilities):
        ax = fig.add_subplot(rows, cols, i + 1)
        _bar_panel(ax, table, ab, colors)
    handles = [
        Line2D([], [], color="0.2", linestyle="--", label="chance"),
        Line2D([], [], color="0.2", linestyle=":", label="majority (train)"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(
        f"Per-ability scores with 95% bootstrap intervals (hatched: random weights)\n{_caption(table)}", fontsize=9
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


def _bar_panel(ax: Any, table: HeadTable, ab: str, colors: list) -> None:
    ys = [table.values[ab].get(v) for v in table.vfms]
    heights = [y if y is not None else 0.0 for y in ys]
    cis = table.intervals.get(ab, {})
    err = np.array(
        [
            [y - cis[v][0], cis[v][1] - y] if (y is not None and cis.get(v)) else [0, 0]
            for v, y in zip(table.vfms, heights, strict=True)
        ]
    ).T
    container = ax.bar(
        range(len(table.vfms)), heights, color=colors, yerr=err, capsize=3, error_kw={"elinewidth": 1, "ecolor": "0.15"}
    )
    for x, (patch, vfm, y) in enumerate(zip(container.patches, table.vfms, ys, strict=True)):
        if table.random_weights.get(vfm):
            patch.set_hatch("//")
        if y is None:
            patch.set_alpha(0.2)
        n = table.n[ab].get(vfm, 0)
        if n and table.n_unparsed[ab].get(vfm, 0) >= n:  # a bar at the worst value says why
            ax.text(
                x,
                0.02,
                "all unparsed",
                transform=ax.get_xaxis_transform(),
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=7,
                color="#8b0000",
            )
    tops = [h + e for h, e in zip(heights, err[1], strict=True)] if len(heights) else [0.0]
    for kind, style in (("chance", "--"), ("majority", ":")):
        b = table.baselines.get(ab, {}).get(kind, {}).get("value")
        if b is not None:
            ax.axhline(b, color="0.2", linestyle=style, linewidth=1.1)
            tops.append(b)
    lo = min([0.0, *[h for h in heights]])
    top = max(tops) if tops else 1.0
    ax.set_ylim(lo * 1.1, (top * 1.12) or 1.0)  # all-zero scores: a 0..1 axis, not -0.05..0.05
    if state := _panel_state(table, ab):
        ax.set_facecolor("#f3e6e6")
        ax.text(
            0.5,
            0.5,
            state,
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=10,
            color="#8b0000",
            bbox={"facecolor": "white", "edgecolor": "#8b0000"},
        )
    ax.set_title(f"{ab}: {table.metrics[ab]} {arrow(table.higher_is_better[ab])}  (n={_n(table, ab)})", fontsize=9)
    ax.set_xticks(range(len(table.vfms)), [_short(v) for v in table.vfms], rotation=25, ha="right", fontsize=8)
    ax.tick_params(axis="y", labelsize=8)


def _n(table: HeadTable, ab: str) -> str:
    ns = sorted(set(table.n.get(ab, {}).values()))
    return "/".join(map(str, ns)) or "0"


def _short(label: str, width: int = 16) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


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
    ax.set_xticks(range(len(table.vfms)), _vfm_labels(table), rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.axhline(len(rows) - 1.5, color="white", linewidth=2)
    fig.colorbar(im, ax=ax, label="rank (1 = best)")
    ax.set_title(f"Ranks per ability\n{_caption(table)}", fontsize=9)
    return fig


def write_plots(table: HeadTable, out_dir: Path) -> dict[str, list[str]]:
    """All figures of one head under ``out_dir``; returns ``kind -> [file names]`` (radar and normalized may be
    absent: see their docstrings)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = slug(table.id or table.head)
    written: dict[str, list[str]] = {}
    for kind, make in (("bars", bars), ("normalized", normalized), ("radar", radar), ("ranks", rank_heatmap)):
        fig = make(table)
        if fig is not None:
            written[kind] = save_figure(fig, out_dir, f"{stem}-{kind}")
    return written
