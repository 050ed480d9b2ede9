"""report.html: the whole report in one self-contained file (no server, no network, no external reference).

Tables are sortable (a few lines of inline JavaScript: click a header), plots are inlined as PNG data URIs, and
per head and ability a gallery shows the test samples the VFMs got wrong, side by side: the image (with the
truth box, and each VFM's predicted box, for localization), the question, and per VFM its reply, the parsed
value, the score and the truth. The only URLs in the file are ``data:`` URIs and ``#`` anchors.

A sample counts as *wrong* for a VFM when its reply was unparsed or its score is on the wrong side of the
metric's threshold in :data:`WRONG` (accuracy: not correct; ANLS and GIoU below 0.5; MAE/GT above 0.25;
CIEDE2000 above 10 delta E, a clearly visible colour difference).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ava.report import render
from ava.report.markup import data_uri, escape, table_html, with_contents

WRONG: dict[str, Callable[[float], bool]] = {
    "accuracy": lambda s: s < 1.0,
    "anls": lambda s: s < 0.5,
    "giou": lambda s: s < 0.5,
    "mae_gt": lambda s: s > 0.25,
    "ciede2000": lambda s: s > 10.0,
}
WRONG_RULE = "unparsed, or accuracy not correct, ANLS or GIoU < 0.5, MAE/GT > 0.25, CIEDE2000 > 10"
GALLERY_PER_ABILITY = 6
THUMB = 224

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:1.5em auto;
max-width:1400px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}h3{margin-top:1.5em}
table{border-collapse:collapse;margin:.6em 0;font-size:.86em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f2f2f2;cursor:pointer;user-select:none;white-space:nowrap}
th.sorted-asc::after{content:" \\25B2"}th.sorted-desc::after{content:" \\25BC"}
tr:nth-child(even) td{background:#fafafa}tr.last td{font-weight:bold;background:#eef3f8}
.caption{font-style:italic;color:#555;font-size:.9em}.note{color:#555;font-size:.9em}
.refused{background:#fde8e8;border-left:4px solid #b00;padding:.5em 1em}
.warn{background:#fff6db;border-left:4px solid #c90;padding:.5em 1em}
img.plot{max-width:100%;border:1px solid #eee;margin:.5em 0}
.gallery{display:flex;flex-direction:column;gap:1em}
.sample{display:flex;gap:1em;border:1px solid #ddd;border-radius:6px;padding:.6em;background:#fcfcfc}
.sample img{width:224px;height:auto;image-rendering:auto;border:1px solid #ccc;flex:none}
.q{font-size:.85em;max-width:30em;white-space:pre-wrap;word-break:break-word}
.vfms{display:flex;flex-wrap:wrap;gap:.5em;align-items:flex-start}
.vfm{border:1px solid #ccc;border-radius:4px;padding:.4em;font-size:.82em;width:13em;word-break:break-word}
.vfm.wrong{border-color:#c33;background:#fff3f3}.vfm.right{border-color:#3a3;background:#f3fff3}
.swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.3em;vertical-align:middle}
code{font-size:.95em}details{margin:.4em 0}summary{cursor:pointer;font-weight:600}
nav.contents{background:#f7f7f7;border:1px solid #ddd;padding:.2em 1em .6em;font-size:.9em}
nav.contents h2{margin-top:.4em;border:0;font-size:1.1em}nav.contents ul{margin:.2em 0;padding-left:1.4em}
"""

_JS = """
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
    var body=t.tBodies[0], rows=Array.prototype.slice.call(body.rows);
    var last=rows.filter(function(r){return r.classList.contains('last')});
    rows=rows.filter(function(r){return !r.classList.contains('last')});
    var asc=!th.classList.contains('sorted-asc');
    t.querySelectorAll('th').forEach(function(h){h.classList.remove('sorted-asc','sorted-desc')});
    th.classList.add(asc?'sorted-asc':'sorted-desc');
    function key(r){var s=r.cells[i]?r.cells[i].textContent.trim():'';var m=s.match(/^[-+]?\\d*\\.?\\d+(e[-+]?\\d+)?/i);
      return m?[0,parseFloat(m[0])]:[1,s.toLowerCase()]}
    rows.sort(function(a,b){var x=key(a),y=key(b);if(x[0]!==y[0])return x[0]-y[0];
      return (x[1]<y[1]?-1:x[1]>y[1]?1:0)*(asc?1:-1)});
    rows.concat(last).forEach(function(r){body.appendChild(r)});
  })})
});
"""


