"""The published-results parts of a report (``report["published"]``, :mod:`ava.report.published`) as markdown,
HTML, LaTeX and terminal tables.

Values are shown on the source's own scale (the paper's: accuracy and ANLS in %, so a reader compares digits with
the paper's table directly); report.json keeps both (``value`` in ava's units, ``shown`` on the source's scale).
Every published row says *published, not re-run*; a flagged cell carries the flag's mark and its reason is listed
under the table.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ava.report.render import RANDOM, arrow, fmt_rank, fmt_with_ci, md_table

NOT_RERUN = "published, not re-run"
FLAG = "⚑"
NOTE = (
    "Cells: value (rank recomputed from values among the ranked rows, ties sharing their average rank; the "
    "source's printed rank after `p`); your rows add the 95% bootstrap interval. "
    f"{FLAG} marks a cell the source itself contradicts (listed below the table); a flagged value is left out of "
    "every recomputed rank. A published row of a VFM you re-ran is replaced by your run in the ranks."
)


def _num(x: Any) -> str:
    return "–" if x is None else f"{x:g}" if isinstance(x, int | float) else str(x)


def _unit(cmp_or_units: dict[str, Any], ab: str) -> str:
    scale = cmp_or_units[ab]["scale"]
    return " (%)" if scale == 100 else ""


def _rank_text(rank: float | None, printed: Any = None) -> str:
    parts = [fmt_rank(rank) if rank is not None else "–"]
    if printed is not None:
        parts.append(f"p {_num(printed)}")
    return "; ".join(parts)


def _our_cell(cell: dict[str, Any]) -> str:
    if cell["shown"] is None:
        return "–"
    return f"{fmt_with_ci(cell['shown'], cell['shown_interval'])} ({_rank_text(cell['rank'])})"


def _published_cell(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "–"
    mark = f" {FLAG}" if cell.get("flag") else ""
    return f"{_num(cell['shown'])} ({_rank_text(cell['rank'], cell.get('printed_rank'))}){mark}"


def _run_path(path: str | None, base: Path | None) -> str:
    if path is None:
        return ""
    return os.path.relpath(path, base) if base is not None else path


def comparison_rows(cmp: dict[str, Any], base: Path | None = None) -> list[list[str]]:
    """Header + one row per VFM (yours and the source's), abilities across, then the average ranks."""
    abilities = cmp["abilities"]
    header = ["VFM", "row", *(f"{ab}{_unit(cmp['units'], ab)}" for ab in abilities)]
    header += [f"avg rank (over {len(cmp['average_over'])})" if cmp["average_over"] else "avg rank", "printed avg rank"]
    rows = [header]
    for r in cmp["rows"]:
        if r["kind"] == "ours":
            what = f"ours: {_run_path(r['run'], base)}" + (f" ({RANDOM})" if r["random_weights"] else "")
            cells = [_our_cell(r["cells"][ab]) for ab in abilities]
            name = r["vfm"]
        else:
            what = NOT_RERUN + (f"; replaced in the ranks by your {r['replaced_by']}" if r["replaced_by"] else "")
            what += f" ({RANDOM})" if r["random_weights"] else ""
            cells = [_published_cell(r["cells"].get(ab)) for ab in abilities]
            name = r["name"] if r["name"] == r["vfm"] else f"{r['name']} ({r['vfm']})"
        avg = "–" if r["average_rank"] is None else fmt_rank(r["average_rank"])
        printed = _num(r.get("printed_average_rank")) + (f" {FLAG}" if r.get("average_rank_flag") else "")
        rows.append([name, what, *cells, avg, printed if r["kind"] != "ours" else ""])
    return rows


def average_rows(cmp: dict[str, Any]) -> list[list[str]]:
    """The printed average ranks beside the three recomputed ones, one row per published VFM."""
    rows = [
        [
            "VFM",
            "printed",
            "mean of printed ranks",
            f"recomputed, published alone (over {len(cmp['average_over_alone'])})",
            f"recomputed, with yours (over {len(cmp['average_over'])})",
        ]
    ]
    for r in cmp["rows"]:
        if r["kind"] != "published":
            continue
        mean = r["mean_printed_ranks"]
        rows.append(
            [
                r["name"],
                _num(r["printed_average_rank"]) + (f" {FLAG}" if r["average_rank_flag"] else ""),
                "–" if mean is None else f"{mean:.2f}",
                "–" if r["average_rank_alone"] is None else f"{r['average_rank_alone']:.2f}",
                "–"
                if r["average_rank"] is None
                else f"{r['average_rank']:.2f}"
                if r["ranked"]
                else f"replaced by your {r['replaced_by']}",
            ]
        )
    return rows


def diff_rows(d: dict[str, Any], units: dict[str, Any]) -> list[list[str]]:
    """Per ability: ours with its interval, the published value, ours - published, and the verdict."""
    rows = [["ability", "ours [95%]", "published", "ours - published", "published value in our interval"]]
    for ab, c in d["abilities"].items():
        s = c["shown"]
        rows.append(
            [
                f"{ab}{_unit(units, ab)}",
                fmt_with_ci(s["ours"], s["interval"]),
                _num(s["published"]),
                f"{s['difference']:+.4g}",
                c["verdict"],
            ]
        )
    return rows


def source_rows(table: dict[str, Any], columns: dict[str, Any]) -> list[list[str]]:
    """The source's own table: every value (and printed rank) as published, flags marked, recomputed averages."""
    abilities = table["abilities"]
    header = ["VFM", *(f"{ab} {arrow(columns[ab]['higher_is_better'])}{_unit(columns, ab)}" for ab in abilities)]
    header += ["printed avg rank", "mean of printed ranks", f"recomputed avg rank (over {len(table['average_over'])})"]
    rows = [header]
    for r in table["rows"]:
        cells = []
        for ab in abilities:
            c = r["cells"].get(ab)
            if not c:
                cells.append("–")
                continue
            rank = f" ({_num(c['printed_rank'])})" if c["printed_rank"] is not None else ""
            ci = f" [{_num(c['interval'][0])}, {_num(c['interval'][1])}]" if c.get("interval") else ""
            cells.append(f"{_num(c['printed'])}{ci}{rank}" + (f" {FLAG}" if c["flag"] else ""))
        mean = r["mean_printed_ranks"]
        name = r["name"] if r["name"] == r["vfm"] else f"{r['name']} ({r['vfm']})"
        rows.append(
            [
                name,
                *cells,
                _num(r["printed_average_rank"]) + (f" {FLAG}" if r["average_rank_flag"] else ""),
                "–" if mean is None else f"{mean:.2f}",
                "–" if r["average_rank"] is None else f"{r['average_rank']:.2f}",
            ]
        )
    return rows


def _caption(cmp: dict[str, Any], source: dict[str, Any]) -> str:
    same = "the same head" if cmp["same_head"] else "another head of the same kind"
    return (
        f"{source['title']} · published head: {cmp['published_head']} ({same}) · "
        f"ranked rows: {cmp['n_ranked']} · values on the source's scale"
    )


def flag_lines(source: dict[str, Any]) -> list[str]:
    what = {
        "value": "value left out of every recomputed rank",
        "printed_rank": "printed ranks not used; recomputed ranks share the tie",
        "printed_average_rank": "printed average not used; recomputed from values",
    }
    return [f"{FLAG} {f['id']}: {f['reason']} ({what.get(f['excludes'], f['excludes'])})." for f in source["flags"]]


def provenance_line(source: dict[str, Any]) -> str:
    p = source["provenance"]
    if source["kind"] == "paper":
        return (
            f"{p.get('paper')} ({p.get('venue')}, arXiv {p.get('arxiv')}), {p.get('table')}; head: {p.get('head')}; "
            f"split: {source['split']}"
        )
    return (
        f"results folder {source['location']}, exported {p.get('exported') or '?'} by ava {p.get('ava_version') or '?'}"
    )


def _blocks(report: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(block["source"], c) for block in report.get("published") or [] for c in block["comparisons"]]


# -- markdown ------------------------------------------------------------------------------------------------------
def head_markdown(report: dict[str, Any], base: Path | None = None) -> dict[str, list[str]]:
    """Lines to show under each report head: its comparisons with published results, or why there is none."""
    out: dict[str, list[str]] = {}
    for block in report.get("published") or []:
        source = block["source"]
        for cmp in block["comparisons"]:
            md = [f"#### Beside published results: {source['title']}", "", f"*{_caption(cmp, source)}*", ""]
            md += [f"> **Not comparable as such:** {b}" for b in cmp["banners"]] + ([""] if cmp["banners"] else [])
            if cmp["settings_differ"]:
                md += ["**Settings that differ from the published:** " + "; ".join(cmp["settings_differ"]) + ".", ""]
            md += [NOTE, "", md_table(comparison_rows(cmp, base)), ""]
            md += [f"- {ab}: left out of the average rank: {why}" for ab, why in cmp["left_out"].items()]
            if cmp["not_published"]:
                md.append(f"- not in the published table (not compared): {', '.join(cmp['not_published'])}")
            md += [""] + flag_lines(source) + [""] if source["flags"] else [""]
            if any(r["kind"] == "published" and r["printed_average_rank"] is not None for r in cmp["rows"]):
                md += ["Average ranks: printed, and recomputed.", "", md_table(average_rows(cmp)), ""]
                md += [f"- {n}" for n in cmp["average_rank_notes"]] + [""]
            for d in cmp["diff"]:
                md += [
                    f"**Ours - published: {d['vfm']} vs {d['published_name']}** "
                    f"({d['inside']} of {d['judged']} published values inside our 95% interval)",
                    "",
                    md_table(diff_rows(d, cmp["units"])),
                    "",
                ]
            out.setdefault(cmp["head_id"], []).extend(md)
        for a in block["apart"]:
            out.setdefault(a["head_id"], []).extend([f"> **{source['title']}:** {a['reason']}.", ""])
    return out


def markdown(report: dict[str, Any]) -> list[str]:
    """The published sources' own tables, as published (report.md's last tables section)."""
    blocks = report.get("published") or []
    if not blocks:
        return []
    md = ["## Published results, as published", ""]
    for block in blocks:
        source = block["source"]
        md += [f"### {source['title']}", "", f"*{provenance_line(source)}*", ""]
        for table in block["table"]:
            md += [f"Head: {table['head']} · {NOT_RERUN}", "", md_table(source_rows(table, source["columns"])), ""]
            md += [f"- {ab}: left out of the recomputed average: {why}" for ab, why in table["left_out"].items()]
        md += [""] + flag_lines(source) + [f"- {r['text']}" for r in source["remarks"]] + [""]
    return md


# -- HTML ----------------------------------------------------------------------------------------------------------
def head_html(report: dict[str, Any], base: Path | None = None) -> dict[str, list[str]]:
    from ava.report.markup import escape, table_html

    out: dict[str, list[str]] = {}
    for block in report.get("published") or []:
        source = block["source"]
        for cmp in block["comparisons"]:
            body = [
                f"<h4>Beside published results: {escape(source['title'])}</h4>",
                f'<p class="caption">{escape(_caption(cmp, source))}</p>',
            ]
            body += [f'<p class="warn"><b>Not comparable as such:</b> {escape(b)}</p>' for b in cmp["banners"]]
            if cmp["settings_differ"]:
                body.append(
                    f'<p class="warn"><b>Settings that differ:</b> {escape("; ".join(cmp["settings_differ"]))}</p>'
                )
            body += [f'<p class="note">{escape(NOTE.replace("`", ""))}</p>', table_html(comparison_rows(cmp, base))]
            notes = [f"{ab}: left out of the average rank: {why}" for ab, why in cmp["left_out"].items()]
            notes += flag_lines(source) + cmp["average_rank_notes"]
            body.append("<ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
            if any(r["kind"] == "published" and r["printed_average_rank"] is not None for r in cmp["rows"]):
                body.append(table_html(average_rows(cmp)))
            for d in cmp["diff"]:
                body += [
                    f"<p><b>Ours - published: {escape(d['vfm'])} vs {escape(d['published_name'])}</b> "
                    f"({d['inside']} of {d['judged']} inside our 95% interval)</p>",
                    table_html(diff_rows(d, cmp["units"])),
                ]
            out.setdefault(cmp["head_id"], []).extend(body)
        for a in block["apart"]:
            out.setdefault(a["head_id"], []).append(
                f'<p class="note"><b>{escape(source["title"])}:</b> {escape(a["reason"])}.</p>'
            )
    return out


def html(report: dict[str, Any]) -> list[str]:
    from ava.report.markup import escape, table_html

    blocks = report.get("published") or []
    if not blocks:
        return []
    body = ["<h2>Published results, as published</h2>"]
    for block in blocks:
        source = block["source"]
        body += [f"<h3>{escape(source['title'])}</h3>", f'<p class="caption">{escape(provenance_line(source))}</p>']
        for table in block["table"]:
            body += [
                f'<p class="note">Head: {escape(table["head"])} · {NOT_RERUN}</p>',
                table_html(source_rows(table, source["columns"])),
            ]
        notes = flag_lines(source) + [r["text"] for r in source["remarks"]]
        body.append("<ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    return body


# -- LaTeX ---------------------------------------------------------------------------------------------------------
def latex(report: dict[str, Any]) -> str:
    """One booktabs table per comparison (the ranking with the published rows) and per diff."""
    from ava.report.render import tex_escape, tex_table

    out: list[str] = []
    for source, cmp in _blocks(report):
        banner = " ".join(f"Not comparable as such: {b}." for b in cmp["banners"])
        out += tex_table(comparison_rows(cmp), tex_escape(f"{cmp['head']} beside {_caption(cmp, source)}. {banner}"))
        for d in cmp["diff"]:
            caption = tex_escape(f"Ours - published: {d['vfm']} vs {d['published_name']}. {banner}")
            out += tex_table(diff_rows(d, cmp["units"]), caption)
    return "\n".join(out)


# -- terminal ------------------------------------------------------------------------------------------------------
def transposed(rows: list[list[str]]) -> list[list[str]]:
    """A VFM-per-row table turned abilities-down (one column per VFM), as a terminal shows wide tables best."""
    return [list(col) for col in zip(*rows, strict=True)]


def show_table(console: Any, rows: list[list[str]], title: str, caption: str = "") -> None:
    """``rows`` (header first) as a rich table; cells are text, never markup."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(title), caption=Text(caption) if caption else None)
    for c in rows[0]:
        t.add_column(Text(c))
    for r in rows[1:]:
        t.add_row(*(Text(c) for c in r))
    console.print(t)


def print_published(report: dict[str, Any], console: Any) -> None:
    """The comparisons (abilities down) and diffs in the terminal (the source's own table is in report.md)."""
    for source, cmp in _blocks(report):
        for b in cmp["banners"]:
            console.print(f"not comparable as such: {b}", style="yellow", highlight=False, markup=False)
        if cmp["settings_differ"]:
            console.print("settings that differ: " + "; ".join(cmp["settings_differ"]), highlight=False, markup=False)
        rows = comparison_rows(cmp)
        labeled = [[f"{r[0]}\n{r[1]}" if i else r[0], *r[2:]] for i, r in enumerate(rows)]
        show_table(console, transposed(labeled), f"{cmp['head']} beside {source['title']}", _caption(cmp, source))
        for d in cmp["diff"]:
            show_table(
                console,
                diff_rows(d, cmp["units"]),
                f"ours - published: {d['vfm']} vs {d['published_name']}",
                f"{d['inside']} of {d['judged']} published values inside our 95% interval",
            )
    for block in report.get("published") or []:
        for a in block["apart"]:
            console.print(f"{a['head']}: {block['source']['title']}: {a['reason']}", highlight=False, markup=False)
