"""The pieces the report's HTML is built of (analyzer.render.html, html_diff): escaping, tables,
sections and figures. Every piece of user text goes through `esc`."""

from __future__ import annotations

import html
from collections.abc import Set as AbstractSet

MAX_ROWS = 200
"""Rows per table; the count of the rest is said under it."""


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


class Raw(str):
    """A table cell that is already HTML."""


def table(
    headers: list[str],
    rows: list[list],
    numeric: AbstractSet[int] = frozenset(),
    cls: str = "",
    total: int | None = None,
) -> str:
    """An HTML table of the first MAX_ROWS rows (of `total`, default all given). Cells are
    escaped here, except Raw ones (already HTML); `numeric` columns align right."""
    total = len(rows) if total is None else total
    head = "".join(
        f'<th class="num">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>" for i, h in enumerate(headers)
    )
    body = []
    for row in rows[:MAX_ROWS]:
        cells = "".join(
            f"<td{' class=num' if i in numeric else ''}>{c if isinstance(c, Raw) else esc(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    more = (
        f'<p class="more">… and {total - MAX_ROWS} more rows (see <code>--json</code>)</p>' if total > MAX_ROWS else ""
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>{more}'


def section(anchor: str, title: str, body: str, lead: str = "") -> str:
    lead_html = f'<p class="lead">{lead}</p>' if lead else ""
    return f'<section id="{anchor}"><h2>{esc(title)}</h2>{lead_html}{body}</section>'


def figure(svg: str | None, caption: str, anchor: str) -> str:
    if not svg:
        return ""
    return f'<figure id="{anchor}">{svg}<figcaption>{caption}</figcaption></figure>'
