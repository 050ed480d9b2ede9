"""Rendering a report (the dict :func:`ava.report.make_report` writes as report.json) as GitHub markdown, LaTeX
(booktabs) and rich terminal tables.

Every table says which head made it, which split it was scored on and who made that split, whether the data was
synthetic, and which VFMs had random weights, so a number never travels without what it means.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

RANDOM = "random weights"
TABLE_NOTE = (
    "Cells are `value (rank)`; rank 1 is best; tied values share their average rank; the average rank is over "
    "the abilities every VFM of that head was scored on."
)
AGREEMENT_NOTE = (
    "Did the ranking of VFMs hold when the head changed? Kendall tau-b and Spearman rho (both tie-aware) between "
    "two heads' ranks; +1 = same order, -1 = reversed. n/a when fewer than 2 VFMs are shared or a ranking is constant."
)
RADAR_NOTE = (
    "Radar: per ability, scores are min-max normalized across the VFMs of that head, direction respected (1 = best "
    "VFM here, 0 = worst; 0.5 for all when they tie). It shows relative standing, not absolute skill."
)


def fmt_value(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def fmt_rank(r: float | None) -> str:
    return "–" if r is None else f"{r:.3g}"


def fmt_coef(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def vfm_header(table: dict[str, Any], vfm: str) -> str:
    return f"{vfm} ({RANDOM})" if table["random_weights"].get(vfm) else vfm


def arrow(higher_is_better: bool) -> str:
    return "↑" if higher_is_better else "↓"


def table_caption(table: dict[str, Any]) -> str:
    """Head, split, data kind and random-weight VFMs of one head's table, in one line."""
    rand = [v for v in table["vfms"] if table["random_weights"].get(v)]
    parts = [
        f"head: {table['head']}",
        f"split: {', '.join(table['splits'])}",
        "data: synthetic" if table["synthetic"] else "data: real",
        f"{RANDOM}: {', '.join(rand)} (a control, not a trained model)" if rand else f"{RANDOM}: no VFM",
    ]
    if table.get("head_random_weights"):
        parts.append(f"the head's LLM has {RANDOM} (a pipeline check, not a measurement)")
    return " · ".join(parts)


def table_rows(table: dict[str, Any]) -> list[list[str]]:
    """Header + rows of the Table-5 layout: ability, metric, then 'value (rank)' per VFM, then the average rank."""
    rows = [["ability", "metric", *(vfm_header(table, v) for v in table["vfms"])]]
    for ab in table["abilities"]:
        cells = []
        for v in table["vfms"]:
            x = table["values"][ab].get(v)
            cells.append("–" if x is None else f"{fmt_value(x)} ({fmt_rank(table['ranks'][ab].get(v))})")
        rows.append([ab, f"{table['metrics'][ab]} {arrow(table['higher_is_better'][ab])}", *cells])
    over = f"over {len(table['average_over'])}"
    rows.append(["average rank", over, *(fmt_rank(table["average_rank"].get(v)) for v in table["vfms"])])
    return rows


def agreement_caption(report: dict[str, Any], agr: dict[str, Any]) -> str:
    """Both heads with their split and data kind, the shared VFMs, and which of them had random weights."""
    heads = [report["heads"][h] for h in agr["heads"]]
    sides = [f"{t['head']} ({', '.join(t['splits'])}, {'synthetic' if t['synthetic'] else 'real'} data)" for t in heads]
    rand = sorted({v for t in heads for v in agr["vfms"] if t["random_weights"].get(v)})
    weights = f"{RANDOM}: {', '.join(rand)}" if rand else f"{RANDOM}: none"
    return f"heads: {' vs '.join(sides)} · VFMs in common: {', '.join(agr['vfms']) or 'none'} · {weights}"


def agreement_rows(agr: dict[str, Any]) -> list[list[str]]:
    rows = [["ranking", "n VFMs", "Kendall tau", "Spearman rho", "note"]]
    for ab, a in agr["abilities"].items():
        rows.append([ab, str(a["n"]), fmt_coef(a["kendall_tau"]), fmt_coef(a["spearman_rho"]), a["reason"] or ""])
    a = agr["average_rank"]
    label = f"average rank (over {len(agr['average_over'])} shared abilities)"
    rows.append([label, str(a["n"]), fmt_coef(a["kendall_tau"]), fmt_coef(a["spearman_rho"]), a["reason"] or ""])
    return rows