def _plots(report: dict[str, Any], head: str, out: Path) -> list[str]:
    parts = []
    for kind, files in report["plots"].get(head, {}).items():
        png = next((f for f in files if f.endswith(".png")), None)
        if png and (out / png).is_file():
            uri = data_uri((out / png).read_bytes(), "image/png")
            parts.append(f'<img class="plot" alt="{escape(head)} {escape(kind)}" src="{uri}">')
    return parts


# -- gallery ---------------------------------------------------------------------------------------------------
def _thumbnail(dataset: Any, sample: Any, boxes: list[tuple[list[float], tuple | None]]) -> str | None:
    """The sample's image with ``boxes`` (normalized x1,y1,x2,y2 and an RGB colour, None for the truth) drawn, as
    a JPEG data URI."""
    from PIL import ImageDraw

    try:
        image = dataset.load_image(sample).convert("RGB")
    except Exception:  # noqa: BLE001 - a missing image leaves a gallery cell without a picture, not a failed report
        return None
    scale = THUMB / max(image.size)
    if scale < 1 or scale > 1.5:
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
    draw = ImageDraw.Draw(image)
    w, h = image.size
    for box, color in boxes:
        try:
            x1, y1, x2, y2 = (float(v) for v in box)
        except (TypeError, ValueError):
            continue
        rect = [x1 * w, y1 * h, x2 * w, y2 * h]
        if color is None:  # the truth: white inside black, unlike any VFM's colour
            draw.rectangle(rect, outline=(0, 0, 0), width=4)
            draw.rectangle(rect, outline=(255, 255, 255), width=2)
        else:
            draw.rectangle(rect, outline=color, width=2)
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=85)
    return data_uri(buf.getvalue(), "image/jpeg")


def _rgb(color: tuple) -> tuple[int, int, int]:
    return tuple(int(round(c * 255)) for c in color[:3])  # type: ignore[return-value]


def _is_wrong(metric: str, rec: dict[str, Any]) -> bool:
    rule = WRONG.get(metric)
    return not rec.get("ok", True) or (rule is not None and rule(float(rec["score"])))


def _fmt_json(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, list):
        return "[" + ", ".join(_fmt_json(v) for v in x) + "]"
    return "—" if x is None else str(x)


