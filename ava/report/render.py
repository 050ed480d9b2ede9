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
    "Cells are `value [95% interval] (rank)`; the interval is a percentile bootstrap over the test samples "
    "(seeded, paired across VFMs scored on the same samples); rank 1 is best; tied values share their average rank; "
    "`~` marks a rank the bootstrap does not separate from a neighbour's (P(A beats B) < 0.95: a tie in "
    "distribution). `n` is the number of test samples per ability; `chance` is a uniformly random option, "
    "`majority` the most frequent train answer, both scored like any reply. The average rank is over the "
    "abilities every VFM of that head was scored on (listed under each table)."
)
AGREEMENT_NOTE = (
    "Did the ranking of VFMs hold when the head changed? Kendall tau-b and Spearman rho (both tie-aware) between "
    "two heads' ranks, with 95% bootstrap intervals; +1 = same order, -1 = reversed. n/a below 3 VFMs in common "
    "(with 2, tau can only be +1 or -1) or when a ranking is constant."
)
RADAR_NOTE = (
    "Plots: per ability, scores are normalized between the better of the chance and majority baselines (0) and "
    "the metric's best possible value (1), the same scale whatever VFMs a report holds; below 0 is worse than the "
    "baseline. Abilities without a baseline are left out of the normalized plot. No radar below 3 VFMs."
)
TIE = "~"


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
    ]
    if rand:
        parts.append(f"{RANDOM}: {', '.join(rand)} (a control, not a trained model)")
    if table.get("head_random_weights"):
        parts.append(f"the head's LLM has {RANDOM} (a pipeline check, not a measurement)")
    return " · ".join(parts)


def fmt_ci(ci: list[float] | None) -> str:
    return "" if not ci else f" [{fmt_value(ci[0])}, {fmt_value(ci[1])}]"


def fmt_with_ci(x: float, ci: list[float] | None, sig: int = 4) -> str:
    """``x`` to ``sig`` significant digits and its interval to the same decimal places, so a value never looks
    outside its own interval by rounding alone (``1.14 [1.14, 1.46]``, not ``1.14 [1.143, 1.464]``)."""
    import math

    d = None
    if math.isfinite(x):
        d = sig - 1 if x == 0 else max(0, sig - 1 - math.floor(math.log10(abs(x))))
    if d is None or d > 10:  # tiny or non-finite: significant digits for all three
        return f"{x:.{sig}g}" + ("" if not ci else f" [{ci[0]:.{sig}g}, {ci[1]:.{sig}g}]")
    return f"{x:.{d}f}" + ("" if not ci else f" [{ci[0]:.{d}f}, {ci[1]:.{d}f}]")


def _tied(groups: list[list[str]], vfm: str) -> bool:
    return any(vfm in g for g in groups)


def n_cell(table: dict[str, Any], ab: str) -> str:
    """The ability's n: one number when every VFM had the same n, else each VFM's."""
    ns = table["n"].get(ab, {})
    if len(set(ns.values())) <= 1:
        return str(next(iter(ns.values()), 0))
    return ", ".join(f"{v}={k}" for v, k in ns.items())


def baseline_cell(table: dict[str, Any], ab: str, kind: str) -> str:
    b = (table.get("baselines") or {}).get(ab, {}).get(kind) or {}
    return "n/a" if b.get("value") is None else fmt_value(b["value"])


def value_cell(table: dict[str, Any], ab: str, v: str) -> str:
    x = table["values"][ab].get(v)
    if x is None:
        return "–"
    ci = (table.get("intervals") or {}).get(ab, {}).get(v)
    rank = fmt_rank(table["ranks"][ab].get(v)) + (TIE if _tied((table.get("ties") or {}).get(ab, []), v) else "")
    return f"{fmt_with_ci(x, ci)} ({rank})"