def subgroup_rows(table: dict[str, Any], group: dict[str, Any]) -> list[list[str]]:
    vfms = [v for v in table["vfms"] if any(v in cells for cells in group["values"].values())]
    rows = [["bin", *(vfm_header(table, v) for v in vfms)]]
    for b in group["bins"]:
        cells = group["values"][b]
        rows.append([str(b), *(_subgroup_cell(cells.get(v)) for v in vfms)])
    return rows


def _subgroup_cell(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "–"
    value = cell.get("value")
    value = value if isinstance(value, int | float) else None
    return f"{fmt_value(value)} (n={cell.get('n', '?')})"


def _md_table(rows: list[list[str]]) -> str:
    def esc(c: str) -> str:
        return c.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _md_runs(report: dict[str, Any], base: Path | None) -> str:
    rows = [["run", "head", "VFM", RANDOM, "split", "data"]]
    for r in report["runs"]:
        path = os.path.relpath(r["path"], base) if base is not None else r["path"]
        rand = [name for name, flag in (("VFM", r["vfm_random_weights"]), ("LLM", r["llm_random_weights"])) if flag]
        rows.append([f"`{path}`", r["head"], r["vfm"], f"**{' + '.join(rand)}**" if rand else "no",
                     r["split_label"], "synthetic" if r["synthetic"] else "real"])  # fmt: skip
    return _md_table(rows)


def _md_plots(report: dict[str, Any], head: str) -> list[str]:
    out = []
    for kind, files in report["plots"].get(head, {}).items():
        png = next(f for f in files if f.endswith(".png"))
        svg = next((f for f in files if f.endswith(".svg")), None)
        link = f" ([SVG]({svg}))" if svg else ""
        out.append(f"![{head} {kind}]({png}){link}")
    return out


def _md_unparsed(report: dict[str, Any]) -> list[str]:
    lines = []
    for head, t in report["heads"].items():
        for ab in t["abilities"]:
            for v, k in t["n_unparsed"][ab].items():
                if k:
                    lines.append(f"- {head} · {v} · {ab}: {k} of {t['n'][ab][v]} replies unparsed (scored worst)")
    return lines


def markdown(report: dict[str, Any], base: Path | None = None) -> str:
    """report.md: runs, one Table-5 per head with its plots, rank agreement, subgroups, notes.

    Run paths are shown relative to ``base`` (the report's directory) when given, so the file can move with them.
    """
    md = ["# AVA-Bench report", ""]
    if report.get("opening"):
        md += ["## What the fingerprints show", "", *(f"- {line}" for line in report["opening"]), ""]
    if any(r["random_weights"] for r in report["runs"]):
        md += [
            f"> **Note:** a VFM or LLM marked *{RANDOM}* is a control with untrained weights, not a trained model.",
            "",
        ]
    if any(r["synthetic"] for r in report["runs"]):
        md += ["> **Note:** scored on *synthetic* data: only relative behaviour is meaningful, not paper numbers.", ""]
    md += ["## Runs", "", _md_runs(report, base), ""]
    md += ["## Scores and ranks per head", "", TABLE_NOTE, ""]
    for head, t in report["heads"].items():
        md += [f"### Head: {head}", "", f"*{table_caption(t)}*", "", _md_table(table_rows(t)), ""]
        md += [f"> {note}" for note in t["notes"]] + ([""] if t["notes"] else [])
        md += _md_plots(report, head) + [""]
    md += ["## Rank agreement between heads", "", AGREEMENT_NOTE, ""]
    if not report["agreement"]:
        md += ["n/a: the report has a single head.", ""]
    for agr in report["agreement"]:
        a, b = agr["heads"]
        md += [f"### {a} vs {b}", "", f"*{agreement_caption(report, agr)}*", ""]
        md += [_md_table(agreement_rows(agr)), ""]
    if report["subgroups"]:
        md += ["## Subgroups", ""]
    for head, per_ability in report["subgroups"].items():
        t = report["heads"][head]
        for ab, groups in per_ability.items():
            for name, group in groups.items():
                md += [f"### {head} · {ab} by {name}", "", f"*{table_caption(t)}; {t['metrics'][ab]} "
                       f"{arrow(t['higher_is_better'][ab])}*", "", _md_table(subgroup_rows(t, group)), ""]  # fmt: skip
    if unparsed := _md_unparsed(report):
        md += ["## Unparsed replies", "", *unparsed, ""]
    prov = report["provenance"]
    md += ["## Notes", "", f"- {RADAR_NOTE}", f"- Results file: `results_{report['split']}.json` of each run; "
           f"ava {prov.get('ava_version')}, git {prov.get('git_revision')}, {prov.get('created')}.", ""]  # fmt: skip
    return "\n".join(md)


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "_": r"\_", "#": r"\#", "$": r"\$", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
        ">": r"\textgreater{}", "↑": r"$\uparrow$", "↓": r"$\downarrow$", "–": "--", "·": ";"}  # fmt: skip