def _ability_gallery(table: Any, ab: str, by_vfm: dict[str, Any], dataset: Any, *, open_: bool = False) -> str:
    from ava.report.plots import vfm_color

    metric = table.metrics[ab]
    recs = {v: {str(r["id"]): r for r in by_vfm[v].records().get(ab, [])} for v in table.vfms if v in by_vfm}
    ids = sorted({i for rs in recs.values() for i in rs})
    wrong = {i: [v for v in recs if i in recs[v] and _is_wrong(metric, recs[v][i])] for i in ids}
    picked = sorted((i for i in ids if wrong[i]), key=lambda i: (-len(wrong[i]), i))[:GALLERY_PER_ABILITY]
    n_wrong = {v: sum(v in w for w in wrong.values()) for v in recs}
    summary = ", ".join(f"{v}: {n_wrong[v]} of {len(recs[v])} wrong" for v in recs)
    if not picked:
        return f"<details><summary>{escape(ab)}: no sample wrong ({escape(summary)})</summary></details>"
    samples = {s.id: s for s in dataset.samples(ab)} if dataset is not None else {}
    cards = []
    for sid in picked:
        sample = samples.get(sid)
        boxes = []
        if sample is not None and "box" in sample.truth:
            boxes.append((sample.truth["box"], None))
            for v in recs:
                parsed = recs[v].get(sid, {}).get("parsed")
                if isinstance(parsed, list) and len(parsed) == 4:
                    boxes.append((parsed, _rgb(vfm_color(v))))
        uri = _thumbnail(dataset, sample, boxes) if sample is not None else None
        img = f'<img alt="sample {escape(sid)}" src="{uri}">' if uri else "<div class='note'>(image not found)</div>"
        question = sample.question if sample is not None else ""
        truth = next((recs[v][sid].get("truth") for v in recs if sid in recs[v]), None)
        vcards = []
        for v in recs:
            r = recs[v].get(sid)
            if r is None:
                continue
            bad = _is_wrong(metric, r)
            sw = "#{:02x}{:02x}{:02x}".format(*_rgb(vfm_color(v)))
            state = "wrong" if bad else "right"
            vcards.append(
                f'<div class="vfm {state}"><span class="swatch" style="background:{sw}"></span>'
                f"<b>{escape(v)}</b> {'✗' if bad else '✓'}<br>reply: <code>{escape(r.get('prediction'))}</code><br>"
                f"parsed: <code>{escape(_fmt_json(r.get('parsed')))}</code><br>"
                f"{escape(metric)}: {escape(_fmt_json(float(r['score'])))}"
                f"{'' if r.get('ok', True) else ' (unparsed)'}</div>"
            )
        cards.append(
            f'<div class="sample">{img}<div><div class="q"><b>{escape(sid)}</b> · truth: '
            f"<code>{escape(_fmt_json(truth))}</code><br>{escape(question[:600])}</div>"
            f'<div class="vfms">{"".join(vcards)}</div></div></div>'
        )
    head = f"{escape(ab)} ({escape(metric)}): {len(picked)} shown; {escape(summary)}"
    return (
        f"<details{' open' if open_ else ''}><summary>{head}</summary>"
        f'<div class="gallery">{"".join(cards)}</div></details>'
    )


def _gallery(table: Any, runs: list[Any], datasets: dict[str, Any]) -> str:
    from ava.report.baselines import find_dataset, open_dataset

    by_vfm = {r.vfm: r for r in runs if (r.head_id or r.head) == table.id}
    if not by_vfm:
        return ""
    first = next(iter(by_vfm.values()))
    path = find_dataset(first.datasets, first.path)
    if str(path) not in datasets:
        datasets[str(path)] = open_dataset(path)
    dataset, reason = datasets[str(path)]
    parts = [
        f"<h3>Failures: {escape(table.head)}</h3>",
        f'<p class="note">Wrong means: {escape(WRONG_RULE)}. Up to {GALLERY_PER_ABILITY} samples per ability, '
        "those most VFMs got wrong first. Localization: white-on-black = truth box, coloured = each VFM's box."
        "</p>",
    ]
    if dataset is None:
        parts.append(f'<p class="warn">Images not shown: {escape(reason)}</p>')
    for i, ab in enumerate(table.abilities):  # the first ability open, the others a click away
        parts.append(_ability_gallery(table, ab, by_vfm, dataset, open_=i == 0))
    return "\n".join(parts)


