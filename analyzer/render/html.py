"""One self-contained HTML page of a report (analyzer.report.Report): no scripts, no network.

Everything is inline: CSS in a <style>, plots and the wait-for graph as <svg> elements drawn by
matplotlib (analyzer.render.plots, analyzer.render.waitgraph). A Content-Security-Policy meta
tag forbids every fetch and every script, so the page cannot reach the network even by mistake
and opens the same from a mail attachment or a CI artifact. Every piece of user text (frames,
module names, group descriptions, error lines) goes through `esc`.
"""

from __future__ import annotations

import os

from analyzer.model.text import group_text, ranks_text
from analyzer.render import plots, waitgraph
from analyzer.render.console import human_bytes
from analyzer.render.html_diff import diff_section
from analyzer.render.html_numerics import numerics_section
from analyzer.render.html_parts import MAX_ROWS, Raw, esc, figure, section, table
from analyzer.render.html_style import CSS

MAX_FRAMES = 8
"""User frames listed per finding."""
MAX_MESSAGE = 1500
"""Characters of a finding's message shown."""
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def ranks_brief(ranks, limit: int = 90) -> str:
    """ranks_text, cut at about `limit` characters with the count (a thousand stuck ranks of a
    strided dp group are a long list)."""
    text = ranks_text(ranks)
    if len(text) <= limit:
        return text
    return text[: text.rfind(",", 0, limit)] + f", … ({len(list(ranks))} ranks)"


def event_count(report) -> int:
    """Events in the trace, from the summary's rank classes (no pass over the events)."""
    return sum(len(c["ranks"]) * c["events"] for c in report.summary.classes.iter_rows(named=True))


def header(report) -> str:
    t = report.trace
    h = t.header
    program = (h.get("config") or {}).get("program") or os.path.basename(report.inputs.source)
    facts = [
        f"world size {h['world_size']}",
        f"mode {h.get('mode')}",
        f"torch {h.get('torch') or '?'}",
        f"{len(t.ranks)} rank streams",
        f"{event_count(report):,} events",
        f"{t.groups.height} process groups",
    ]
    notes = "".join(f"<li>{esc(n)}</li>" for n in [*t.notes, *report.notes])
    return (
        f'<header><h1>commtrace report <span class="prog">{esc(program)}</span></h1>'
        f'<p class="facts"><code>{esc(report.inputs.source)}</code> · {" · ".join(esc(f) for f in facts)}</p>'
        + (f'<ul class="notes">{notes}</ul>' if notes else "")
        + "</header>"
    )


def cards(report) -> str:
    """The verdicts at a glance: findings, hang, diff."""
    n = len(report.findings)
    out = [
        _card(
            "bad" if n else "good",
            f"{n} finding{'s' if n != 1 else ''}" if n else "no findings",
            "mismatched, skipped or unmatched collectives and p2p, deadlock cycles",
            "#findings",
        )
    ]
    hang = report.hang
    if hang is not None and hang.hung:
        out.append(
            _card(
                "bad",
                f"hang: {len(hang.stuck)} rank{'s' if len(hang.stuck) != 1 else ''} stuck",
                f"{hang.semantics}; ranks {ranks_brief(hang.stuck, 60)}",
                "#hang",
            )
        )
    else:
        out.append(_card("good", "no hang", "every rank completes every recorded op", "#hang"))
    d = report.diff
    if d is not None:
        if d.equal:
            out.append(_card("good", "same comm pattern", f"as {report.inputs.other_source}", "#diff"))
        else:
            what = (
                f"{len(d.divergences)} rank class{'es diverge' if len(d.divergences) != 1 else ' diverges'}"
                if d.streams_compared
                else "world sizes differ"
            )
            out.append(_card("bad", "comm pattern differs", f"{what} from {report.inputs.other_source}", "#diff"))
    total = int(report.volume["bytes"].sum()) if report.volume.height else 0
    calls = int(report.volume["calls"].sum()) if report.volume.height else 0
    out.append(_card("info", human_bytes(total), f"in {calls:,} collective and p2p calls, all ranks", "#volume"))
    return f'<div class="cards">{"".join(out)}</div>'


def _card(kind: str, title: str, sub: str, href: str) -> str:
    return f'<a class="card {kind}" href="{href}"><b>{esc(title)}</b><span>{esc(sub)}</span></a>'


