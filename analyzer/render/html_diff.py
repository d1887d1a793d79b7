"""The report's `--diff B.trace` section: analyzer.compare.diff's divergences and volume table as HTML,
A and B side by side (the same content as `analyzer diff`, which prints it for a terminal)."""

from __future__ import annotations

from analyzer.model.text import ranks_text
from analyzer.render.console import human_bytes
from analyzer.render.html_parts import Raw, esc, figure, section, table


def _event(ev: dict | None) -> str:
    if ev is None:
        return '<span class="dim">(end of stream)</span>'
    where = " · ".join(esc(x) for x in (ev.get("module") or "-", ev.get("phase"), f"step {ev.get('step')}"))
    return f"<code>{esc(ev['sig'])}</code><div class=dim>{where} · <code>{esc(ev.get('frame') or '-')}</code></div>"


def _runs(div) -> str:
    rows = []
    for run in div.runs:
        a = "<br>".join(f"<code>{esc(s)}</code>" for s in run.a_sigs) or '<span class="dim">—</span>'
        b = "<br>".join(f"<code>{esc(s)}</code>" for s in run.b_sigs) or '<span class="dim">—</span>'
        w = run.where
        rows.append(
            [
                Raw(f'<span class="run {esc(run.kind)}">{esc(run.kind)}</span>'),
                f"{run.a_start}..{run.a_stop}",
                f"{run.b_start}..{run.b_stop}",
                Raw(a),
                Raw(b),
                f"{w['module'] or '-'} · {w['phase']} · step {w['step']} · {w['frame'] or '-'}",
            ]
        )
    more = (
        f'<p class="more">… and {div.n_runs - len(div.runs)} more runs (see <code>analyzer diff --json</code>)</p>'
        if div.n_runs > len(div.runs)
        else ""
    )
    return table(["run", "A pos", "B pos", "in A", "in B", "where"], rows, cls="runs") + more


def diff_section(report, svg: str | None) -> str:
    d = report.diff
    a_name, b_name = esc(report.inputs.source), esc(report.inputs.other_source)
    parts = [
        f'<p class="lead"><b>A</b> <code>{a_name}</code> (world size {d.world_size_a}) against '
        f"<b>B</b> <code>{b_name}</code> (world size {d.world_size_b}).</p>"
    ]
    if d.equal:
        parts.append(
            '<p class="ok">✓ Same comm pattern on every rank (normalized: timestamps, group names and '
            "paths ignored).</p>"
        )
    elif not d.streams_compared:
        parts.append(
            '<p class="warn">World sizes differ: per-rank streams are not aligned; compare the volume table.</p>'
        )
    for side, ranks in (("A", d.only_a), ("B", d.only_b)):
        if ranks:
            parts.append(f'<p class="warn">Ranks {esc(ranks_text(ranks))} have a stream in {side} only.</p>')
    for i, div in enumerate(d.divergences, 1):
        context = "".join(f"<div><code>{esc(s)}</code></div>" for s in div.context) or '<span class="dim">—</span>'
        parts.append(
            f"<h3>Rank class {i}: ranks {esc(ranks_text(div.ranks))}</h3>"
            f"<p>First divergence at position A {div.position_a} / B {div.position_b} of the comparable streams "
            f"({div.length_a} → {div.length_b} events), {div.n_runs} run{'s' if div.n_runs != 1 else ''}.</p>"
            + table(
                ["just before (equal)", "A", "B"],
                [[Raw(context), Raw(_event(div.event_a)), Raw(_event(div.event_b))]],
                cls="sidebyside",
            )
            + _runs(div)
        )
    parts.append(figure(svg, "Bytes per mesh dim in A and B (all ranks).", "plot-diff"))
    rows = []
    for r in d.volume.iter_rows(named=True):
        changed = bool(r["calls_delta"] or r["bytes_delta"])
        delta = ("+" if r["bytes_delta"] > 0 else "") + human_bytes(r["bytes_delta"])
        mark = (lambda v: Raw(f'<b class="delta">{esc(v)}</b>')) if changed else (lambda v: v)
        rows.append(
            [
                r["dim"],
                r["op"],
                r["phase"],
                r["calls_a"],
                r["calls_b"],
                mark(f"{r['calls_delta']:+d}"),
                human_bytes(r["bytes_a"]),
                human_bytes(r["bytes_b"]),
                mark(delta),
            ]
        )
    parts.append(
        "<h3>Volume per mesh dim × op × phase (all ranks; Δ = B − A)</h3>"
        + table(
            ["mesh dim", "op", "phase", "calls A", "calls B", "Δ calls", "bytes A", "bytes B", "Δ bytes"],
            rows,
            numeric={3, 4, 5, 6, 7, 8},
        )
    )
    return section("diff", "Diff against B", "".join(parts))