# -- the page ----------------------------------------------------------------------------------------------------
def html_page(
    report: dict[str, Any],
    tables: dict[str, Any],
    runs: list[Any],
    out: Path,
    after_head: dict[str, list[str]] | None = None,
    after_tables: list[str] | None = None,
) -> str:
    """The report as one HTML document (see the module docstring). ``after_head``: HTML to add under a head's table,
    by head id; ``after_tables``: after the tables and analyses (the comparisons with published results)."""
    body = ["<h1>AVA-Bench report</h1>"]
    if lines := render.opening_lines(report):
        items = "".join(f"<li>{escape(line).replace('`', '')}</li>" for line in lines)
        body.append(f"<h2>{escape(render.OPENING_TITLE)}</h2><ul>{items}</ul>")
    if any(r["random_weights"] for r in report["runs"]):
        body.append(
            f'<p class="warn">A VFM or LLM marked <i>{render.RANDOM}</i> is a control with untrained '
            "weights, not a trained model.</p>"
        )
    if any(r["synthetic"] for r in report["runs"]):
        body.append('<p class="warn">Scored on <i>synthetic</i> data: only relative behaviour is meaningful.</p>')
    note = escape(render.TABLE_NOTE.replace("`", ""))
    body += [
        "<h2>Runs</h2>",
        table_html(render.runs_rows(report, out)),
        "<h2>Scores and ranks per head</h2>",
        f'<p class="note">{note} Click a column header to sort.</p>',
    ]
    for hid, t in report["heads"].items():
        body.append(f'<h3 id="head-{escape(hid)}">Head: {escape(t["head"])}</h3>')
        if t.get("refused"):
            body.append(f'<p class="refused"><b>Refused:</b> {escape(t["refused"])}</p>')
            body += (after_head or {}).get(hid, [])
            continue
        body += [
            f'<p class="caption">{escape(render.table_caption(t))}</p>',
            table_html(render.table_rows(t), last_row_total=True),
            f'<p class="note">{escape(render.average_over_line(t))}</p>',
        ]
        body += [f'<p class="warn">{escape(n)}</p>' for n in t["notes"]]
        body += _plots(report, hid, out)
        body += (after_head or {}).get(hid, [])
    body += ["<h2>Rank agreement between heads</h2>", f'<p class="note">{escape(render.AGREEMENT_NOTE)}</p>']
    if not report["agreement"]:
        body.append("<p>n/a: the report has a single head.</p>")
    for agr in report["agreement"]:
        body += [
            f"<h3>{escape(' vs '.join(agr['heads']))}</h3>",
            f'<p class="caption">{escape(render.agreement_caption(report, agr))}</p>',
            table_html(render.agreement_rows(agr), last_row_total=True),
        ]
    sub_tables, folded = render.fold_subgroups(report)
    if sub_tables or folded:
        body.append("<h2>Subgroups</h2>")
    for head, ab, name, group in sub_tables:
        t = report["heads"][head]
        body += [
            f"<h3>{escape(t['head'])} · {escape(ab)} by {escape(name)}</h3>",
            table_html(render.subgroup_rows(t, group)),
        ]
    if folded:
        body.append("<p>Single-bin subgroups:</p><ul>" + "".join(f"<li>{escape(x)}</li>" for x in folded) + "</ul>")
    body += _analyses(report, out)
    body += after_tables or []
    body.append("<h2>Failures, side by side</h2>")
    datasets: dict[str, Any] = {}
    for t in tables.values():
        if not t.refused:
            body.append(_gallery(t, runs, datasets))
    body += ["<h2>Notes</h2>", f'<p class="note">{escape(render.RADAR_NOTE)}</p>']
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>AVA-Bench report</title><style>{_CSS}</style></head><body>\n"
        + with_contents("\n".join(body))
        + f"\n<script>{_JS}</script>\n</body></html>\n"
    )


def _analyses(report: dict[str, Any], out: Path) -> list[str]:
    """The FOCI and paper analyses when the report has them (``ava.report.reference``, ``ava.report.alignment``)."""
    from ava.report import alignment, reference

    body = reference.html(report["relative"], report.get("relative_plots", {}), out) if report.get("relative") else []
    return body + (alignment.html(report["alignment"]) if report.get("alignment") else [])


def write_html(
    report: dict[str, Any],
    tables: dict[str, Any],
    runs: list[Any],
    out: Path,
    after_head: dict[str, list[str]] | None = None,
    after_tables: list[str] | None = None,
) -> Path:
    """Write ``out/report.html`` atomically and return its path."""
    from ava.data.format import atomic_write_text

    path = Path(out) / "report.html"
    atomic_write_text(path, html_page(report, tables, runs, Path(out), after_head, after_tables))
    return path