def findings_section(report) -> str:
    if not report.findings:
        return section(
            "findings",
            "Findings",
            '<p class="ok">✓ No findings: collectives, p2p and group creation match on every rank.</p>',
        )
    rows = []
    for f in report.findings:
        # a cycle through a thousand ranks has a thousand frames and a very long message: cut both
        ranked = [(r, fr) for r, fr in sorted(f.frames.items()) if r >= 0 and fr and fr != "-"]
        frames = "".join(
            f"<div><span class=r>rank {esc(r)}</span> <code>{esc(fr)}</code></div>" for r, fr in ranked[:MAX_FRAMES]
        )
        if len(ranked) > MAX_FRAMES:
            frames += f'<div class="more">… and {len(ranked) - MAX_FRAMES} more ranks</div>'
        if -1 in f.frames:
            frames = f"<div><span class=r>majority</span> <code>{esc(f.frames[-1])}</code></div>" + frames
        message = f.message if len(f.message) <= MAX_MESSAGE else f.message[:MAX_MESSAGE] + " … (see --json)"
        rows.append(
            [
                Raw(f'<span class="kind">{esc(f.kind.name)}</span>'),
                ranks_brief(f.culprit_ranks),
                group_text(f.group),
                "-" if f.seq is None else f.seq,
                message,
                Raw(frames),
            ]
        )
    counts: dict[str, int] = {}
    for f in report.findings:
        counts[f.kind.name] = counts.get(f.kind.name, 0) + 1
    lead = " · ".join(f"{esc(k)} × {v}" for k, v in counts.items())
    return section(
        "findings",
        "Findings",
        table(["kind", "culprit ranks", "group", "seq", "what happened", "where (user frames)"], rows, cls="findings"),
        lead,
    )


def advice_section(report) -> str:
    """`analyzer lint`'s advice: the job runs, a change would make it faster."""
    if not report.advice:
        return section("advice", "Advice", '<p class="ok">✓ No advice (analyzer lint).</p>')
    rows = [
        [
            Raw(f'<span class="kind">{esc(f.kind.name)}</span>'),
            ranks_brief(f.ranks),
            group_text(f.group),
            "-" if f.seconds_per_step is None else f"{f.seconds_per_step * 1e3:.3g} ms",
            f.message if len(f.message) <= MAX_MESSAGE else f.message[:MAX_MESSAGE] + " … (see analyzer lint --json)",
            Raw(f"<code>{esc(f.module or '-')}</code><div><code>{esc(f.frame or '')}</code></div>"),
        ]
        for f in report.advice
    ]
    return section(
        "advice",
        "Advice",
        table(["kind", "ranks", "group", "per step", "what to change", "module, frame"], rows, cls="findings"),
        "The job runs correctly; these would make it faster (analyzer lint, docs/analysis.md#comm-lint).",
    )


def hang_section(report, picture) -> str:
    hang = report.hang
    if hang is None or not hang.hung:
        return section(
            "hang",
            "Hang and deadlock analysis",
            '<p class="ok">✓ No hang: under blocking semantics every rank completes every recorded '
            "collective and p2p op, so there is no wait-for graph to draw.</p>",
        )
    parts = []
    if picture is not None:
        left_out = (
            f" {picture.omitted} more waiting ranks are folded into the “+N waiting” nodes "
            f"({picture.drawn} ranks drawn)."
            if picture.omitted
            else ""
        )
        parts.append(
            figure(
                picture.svg,
                "Wait-for graph: an arrow <b>r → m</b> means rank r waits for rank m. "
                f"{esc(hang.semantics.capitalize())} semantics.{left_out}",
                "waitfor",
            )
        )
    shown = report.frontier[:MAX_ROWS]
    rows = [[r["what"], r["group"], ranks_brief(r["blocked"]), ranks_brief(r["missing"])] for r in shown]
    parts.append(
        "<h3>Stuck frontier</h3>"
        + table(["blocked in", "group", "blocked ranks", "waiting for"], rows, total=len(report.frontier))
    )
    lead = (
        f"{len(hang.stuck)} rank{'s' if len(hang.stuck) != 1 else ''} stuck ({esc(hang.semantics)}): "
        f'{esc(ranks_brief(hang.stuck))}. Root causes are listed under <a href="#findings">Findings</a>.'
    )
    return section("hang", "Hang and deadlock analysis", "".join(parts), lead)