def table_rows(table: dict[str, Any]) -> list[list[str]]:
    """Header + rows of the Table-5 layout with n, baselines and intervals: ability, metric, n, chance, majority,
    then 'value [interval] (rank)' per VFM, then the average rank with its interval."""
    rows = [["ability", "metric", "n", "chance", "majority", *(vfm_header(table, v) for v in table["vfms"])]]
    for ab in table["abilities"]:
        rows.append(
            [
                ab,
                f"{table['metrics'][ab]} {arrow(table['higher_is_better'][ab])}",
                n_cell(table, ab),
                baseline_cell(table, ab, "chance"),
                baseline_cell(table, ab, "majority"),
                *(value_cell(table, ab, v) for v in table["vfms"]),
            ]
        )
    over = f"over {len(table['average_over'])}"
    cells = []
    for v in table["vfms"]:
        r = table["average_rank"].get(v)
        tie = TIE if _tied(table.get("average_rank_ties") or [], v) else ""
        ci = (table.get("average_rank_interval") or {}).get(v)
        cells.append((fmt_rank(r) if r is None else fmt_with_ci(r, ci, sig=3)) + tie)
    rows.append(["average rank", over, "", "", "", *cells])
    return rows


def average_over_line(table: dict[str, Any]) -> str:
    over = table["average_over"]
    return f"Average rank over {len(over)} abilities: {', '.join(over) if over else 'none'}."


def agreement_caption(report: dict[str, Any], agr: dict[str, Any]) -> str:
    """Both heads with their split and data kind, the shared VFMs, and which of them had random weights."""
    heads = [report["heads"][h] for h in agr.get("head_ids", agr["heads"])]
    sides = [f"{t['head']} ({', '.join(t['splits'])}, {'synthetic' if t['synthetic'] else 'real'} data)" for t in heads]
    rand = sorted({v for t in heads for v in agr["vfms"] if t["random_weights"].get(v)})
    weights = f"{RANDOM}: {', '.join(rand)}" if rand else f"{RANDOM}: none"
    same = "scored on the same samples" if agr.get("same_samples") else "NOT verified to be scored on the same samples"
    return f"heads: {' vs '.join(sides)} · VFMs in common: {', '.join(agr['vfms']) or 'none'} · {weights} · {same}"


def fmt_coef_ci(a: dict[str, Any], key: str) -> str:
    ci = a.get(f"{key}_ci")
    return fmt_coef(a[key]) + ("" if not ci else f" [{ci[0]:+.3f}, {ci[1]:+.3f}]")  # the coefficient's rounding


def agreement_rows(agr: dict[str, Any]) -> list[list[str]]:
    rows = [["ranking", "n VFMs", "Kendall tau [95%]", "Spearman rho [95%]", "note"]]
    for ab, a in agr["abilities"].items():
        rows.append([ab, str(a["n"]), fmt_coef_ci(a, "kendall_tau"), fmt_coef_ci(a, "spearman_rho"), a["reason"] or ""])
    a = agr["average_rank"]
    over = agr["average_over"]
    label = f"average rank (over {len(over)} shared abilities: {', '.join(over) or 'none'})"
    rows.append([label, str(a["n"]), fmt_coef_ci(a, "kendall_tau"), fmt_coef_ci(a, "spearman_rho"), a["reason"] or ""])
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


def md_table(rows: list[list[str]]) -> str:
    def esc(c: str) -> str:
        return c.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def runs_rows(report: dict[str, Any], base: Path | None = None) -> list[list[str]]:
    """One row per run: its path, head, VFM, what the VFM's weights are, random weights, split, data."""
    rows = [["run", "head", "VFM", "VFM weights", RANDOM, "split", "data"]]
    for r in report["runs"]:
        path = os.path.relpath(r["path"], base) if base is not None else r["path"]
        rand = [name for name, flag in (("VFM", r["vfm_random_weights"]), ("LLM", r["llm_random_weights"])) if flag]
        rows.append(
            [
                path,
                r["head"],
                r["vfm"],
                r.get("weights", "?"),
                " + ".join(rand) if rand else "no",
                r["split_label"],
                "synthetic" if r["synthetic"] else "real",
            ]
        )
    return rows


def _md_runs(report: dict[str, Any], base: Path | None) -> str:
    rows = runs_rows(report, base)
    return md_table(
        [rows[0]] + [[f"`{r[0]}`", *r[1:4], f"**{r[4]}**" if r[4] != "no" else "no", *r[5:]] for r in rows[1:]]
    )


