"""How findings and reports spell ranks, groups, shapes and frames (one spelling everywhere)."""

from __future__ import annotations

from traceformat.ranks import ranks_text

__all__ = ["frame_text", "group_text", "is_shapes", "ranks_text", "shape_text"]


def group_text(group: dict | None) -> str:
    """`dp (ranks 0-3)` for a finding's group dict; `-` for none."""
    if not group:
        return "-"
    return f"{group['label']} (ranks {ranks_text(group['ranks'])})"


def is_shapes(value) -> bool:
    """A list of shapes (lists of ints): what in_shapes / out_shapes atoms hold in a sound trace."""
    return isinstance(value, list) and all(isinstance(s, list) and all(type(d) is int for d in s) for s in value)


def shape_text(shapes) -> str:
    if shapes is None:
        return "-"
    if not is_shapes(shapes):
        return str(shapes)
    if len(shapes) == 1:
        return "(" + ", ".join(map(str, shapes[0])) + ")"
    return "[" + ", ".join("(" + ", ".join(map(str, s)) + ")" for s in shapes) + "]"


def frame_text(row: dict) -> str:
    """Where an event was issued: its user frame, and the module when known."""
    frame = row.get("frame") or "?"
    return f"{frame} [{row['module']}]" if row.get("module") else frame