def _tex_escape(s: str) -> str:
    return "".join(_TEX.get(c, c) for c in s)


def latex(report: dict[str, Any]) -> str:
    """report.tex: one booktabs table per head (needs ``\\usepackage{booktabs}``), pasteable into a paper."""
    out = ["% Generated by `ava report`; needs \\usepackage{booktabs}."]
    for t in report["heads"].values():
        rows = table_rows(t)
        out += [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{ll" + "r" * (len(rows[0]) - 2) + "}",
                r"\toprule", " & ".join(_tex_escape(c) for c in rows[0]) + r" \\", r"\midrule"]  # fmt: skip
        out += [" & ".join(_tex_escape(c) for c in r) + r" \\" for r in rows[1:-1]]
        out += [r"\midrule", " & ".join(_tex_escape(c) for c in rows[-1]) + r" \\", r"\bottomrule", r"\end{tabular}"]
        out += [
            r"\caption{" + _tex_escape(table_caption(t)).replace("·", ";") + ". Cells: value (rank).}",
            r"\end{table}",
            "",
        ]
    return "\n".join(out)


def summary_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per pair of heads: the agreement of their average ranks (per-ability detail is in report.md)."""
    rows = [["head", "vs head", "abilities", "VFMs", "tau", "rho", "note"]]
    for agr in report["agreement"]:
        a = agr["average_rank"]
        rows.append([*agr["heads"], str(len(agr["average_over"])), str(a["n"]), fmt_coef(a["kendall_tau"]),
                     fmt_coef(a["spearman_rho"]), a["reason"] or ""])  # fmt: skip
    return rows


def print_report(report: dict[str, Any], console: Any = None, detail: bool = False) -> None:
    """The per-head tables and the rank agreement on average rank (``detail``: per ability too), in the terminal."""
    from rich.console import Console
    from rich.table import Table

    def show(rows: list[list[str]], title: str, caption: str | None = None, bold_last: bool = False) -> None:
        table = Table(title=title, caption=caption)
        for i, c in enumerate(rows[0]):
            numeric = all(len(r[i]) <= 8 for r in rows)  # short cells (numbers) never wrap; text columns do
            table.add_column(c, style="red" if f"({RANDOM})" in c else None, no_wrap=numeric)
        for i, r in enumerate(rows[1:], 1):
            table.add_row(*r, style="bold" if bold_last and i == len(rows) - 1 else None)
        console.print(table)

    console = console or Console()
    for line in report.get("opening") or []:
        console.print(f"- {line}", highlight=False)
    for t in report["heads"].values():
        show(table_rows(t), f"Head: {t['head']}", table_caption(t), bold_last=True)
    if report["agreement"]:
        show(summary_rows(report), "Rank agreement between heads on average rank: Kendall tau-b, Spearman rho",
             "per-ability agreement: report.md")  # fmt: skip
    if detail:
        for agr in report["agreement"]:
            show(agreement_rows(agr), f"Rank agreement: {' vs '.join(agr['heads'])}", agreement_caption(report, agr))
