"""`analyzer summary`: per rank class, per group and op; JSON for CI; no torch in the analyzer."""

import json
import os
import subprocess
import sys

from conftest import BIN, REPO

from analyzer.compare.summary import summarize
from analyzer.loader import load


def test_summary_groups_ranks_into_classes(recorded):
    path, _ = recorded("rank_branch", 4, "fake")
    s = summarize(load(path))
    classes = {tuple(r["ranks"]): r for r in s.classes.iter_rows(named=True)}
    assert set(classes) == {(0, 2, 3), (1,)}
    rows = {(r["ranks"], r["group"], r["op"]): (r["calls"], r["bytes"]) for r in s.table.iter_rows(named=True)}
    assert rows == {("0,2-3", "world", "all_reduce"): (2, 32), ("1", "world", "all_reduce"): (3, 48)}


def test_summary_fsdp_counts(recorded):
    path, _ = recorded("fsdp", 4, "fake")
    s = summarize(load(path))
    assert s.classes.height == 1
    rows = {(r["group"], r["op"]): (r["calls"], r["bytes"]) for r in s.table.iter_rows(named=True)}
    # 2 steps x 6 all-gathers (272 floats out) and 2 x 3 reduce-scatters (272 floats in), on the
    # default group that the 1-D dp_shard mesh reuses: named by its mesh dim, as `diff` names it
    assert rows == {
        ("dp_shard", "all_gather_into_tensor"): (12, 12 * 272 * 4),
        ("dp_shard", "reduce_scatter_tensor"): (6, 6 * 272 * 4),
    }


def test_summary_cli_table_and_json(recorded):
    path, _ = recorded("groups", 8, "fake")
    p = subprocess.run(
        [os.path.join(BIN, "analyzer"), "summary", path],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="160"),
    )
    assert p.returncode == 0, p.stderr
    assert "halves" in p.stdout and "tp" in p.stdout and "all_reduce" in p.stdout
    p = subprocess.run([os.path.join(BIN, "analyzer"), "summary", path, "--json"], capture_output=True, text=True)
    out = json.loads(p.stdout)
    assert out["trace"]["world_size"] == 8 and out["trace"]["ranks"] == list(range(8))
    groups = {(r["group"], r["op"]) for r in out["rows"]}
    # the flattened dp_tp mesh reuses the default group: it is named by that dim, as `diff` names it
    assert groups == {("halves", "all_reduce"), ("tp", "all_reduce"), ("dp_tp", "all_reduce")}


def test_summary_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "bad.trace"
    bad.write_bytes(b"not a trace at all")
    for target in (bad, tmp_path / "missing.trace", tmp_path):
        p = subprocess.run([os.path.join(BIN, "analyzer"), "summary", str(target)], capture_output=True, text=True)
        assert p.returncode == 2 and p.stderr.startswith("error: ") and len(p.stderr.strip().splitlines()) == 1


def test_analyzer_never_imports_torch():
    code = (
        "import sys, analyzer.cli, analyzer.loader, analyzer.compare.summary, analyzer.render.console, "
        "analyzer.render.json, traceformat.format; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