def volume_section(report, volume_svg: str | None, steps_svg: str | None, time_svg: str | None = None) -> str:
    if not volume_svg:
        return section("volume", "Communication volume", "<p>No collectives or p2p recorded.</p>")
    rows = [
        [r["dim"], r["op"], r["phase"], r["calls"], human_bytes(r["bytes"])]
        for r in report.volume.sort("bytes", descending=True).iter_rows(named=True)
    ]
    body = (
        figure(volume_svg, "Bytes per mesh dim × op, split by phase (all ranks).", "plot-volume")
        + (figure(time_svg, _time_caption(report), "plot-time") if time_svg else "")
        + figure(steps_svg, "Bytes per training step, split by mesh dim (all ranks).", "plot-steps")
        + "<details><summary>Table: calls and bytes per mesh dim × op × phase</summary>"
        + table(["mesh dim", "op", "phase", "calls", "bytes"], rows, numeric={3, 4})
        + "</details>"
    )
    return section("volume", "Communication volume", body)


def _time_caption(report) -> str:
    c = report.cost
    w = c.worst
    return (
        f"Time per step on {c.cluster.name} (analyzer cost), rank class {w['class']} (ranks {w['ranks_text']}): "
        f"{w['serial'] * 1e3:.3g} ms if nothing overlapped, {w['exposed'] * 1e3:.3g} ms exposed; averaged over "
        f"{c.steps} step(s). A model calibrated to published nccl-tests figures (docs/cost-model.md), "
        "not a measurement."
    )


def summary_section(report) -> str:
    s = report.summary
    out = []
    for cls in s.classes.head(20).iter_rows(named=True):
        rows = s.table.filter(s.table["class"] == cls["class"])
        ranks = rows["ranks"][0] if rows.height else ranks_text(cls["ranks"])
        body = [
            [r["group"] or "-", r["size"], r["op"], r["calls"], human_bytes(r["bytes"])]
            for r in rows.iter_rows(named=True)
        ]
        out.append(
            f"<h3>Rank class {cls['class']}: ranks {esc(ranks)} <small>({len(cls['ranks'])} ranks, "
            f"{cls['events']} events each)</small></h3>"
            + table(["group", "size", "op", "calls", "bytes (per rank)"], body, numeric={1, 3, 4})
        )
    if s.classes.height > 20:
        out.append(
            f'<p class="more">… and {s.classes.height - 20} more rank classes (see '
            "<code>analyzer summary --json</code>)</p>"
        )
    groups = [
        [g["gid"], g["label"], g["size"], ranks_text(g["ranks"]), g["name"]]
        for g in report.trace.groups.iter_rows(named=True)
    ]
    out.append(
        "<details><summary>Process groups</summary>"
        + table(["gid", "label", "size", "ranks", "torch name"], groups, numeric={0, 2})
        + "</details>"
    )
    return section(
        "summary",
        "Summary per rank class",
        "".join(out),
        "Ranks that communicated identically (same groups, ops, calls and bytes) form one class.",
    )


def render(report) -> str:
    """The whole page as one string."""
    picture = None
    if report.hang is not None and report.hang.hung:
        picture = waitgraph.draw(report.hang, lambda rank: report.hang.node_notes.get(rank, ""))
    body = [
        header(report),
        _nav(report),
        cards(report),
        findings_section(report),
        advice_section(report),
        numerics_section(report),
        hang_section(report, picture),
        volume_section(
            report,
            plots.volume_by_dim_op_phase(report.volume),
            plots.volume_by_step(report.per_step),
            plots.time_by_dim_op_phase(report.cost),
        ),
    ]
    if report.diff is not None:
        body.append(diff_section(report, plots.diff_volume_by_dim(report.diff.volume)))
    body.append(summary_section(report))
    body.append(
        "<footer>Written by <code>analyzer report</code> (commtrace). Self-contained: no scripts, no network.</footer>"
    )
    title = f"commtrace report: {os.path.basename(report.inputs.source)}"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>"
        + "\n".join(body)
        + "</main></body></html>\n"
    )


def _nav(report) -> str:
    links = [("findings", "Findings")]
    if report.numerics is not None:
        links.append(("numerics", "Numerics"))
    links += [("advice", "Advice"), ("hang", "Hang"), ("volume", "Volume")]
    if report.diff is not None:
        links.append(("diff", "Diff"))
    links.append(("summary", "Summary"))
    return "<nav>" + "".join(f'<a href="#{a}">{t}</a>' for a, t in links) + "</nav>"