OPENING_TITLE = "What the fingerprints show"


def opening_lines(report: dict[str, Any]) -> list[str]:
    """The sentences of the ``opening`` hook (``make_report(opening=...)``), as given."""
    return [str(x) for x in report.get("opening") or []]


def fold_subgroups(report: dict[str, Any]) -> tuple[list[tuple[str, str, str, dict[str, Any]]], list[str]]:
    """Subgroup tables with >= 2 bins as (head, ability, group, group data), and one line per single-bin group
    (a table with one bin repeats the ability's score and would fill the page)."""
    tables, folded = [], []
    for head, per_ability in report["subgroups"].items():
        t = report["heads"][head]
        for ab, groups in per_ability.items():
            for name, group in groups.items():
                if len(group["bins"]) >= 2:
                    tables.append((head, ab, name, group))
                    continue
                b = group["bins"][0] if group["bins"] else "?"
                cells = group["values"].get(b, {})
                vals = ", ".join(f"{v} {_subgroup_cell(cells.get(v))}" for v in t["vfms"] if v in cells)
                folded.append(f"{t['head']} · {ab} by {name}: a single bin ({b}): {vals}")
    return tables, folded


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
    for t in report["heads"].values():
        if t.get("refused"):
            continue
        for ab in t["abilities"]:
            for v, k in t["n_unparsed"][ab].items():
                if k:
                    lines.append(f"- {t['head']} · {v} · {ab}: {k} of {t['n'][ab][v]} replies unparsed (scored worst)")
    return lines


CONTENTS_TITLE = "Contents"


def with_markdown_contents(md: str) -> str:
    """``md`` with a table of contents after its title: a link to every ``##`` and ``###`` heading by the anchor
    GitHub (and most renderers) give it."""
    import re

    from ava.report.markup import anchor

    lines, used, toc, fenced = md.split("\n"), set(), [], False
    for line in lines:
        fenced ^= line.startswith("```")
        if fenced or not (m := re.match(r"^(#{1,3}) (.*)$", line)):
            continue
        name = anchor(m.group(2), used)  # every heading takes its anchor, so duplicates number as GitHub's do
        if len(m.group(1)) > 1:
            text = re.sub(r"[`*]", "", m.group(2)).replace("[", "\\[").replace("]", "\\]")
            toc.append(f"{'  ' * (len(m.group(1)) - 2)}- [{text}](#{name})")
    if not toc:
        return md
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("# ")), 0)
    return "\n".join([*lines[:at], "", f"**{CONTENTS_TITLE}**", "", *toc, *lines[at:]])


def markdown(report: dict[str, Any], base: Path | None = None, after_head: dict[str, list[str]] | None = None) -> str:
    """report.md: runs, one Table-5 per head with its plots, rank agreement, subgroups, notes.

    Run paths are shown relative to ``base`` (the report's directory) when given, so the file can move with them.
    ``after_head``: lines to add under a head's table, by head id (the comparisons with published results).
    """
    md = ["# AVA-Bench report", ""]
    if lines := opening_lines(report):
        md += [f"## {OPENING_TITLE}", "", *(f"- {line}" for line in lines), ""]
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
        md += [f"### Head: {t['head']}", ""]
        if t.get("refused"):
            md += [f"> **Refused:** {t['refused']}", ""]
            md += (after_head or {}).get(head, [])
            continue
        md += [f"*{table_caption(t)}*", "", md_table(table_rows(t)), "", average_over_line(t), ""]
        md += [f"> {note}" for note in t["notes"]] + ([""] if t["notes"] else [])
        md += _md_plots(report, head) + [""]
        md += (after_head or {}).get(head, [])
    md += ["## Rank agreement between heads", "", AGREEMENT_NOTE, ""]
    if not report["agreement"]:
        md += ["n/a: the report has a single head.", ""]
    for agr in report["agreement"]:
        a, b = agr["heads"]
        md += [f"### {a} vs {b}", "", f"*{agreement_caption(report, agr)}*", ""]
        md += [md_table(agreement_rows(agr)), ""]
    tables, folded = fold_subgroups(report)
    if tables or folded:
        md += ["## Subgroups", ""]
    for head, ab, name, group in tables:
        t = report["heads"][head]
        md += [
            f"### {t['head']} · {ab} by {name}",
            "",
            f"*{table_caption(t)}; {t['metrics'][ab]} {arrow(t['higher_is_better'][ab])}*",
            "",
            md_table(subgroup_rows(t, group)),
            "",
        ]
    if folded:
        md += ["Single-bin subgroups (the whole ability falls in one bin):", "", *(f"- {x}" for x in folded), ""]
    if "task_augmentation" in report:
        from ava.report.augment import markdown_lines

        md += markdown_lines(report["task_augmentation"])
    if unparsed := _md_unparsed(report):
        md += ["## Unparsed replies", "", *unparsed, ""]
    prov = report["provenance"]
    md += [
        "## Notes",
        "",
        f"- {RADAR_NOTE}",
        f"- Results file: `results_{report['split']}.json` of each run; "
        f"ava {prov.get('ava_version')}, git {prov.get('git_revision')}, {prov.get('created')}.",
        "",
    ]
    return "\n".join(md)


