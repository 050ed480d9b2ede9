"""HTML pieces every renderer of the report shares: escaping, tables, inlined files (no renderer above them)."""

from __future__ import annotations

import base64
import html
import re
from typing import Any


def escape(x: Any) -> str:
    """``x`` as text safe inside an element or a quoted attribute."""
    return html.escape(str(x), quote=True)


def table_html(rows: list[list[str]], *, last_row_total: bool = False, cls: str = "sortable") -> str:
    """A sortable HTML table from header + rows (cells escaped); a total row stays at the bottom."""
    head = "".join(f"<th>{escape(c)}</th>" for c in rows[0])
    body = []
    for i, r in enumerate(rows[1:], 1):
        attr = ' class="last"' if last_row_total and i == len(rows) - 1 else ""
        body.append(f"<tr{attr}>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def data_uri(data: bytes, mime: str) -> str:
    """``data`` inlined as a ``data:`` URI (the report references no file and no network)."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def anchor(text: str, used: set[str]) -> str:
    """GitHub's anchor for a heading (lower case, punctuation dropped, spaces as hyphens), made unique among ``used``
    as GitHub does (``-1``, ``-2`` ...); added to ``used``."""
    base = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-") or "section"
    name, i = base, 0
    while name in used:
        i += 1
        name = f"{base}-{i}"
    used.add(name)
    return name


def with_contents(page: str, title: str = "Contents") -> str:
    """``page`` (the HTML body) with an ``id`` on every ``h2``/``h3`` that has none and, before the first ``h2``, a
    table of contents linking them (``h3`` nested under their ``h2``)."""
    used: set[str] = set(re.findall(r'\bid="([^"]+)"', page))
    entries: list[tuple[str, str, str]] = []

    def named(m: re.Match[str]) -> str:
        level, attrs, inner = m.group(1), m.group(2) or "", m.group(3)
        text = html.unescape(re.sub(r"<[^>]+>", "", inner))
        found = re.search(r'\bid="([^"]+)"', attrs)
        ident = found.group(1) if found else anchor(text, used)
        entries.append((level, ident, text))
        return f"<h{level}{attrs if found else f'{attrs} id={chr(34)}{ident}{chr(34)}'}>{inner}</h{level}>"

    page = re.sub(r"<h([23])((?:\s[^>]*)?)>(.*?)</h\1>", named, page, flags=re.S)
    if not entries:
        return page
    items, open_sub = [], False
    for level, ident, text in entries:
        link = f'<a href="#{escape(ident)}">{escape(text)}</a>'
        if level == "3" and items:  # an h3 before any h2 is listed as one
            items.append(("" if open_sub else "<ul>") + f"<li>{link}</li>")
            open_sub = True
            continue
        items.append(("</ul></li>" if open_sub else "</li>" if items else "") + f"<li>{link}")
        open_sub = False
    items.append("</ul></li>" if open_sub else "</li>")
    nav = f'<nav class="contents"><h2>{escape(title)}</h2><ul>{"".join(items)}</ul></nav>'
    first = page.find("<h2")
    return page if first < 0 else page[:first] + nav + "\n" + page[first:]
