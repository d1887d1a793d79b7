"""At 80 columns (and any width) the console never cuts what differs or where: every token of a
diff's signatures (shapes, reduce ops), its "where" and every word of a finding (frames, paths)
is printed whole; a table that would be cropped becomes an indented list instead."""

import io
import os
import pickle
import re
import subprocess
import sys

import pytest
from conftest import BIN, REPO
from rich.console import Console

from analyzer.checks import run_checks
from analyzer.compare.diff import diff_traces
from analyzer.compare.normalize import Options
from analyzer.loader import load
from analyzer.render import console as render

LLAMA_A = os.path.join(REPO, "traces", "llama3_debug_fsdp_tp.trace")
LLAMA_B = os.path.join(REPO, "traces", "torchtitan_llama3_fsdp_tp.trace")
BORDERS = re.compile(r"[│┃┏┓┗┛┡┩━─┼├┤└┘┌┐╇╈┳┻╋]")


def tokens(text: str) -> set[str]:
    """Whitespace-separated words of console output, table borders taken out."""
    return set(BORDERS.sub(" ", text).split())


def whole(word: str, out: set[str]) -> bool:
    """`word` is printed unbroken (as a word, or inside one: a frame in parentheses)."""
    return word in out or any(word in w for w in out)


def test_llama_diff_at_80_columns_prints_every_shape_and_reduce_op_whole():
    p = subprocess.run(
        [os.path.join(BIN, "analyzer"), "diff", LLAMA_A, LLAMA_B],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="80", NO_COLOR="1"),
    )
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and not any("…" in line for line in lines)
    out = tokens(p.stdout)
    d = diff_traces(load(LLAMA_A), load(LLAMA_B), Options())  # what the command compares
    runs = [run for div in d.divergences for run in div.runs]
    assert runs
    shapes, others = set(), set()
    for run in runs:
        for sig in run.a_sigs + run.b_sigs:
            words = sig.split()
            shapes |= {w for w in words if w.startswith(("in=", "out="))}
            others |= set(words)
        w = run.where  # the "where" of each run: its step and frame, never an empty cell
        assert f"step {w['step']}" in BORDERS.sub(" ", p.stdout), w
        for word in (w["frame"] or "-").split() + (w["module"] or "-").split():
            assert word in out, (word, w)
    reduce_ops = {"sum", "max", "premul_sum"} & others
    assert reduce_ops == {"sum", "max", "premul_sum"}  # the ops that differ here
    assert {"in=[[128,1]]", "out=[[128,1]]", "in=[[16,1]]", "out=[[16,1]]"} <= shapes
    missing = sorted(w for w in shapes | others if w not in out)
    assert not missing, missing


def _check_whole(c: Console, found: list) -> None:
    text = c.file.getvalue()
    lines = text.splitlines()
    assert max(map(len, lines)) <= c.width, max(lines, key=len)
    out = tokens(text)
    for f in found:
        words = f.message.split() + [w for r in f.culprit_ranks if r in f.frames for w in f.frames[r].split()]
        lost = [w for w in words if not whole(w, out)]
        assert not lost, (c.width, f.kind, lost)


@pytest.mark.parametrize("name", ["bug_p2p_wrong_peer", "raises"])
def test_the_largest_finding_messages_keep_every_word(recorded, name):
    t = load(recorded(name, 4)[0])
    found = run_checks(t).findings
    assert max(len(f.message) for f in found) > 200  # long enough to wrap at any width here
    for width in (80, 100, 120):
        c = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False)
        render.findings(c, t, found)
        _check_whole(c, found)


def _fr_dumps(folder) -> None:
    """16 ranks of FSDP x TP dumps (frames with long paths); rank 5 passed another shape."""
    sys.path.insert(0, os.path.join(REPO, "bench"))
    from fr_synth import dump, groups

    config, mine = groups(16)
    os.makedirs(folder, exist_ok=True)
    for r in range(16):
        d = pickle.loads(dump(r, 16, 40, config, mine[r]))
        if r == 5:
            d["entries"][1]["input_sizes"] = [[4, 256]]
            d["entries"][1]["output_sizes"] = [[4, 256]]
        with open(os.path.join(folder, f"rank_{r}"), "wb") as f:
            pickle.dump(d, f)


def test_flight_recorder_findings_are_not_cropped_at_100_columns(tmp_path):
    """Where the table's other columns leave the text less than its narrowest width, the list."""
    _fr_dumps(tmp_path / "dumps")
    t = load(tmp_path / "dumps")
    found = run_checks(t).findings
    assert found
    for width in (80, 100, 110, 140):
        c = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False)
        render.findings(c, t, found)
        _check_whole(c, found)
        table = [line for line in c.file.getvalue().splitlines() if line.startswith(("│", "┃"))]
        assert all(line.rstrip().endswith(("│", "┃")) for line in table)  # a table, when one, is whole
