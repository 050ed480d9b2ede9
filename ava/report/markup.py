"""HTML pieces every renderer of the report shares: escaping, tables, inlined files (no renderer above them)."""

from __future__ import annotations

import base64
import html
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
