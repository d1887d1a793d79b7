"""The report's numerics section: what `analyzer numerics` found (computed by analyzer.numerics,
laid out here), present when the trace holds numerics."""

from __future__ import annotations

from analyzer.render.html_parts import Raw, esc, section, table


def numerics_section(report) -> str:
    checked = report.numerics
    if checked is None:
        return ""
    against = f" and matches {esc(report.inputs.ref_source)}" if report.inputs.ref_source else ""
    notes = "".join(f"<p class=lead>{esc(n)}</p>" for n in checked.notes)
    if not checked.findings:
        body = f'<p class="ok">✓ No findings: replicated values agree on every rank{against} within tolerance.</p>'
        return section("numerics", "Numerics", body + notes)
    rows = []
    for f in checked.findings:
        info = f.numerics or {}
        comms = ""
        for side, key in (("here", "comms"), ("reference", "reference_comms")):
            if key in info:
                text = esc("; ".join(info[key]) or "no collective")
                comms += f"<div><span class=r>{side}</span> <code>{text}</code></div>"
        rows.append(
            [
                Raw(f'<span class="kind">{esc(f.kind.name)}</span>'),
                f.module or "-",
                f"{f.step} {f.phase}",
                f"{info.get('rel_error', 0):.3g} > {info.get('tolerance', 0):.3g}",
                f.message,
                Raw(comms),
            ]
        )
    lead = "The first value that differs from the reference, then values that differ between replicas."
    return section(
        "numerics",
        "Numerics",
        table(["kind", "module / parameter", "step", "error vs tolerance", "what happened", "collectives around"], rows)
        + notes,
        lead,
    )
