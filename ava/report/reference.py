"""Scores relative to a reference VFM (``ava report --reference dinov2``; the AVA-Bench paper's Figure 5 against
DINOv2 or SigLIP-2): per head, ability and VFM, how the VFM's score compares with the reference's.

The ratio is taken so that above 1 is better than the reference whatever the metric's direction: value / reference
where higher is better (accuracy, GIoU, ANLS), reference / value where lower is better (MAE/GT, CIEDE2000). It is
left out (None) where its denominator is not positive (an accuracy of 0, a negative GIoU), since a ratio to it
says nothing. The reference is matched by its name as the runs give it, or by the name before ``#`` / ``@``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ava.errors import AvaError

if TYPE_CHECKING:
    from ava.report.tables import HeadTable


def ratio(value: float | None, ref: float | None, higher_is_better: bool) -> float | None:
    """The relative score (see the module docstring); None when it is not defined."""
    if value is None or ref is None:
        return None
    num, den = (value, ref) if higher_is_better else (ref, value)
    return None if den <= 0 or num < 0 else float(num / den)


def _match(vfms: list[str], reference: str) -> str | None:
    for v in vfms:
        if v == reference:
            return v
    base = [v for v in vfms if v.split("#")[0].split("@")[0] == reference]
    return base[0] if len(base) == 1 else None


def relative_scores(tables: dict[str, HeadTable], reference: str) -> dict[str, Any]:
    """``{head_id: {"head", "reference", "values": {ability: {vfm: ratio}}, "note"}}`` for every head whose table
    holds the reference; an error naming the VFMs when no head does."""
    out: dict[str, Any] = {}
    for key, t in tables.items():
        if t.refused:
            continue
        ref = _match(t.vfms, reference)
        if ref is None:
            out[key] = {
                "head": t.head,
                "reference": None,
                "values": {},
                "note": f"{reference!r} is not among this head's VFMs ({', '.join(t.vfms)})",
            }
            continue
        values = {
            ab: {v: ratio(t.values[ab].get(v), t.values[ab].get(ref), t.higher_is_better[ab]) for v in t.vfms}
            for ab in t.abilities
        }
        out[key] = {
            "head": t.head,
            "reference": ref,
            "values": values,
            "note": "above 1: better than the reference (value/reference, or reference/value where lower "
            "is better); '-' where the reference's score is not positive",
        }
    if not any(block["reference"] for block in out.values()):
        vfms = sorted({v for t in tables.values() for v in t.vfms})
        raise AvaError(f"--reference {reference!r}: no run of that VFM among the runs (VFMs: {', '.join(vfms)})")
    return out


TITLE = "Scores relative to a reference VFM"


def rows(block: dict[str, Any]) -> list[list[str]]:
    """Header and rows of one head's table (abilities down, VFMs across); empty without a reference."""
    if not block["values"]:
        return []
    vfms = list(next(iter(block["values"].values())))
    return [["ability", *vfms]] + [
        [ab, *("-" if row[v] is None else f"{row[v]:.2f}" for v in vfms)] for ab, row in block["values"].items()
    ]


def markdown(relative: dict[str, Any]) -> list[str]:
    """report.md's section: one table per head (abilities down, VFMs across)."""
    md = [f"## {TITLE}", ""]
    for block in relative.values():
        md += [f"### {block['head']}: relative to {block['reference'] or '-'}", "", f"*{block['note']}*", ""]
        if table := rows(block):
            md += ["| " + " | ".join(table[0]) + " |", "|---|" + "---:|" * (len(table[0]) - 1)]
            md += ["| " + " | ".join(r) + " |" for r in table[1:]] + [""]
    return md


def html(relative: dict[str, Any], plots: dict[str, list[str]], out: Path) -> list[str]:
    """report.html's section: the same tables, each with its heatmap inlined."""
    from ava.report.markup import data_uri, escape, table_html

    body = [f"<h2>{escape(TITLE)}</h2>"]
    for key, block in relative.items():
        body += [
            f"<h3>{escape(block['head'])}: relative to {escape(block['reference'] or '-')}</h3>",
            f'<p class="note">{escape(block["note"])}</p>',
        ]
        if table := rows(block):
            body.append(table_html(table))
        png = next((f for f in plots.get(key, []) if f.endswith(".png")), None)
        if png and (out / png).is_file():
            uri = data_uri((out / png).read_bytes(), "image/png")
            body.append(f'<img class="plot" alt="relative scores" src="{uri}">')
    return body


def write_plots(relative: dict[str, Any], out_dir: Path) -> dict[str, list[str]]:
    """A heatmap per head (abilities x VFMs, log2 of the ratio: 0 is the reference); PNG and SVG."""
    import numpy as np
    from matplotlib.figure import Figure

    from ava.report.plots import save_figure, slug

    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[str]] = {}
    for key, block in relative.items():
        if not block["values"]:
            continue
        abilities = list(block["values"])
        vfms = list(block["values"][abilities[0]])
        grid = np.array(
            [
                [np.nan if block["values"][a][v] in (None, 0) else np.log2(block["values"][a][v]) for v in vfms]
                for a in abilities
            ]
        )
        lim = max(0.1, float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0)
        fig = Figure(figsize=(1.2 + 0.9 * len(vfms), 1.0 + 0.35 * len(abilities)))
        ax = fig.add_subplot()
        im = ax.imshow(grid, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xticks(range(len(vfms)), vfms, rotation=30, ha="right")
        ax.set_yticks(range(len(abilities)), abilities)
        for i, a in enumerate(abilities):
            for j, v in enumerate(vfms):
                r = block["values"][a][v]
                dark = np.isfinite(grid[i, j]) and abs(grid[i, j]) > 0.6 * lim
                ax.text(
                    j,
                    i,
                    "-" if r is None else f"{r:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if dark else "black",
                )
        fig.colorbar(im, ax=ax, label=f"log2(score relative to {block['reference']})")
        ax.set_title(f"{block['head']}: relative to {block['reference']}", fontsize=9)
        files[key] = [f"plots/{n}" for n in save_figure(fig, out_dir, f"relative-{slug(key)}")]
    return files