_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "_": r"\_",
    "#": r"\#",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "–": "--",
    "·": ";",
}


def tex_escape(s: str) -> str:
    return "".join(_TEX.get(c, c) for c in s)


def latex(report: dict[str, Any]) -> str:
    """report.tex: one booktabs table per head (needs ``\\usepackage{booktabs}``), pasteable into a paper."""
    out = ["% Generated by `ava report`; needs \\usepackage{booktabs}."]
    for t in report["heads"].values():
        if t.get("refused"):
            out += ["% " + t["refused"], ""]
            continue
        caption = (
            tex_escape(table_caption(t)).replace("·", ";")
            + r". Cells: value [95\% bootstrap interval] (rank); \textasciitilde{} marks a rank not separated "
            + "from a neighbour's; "
            + tex_escape(average_over_line(t))
        )
        out += tex_table(table_rows(t), caption, total=True)
    return "\n".join(out)


def tex_table(rows: list[list[str]], caption: str, *, total: bool = False) -> list[str]:
    """A booktabs table of header + rows (cells escaped here; ``caption`` is LaTeX already); ``total``: the last row
    is set apart (an average rank)."""
    body = [" & ".join(tex_escape(c) for c in r) + r" \\" for r in rows[1:]]
    if total:
        body[-1:] = [r"\midrule", body[-1]]
    return [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        r"\begin{tabular}{ll" + "r" * (len(rows[0]) - 2) + "}",
        r"\toprule",
        " & ".join(tex_escape(c) for c in rows[0]) + r" \\",
        r"\midrule",
        *body,
        r"\bottomrule",
        r"\end{tabular}",
        r"\caption{" + caption + "}",
        r"\end{table}",
        "",
    ]


def summary_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per pair of heads: the agreement of their average ranks (per-ability detail is in report.md)."""
    rows = [["head", "vs head", "abilities", "VFMs", "tau", "rho", "note"]]
    for agr in report["agreement"]:
        a = agr["average_rank"]
        rows.append(
            [
                *agr["heads"],
                str(len(agr["average_over"])),
                str(a["n"]),
                fmt_coef(a["kendall_tau"]),
                fmt_coef(a["spearman_rho"]),
                a["reason"] or "",
            ]
        )
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
        if t.get("refused"):
            console.print(f"[bold red]refused:[/] {t['refused']}", highlight=False)
            continue
        show(table_rows(t), f"Head: {t['head']}", f"{table_caption(t)}\n{average_over_line(t)}", bold_last=True)
    if report["agreement"]:
        show(
            summary_rows(report),
            "Rank agreement between heads on average rank: Kendall tau-b, Spearman rho",
            "per-ability agreement: report.md",
        )
    if detail:
        for agr in report["agreement"]:
            show(agreement_rows(agr), f"Rank agreement: {' vs '.join(agr['heads'])}", agreement_caption(report, agr))
