"""Console output at 80 columns (a pipe, a CI log): op, group and phase names and byte sizes are
never cut or wrapped; long findings fold into a compact list, not a 15-line-high table cell."""

import io
import os
import re

from conftest import REPO
from rich.console import Console

from analyzer.checks import run_checks
from analyzer.compare.diff import diff_traces
from analyzer.compare.summary import summarize
from analyzer.loader import load
from analyzer.render import console as render

PP = os.path.join(REPO, "traces", "fsdp_tp_pp_1f1b.trace")
HSDP = os.path.join(REPO, "traces", "hsdp_tp.trace")


def narrow() -> Console:
    return Console(width=80, file=io.StringIO(), color_system=None, force_terminal=False)


def text(c: Console) -> list[str]:
    return c.file.getvalue().splitlines()


def _whole_on_a_line(lines: list[str], words) -> None:
    for w in words:
        assert any(re.search(rf"(^|[\s│┃(]){re.escape(w)}($|[\s│┃)])", line) for line in lines), w


def test_summary_and_volume_keep_names_and_sizes_whole():
    a, b = load(PP), load(HSDP)
    c = narrow()
    render.summary(c, a, summarize(a))
    render.diff(c, a, b, diff_traces(a, b))
    lines = text(c)
    assert max(map(len, lines)) <= 80 and not any("…" in line for line in lines)
    s = summarize(a).table
    _whole_on_a_line(lines, set(s["op"]) | {g for g in s["group"] if g})
    _whole_on_a_line(lines, {render.human_bytes(n) for n in s["bytes"]})
    volume = diff_traces(a, b).volume
    _whole_on_a_line(lines, set(volume["op"]) | set(volume["phase"]) | set(volume["dim"]))
    _whole_on_a_line(lines, {render.human_bytes(n) for n in volume["bytes_a"]})
    _whole_on_a_line(lines, {render.human_bytes(n) for n in volume["bytes_b"]})


def test_long_findings_fold_into_a_compact_list(recorded):
    t = load(recorded("raises", 4)[0])
    found = run_checks(t).findings
    c = narrow()
    render.findings(c, t, found)
    lines = text(c)
    assert max(map(len, lines)) <= 80 and not any("…" in line for line in lines)
    assert "missing_collective · world (ranks 0-3) · seq 1 · culprits 2" in lines
    assert "failed_rank · - · seq - · culprits 2" in lines
    start = lines.index("missing_collective · world (ranks 0-3) · seq 1 · culprits 2")
    end = lines.index("failed_rank · - · seq - · culprits 2")
    assert end - start <= 10  # the text at full width: a few lines, not one word per line
    wide = Console(width=160, file=io.StringIO(), color_system=None, force_terminal=False)
    render.findings(wide, t, found)
    assert any(line.startswith("┏") for line in text(wide))  # wide enough: the table


def test_hang_root_causes_at_80_columns(recorded):
    from analyzer.hang import analyze, frontier_rows

    t = load(recorded("raises", 4)[0])
    report = analyze(t)
    c = narrow()
    render.hang(c, t, report, frontier_rows(t, report))
    lines = text(c)
    assert max(map(len, lines)) <= 80 and not any("…" in line for line in lines)
    top = lines.index(next(line for line in lines if line.startswith("root causes")))
    bottom = lines.index(next(line for line in lines if line.startswith("stuck frontier")))
    assert any("stalled_rank" in line for line in lines[top:bottom]) and bottom - top <= 14
    _whole_on_a_line(lines, ["all_reduce", "world"])
