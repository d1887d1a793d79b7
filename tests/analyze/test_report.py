"""analyzer report: one self-contained HTML page. Headless Chromium opens it and must see no
console error and the wait-for graph and plots drawn; the page's content, escaping, folding of
huge wait-for graphs and exit codes are checked without a browser."""

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import networkx as nx
import pytest
from conftest import BIN, REPO

from analyzer.loader import load
from analyzer.render import waitgraph
from analyzer.render.html import render
from analyzer.report import ReportInputs, build_report

sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "bench"))
from fr_synth import dump, groups  # noqa: E402
from headless_chromium import Chromium, find_chromium  # noqa: E402

GOLDEN = os.path.join(REPO, "traces", "hsdp_tp.trace")
FSDP = os.path.join(REPO, "traces", "fsdp.trace")
FIGURES = ("waitfor", "plot-volume", "plot-steps", "plot-diff")
needs_chromium = pytest.mark.skipif(
    find_chromium() is None, reason="chromium not installed (CI installs it in .ci/run: apt-get install chromium)"
)


def analyzer(*args, cwd=None):
    return subprocess.run([os.path.join(BIN, "analyzer"), *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def deadlock_page(recorded, tmp_path_factory):
    """The report of a recorded 4-rank mesh deadlock, diffed against a healthy 4-rank golden."""
    path, _ = recorded("deadlock_mesh", 4, "fake")
    out = tmp_path_factory.mktemp("report") / "deadlock.html"
    p = analyzer("report", path, "--diff", FSDP, "-o", str(out))
    assert p.returncode == 0, p.stderr  # a picture, not a check: exit 0 despite the deadlock
    assert p.stdout.startswith(f"wrote {out}: 1 finding, hang (4 ranks stuck)")
    return out


def no_network_no_script(page: str) -> None:
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.I)
    assert "url(http" not in page and "@import" not in page
    assert "Content-Security-Policy" in page


def test_deadlock_report_content(deadlock_page):
    page = deadlock_page.read_text()
    no_network_no_script(page)
    for anchor in FIGURES:
        assert f'<figure id="{anchor}"><svg' in page, anchor
    assert "deadlock_cycle" in page and "deadlock_mesh.py:12" in page  # finding with its frames
    assert "on a deadlock cycle" in page  # the graph's legend
    assert "Diff against B" in page and "Rank class 1: ranks 0-3" in page and "Δ calls" in page


def test_healthy_report_has_plots_and_no_graph(tmp_path):
    out = tmp_path / "r.html"
    p = analyzer("report", GOLDEN, "-o", str(out))
    assert p.returncode == 0 and "0 findings, no hang" in p.stdout, p.stderr
    page = out.read_text()
    no_network_no_script(page)
    assert "No findings" in page and "No hang" in page and 'id="waitfor"' not in page
    assert '<figure id="plot-volume"><svg' in page and '<figure id="plot-steps"><svg' in page
    for dim in ("fsdp", "dp_replicate", "tp"):  # the plots' text stays text (searchable)
        assert f">{dim} · " in page or f">{dim}<" in page, dim


def test_user_text_is_escaped():
    """Notes, paths and group descriptions are user text: escaped in the tables and in the plots'
    SVG, and a `$` is not mathtext to matplotlib."""
    import polars as pl

    t = load(FSDP)
    t.notes.append("<script>alert('note')</script>")
    t.groups = t.groups.with_columns(label=pl.lit("<i>dp</i> $x_1$ & co"))
    page = render(build_report(t, ReportInputs(source="<b>evil</b>.trace")))
    assert "<script" not in page and "&lt;script&gt;alert(&#x27;note&#x27;)&lt;/script&gt;" in page
    assert "<b>evil</b>" not in page and "&lt;b&gt;evil&lt;/b&gt;.trace" in page
    assert "<i>" not in page and "&lt;i&gt;dp&lt;/i&gt; $x_1$ &amp; co" in page


def test_stalled_rank_among_64_is_drawn_folded(recorded):
    """Rank 17 of an 8 x 8 mesh dies: 63 ranks wait on it; the picture keeps it and its nearest
    waiters and folds the rest, saying how many."""
    path, _ = recorded("stop_early", 64, "fake", args=("--stop", "17"))
    report = build_report(load(path), ReportInputs(source=path))
    assert report.hang.hung and any(f.kind.name == "stalled_rank" and f.culprit_ranks == [17] for f in report.findings)
    pic = waitgraph.draw(report.hang)
    assert pic.stalled_ranks == [17] and pic.cycle_ranks == []
    assert pic.drawn + pic.omitted == report.hang.graph.number_of_nodes() == 64
    assert pic.omitted > 0 and pic.drawn <= 1 + waitgraph.MAX_LAYERS * waitgraph.PER_LAYER
    folded = [int(n) for n in re.findall(r">\+(\d+)<", pic.svg)]  # the "+N waiting" nodes' labels
    assert folded and sum(folded) == pic.omitted


def test_thousands_of_waiters_are_capped():
    """A root cause with 5,000 transitive waiters: a bounded picture, every omitted rank counted."""
    g = nx.DiGraph()
    g.add_edges_from((w, 7) for w in range(100, 400))  # direct waiters of stalled rank 7
    g.add_edges_from((w, 100 + w % 300) for w in range(400, 5100))  # waiting on those
    g.add_edges_from([(1, 2), (2, 1), (3, 1)])  # and a separate 2-rank deadlock with a waiter
    stuck = {n: None for n in g.nodes if n != 7}
    pic = waitgraph.draw(SimpleNamespace(graph=g, stuck=stuck))
    assert pic.cycle_ranks == [1, 2] and pic.stalled_ranks == [7]
    assert pic.drawn <= waitgraph.MAX_ROOTS + waitgraph.MAX_LAYERS * waitgraph.PER_LAYER
    assert pic.drawn + pic.omitted == g.number_of_nodes()
    assert sum(int(n) for n in re.findall(r">\+(\d+)<", pic.svg)) == pic.omitted
    assert len(pic.svg) < 400_000


def test_flight_recorder_dump_folder(tmp_path):
    config, mine = groups(16)
    (tmp_path / "dumps").mkdir()
    for r in range(16):
        (tmp_path / "dumps" / f"rank_{r}").write_bytes(dump(r, 16, 40, config, mine[r]))
    p = analyzer("report", str(tmp_path / "dumps"), "-o", str(tmp_path / "fr.html"))
    assert p.returncode == 0 and "0 findings, no hang" in p.stdout, p.stderr
    assert "Flight Recorder dumps" in (tmp_path / "fr.html").read_text()


@pytest.mark.parametrize(
    "args,msg",
    [
        (["nope.trace", "-o", "r.html"], "no such file"),
        ([FSDP, "-o", "/nonexistent-dir/r.html"], "cannot write"),
        ([FSDP, "--diff", "missing.trace", "-o", "r.html"], "missing.trace: no such file"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, msg, tmp_path):
    p = analyzer("report", *args, cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and msg in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "r.html").exists()


def test_cli_start_imports_neither_matplotlib_nor_torch():
    code = "import sys, analyzer.cli; print(sorted(m for m in ('matplotlib', 'torch') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"


# --- in a real browser ------------------------------------------------------------------------

SIZES = """JSON.stringify(Object.fromEntries(%s.map(id => {
  const svg = document.querySelector('#' + id + ' > svg');
  if (!svg) return [id, null];
  const box = svg.getBoundingClientRect();
  return [id, {w: box.width, h: box.height, marks: svg.querySelectorAll('path, text, use').length}];
})))"""


def problems(browser: Chromium, path, figures=FIGURES) -> list[str]:
    """What is wrong with the page as Chromium renders it: console errors, exceptions, blocked
    loads, and required figures that are missing, empty or not laid out."""
    import json

    page = browser.open(str(path))
    out = list(page.errors)
    sizes = json.loads(page.evaluate(SIZES % json.dumps(list(figures))))
    for fig, size in sizes.items():
        if size is None:
            out.append(f"{fig}: no svg")
        elif size["w"] < 300 or size["h"] < 100 or size["marks"] < 10:
            out.append(f"{fig}: not drawn ({size})")
    return out


@pytest.fixture(scope="module")
def browser():
    with Chromium() as b:
        yield b


@needs_chromium
def test_report_renders_in_chromium(browser, deadlock_page):
    assert problems(browser, deadlock_page) == []
    page = browser.open(str(deadlock_page))
    labels = page.evaluate("[...document.querySelectorAll('#waitfor svg text')].map(t => t.textContent)")
    assert {"0", "1", "2", "3"} <= set(labels)  # one node per rank on the cycle
    assert page.evaluate("document.querySelectorAll('table').length") >= 3


@needs_chromium
def test_chromium_check_catches_a_broken_page(browser, deadlock_page, tmp_path):
    """The browser test above is only worth something if it fails on a broken page."""
    page = deadlock_page.read_text()
    cases = {
        # a script error (with the CSP removed, so the script runs and throws)
        "throws": re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace(
            "</main>", "<script>undefinedFunction()</script></main>"
        ),
        # a fetch from the network: blocked by the page's CSP, reported as an error
        "fetches": page.replace("</main>", '<img src="https://example.invalid/x.png"></main>'),
        "console": re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace(
            "</main>", "<script>console.error('bad')</script></main>"
        ),
        # the wait-for graph missing; a plot present but empty
        "no graph": re.sub(r'<figure id="waitfor">.*?</figure>', "", page, flags=re.S),
        "empty plot": re.sub(
            r'(<figure id="plot-steps">)<svg.*?</svg>', r'\1<svg width="400" height="200"></svg>', page, flags=re.S
        ),
    }
    for name, broken in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.html"
        path.write_text(broken)
        assert problems(browser, path), name
