"""Rich terminal output."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from analyzer.summary import Summary
from analyzer.trace import Trace


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def trace_header(console: Console, trace: Trace) -> None:
    h = trace.header
    program = (h.get("config") or {}).get("program", "?")
    console.print(
        f"[bold]{escape(str(program))}[/] · world size {h['world_size']} · mode {h.get('mode')} · "
        f"torch {h.get('torch') or '?'} · {len(trace.ranks)} rank streams · {trace.n_events} events"
    )
    for note in trace.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")


def summary(console: Console, trace: Trace, s: Summary) -> None:
    trace_header(console, trace)
    if s.table.is_empty():
        console.print("no collectives or p2p recorded")
        return
    for cls in s.classes.iter_rows(named=True):
        rows = s.table.filter(s.table["class"] == cls["class"])
        ranks = rows["ranks"][0] if rows.height else ",".join(map(str, cls["ranks"]))
        t = Table(
            title=f"rank class {cls['class']}: ranks {ranks} ({len(cls['ranks'])} ranks, {cls['events']} events each)",
            title_justify="left",
        )
        t.add_column("group")
        t.add_column("size", justify="right")
        t.add_column("op")
        t.add_column("calls", justify="right")
        t.add_column("bytes", justify="right")
        for r in rows.iter_rows(named=True):
            t.add_row(r["group"] or "-", str(r["size"] or ""), r["op"], str(r["calls"]), human_bytes(r["bytes"]))
        console.print(t)


def findings(console: Console, trace: Trace, found: list) -> None:
    from analyzer.findings import group_text, ranks_text

    trace_header(console, trace)
    if not found:
        console.print("[bold green]✓ no findings[/]: collectives, p2p and group creation match on every rank")
        return
    console.print(f"[bold red]✗ {len(found)} finding{'s' if len(found) != 1 else ''}[/]")
    t = Table(show_lines=True)
    t.add_column("kind", style="bold")
    t.add_column("group")
    t.add_column("seq", justify="right")
    t.add_column("culprits", style="red")
    t.add_column("what happened", ratio=1)
    for f in found:
        detail = [escape(f.message)]
        if f.expected is not None and f.kind not in ("missing_collective", "group_mismatch"):
            detail.append(
                f"[dim]majority:[/] {escape(str(f.expected))}"
                + (f"  [dim]at {escape(f.frames[-1])}[/]" if -1 in f.frames else "")
            )
        for r in f.culprit_ranks:
            if r in f.frames and f.frames[r] != "-":
                detail.append(f"[dim]rank {r}:[/] {escape(f.frames[r])}")
        t.add_row(
            f.kind,
            group_text(f.group),
            "-" if f.seq is None else str(f.seq),
            ranks_text(f.culprit_ranks),
            "\n".join(detail),
        )
    console.print(t)


def hang(console: Console, trace: Trace, report, frontier: list[dict]) -> None:
    from analyzer.findings import ranks_text

    trace_header(console, trace)
    if not report.hung and not report.findings:
        console.print(f"[bold green]✓ no hang[/] ({report.semantics}): every rank completes every recorded op")
        return
    if report.hung:
        console.print(
            f"[bold red]✗ hang[/] ({report.semantics}): {len(report.stuck)} rank"
            f"{'s' if len(report.stuck) != 1 else ''} stuck: {ranks_text(report.stuck)}"
        )
    else:
        console.print(
            f"[bold red]✗ {len(report.findings)} finding{'s' if len(report.findings) != 1 else ''}[/] "
            f"({report.semantics}): no rank stuck in the recorded ops, but the recording is incomplete"
        )
    t = Table(title="root causes", title_justify="left", show_lines=True)
    t.add_column("kind", style="bold")
    t.add_column("ranks", style="red")
    t.add_column("what happened", ratio=1)
    for f in report.findings:
        t.add_row(f.kind, ranks_text(f.culprit_ranks), escape(f.message))
    console.print(t)
    t = Table(title="stuck frontier", title_justify="left")
    t.add_column("blocked in")
    t.add_column("group")
    t.add_column("blocked ranks", style="yellow")
    t.add_column("waiting for", style="red")
    for row in frontier[:40]:
        t.add_row(row["what"], row["group"], ranks_text(row["blocked"]), ranks_text(row["missing"]))
    console.print(t)
    if len(frontier) > 40:
        console.print(f"... and {len(frontier) - 40} more stuck ops (see --json)")


def diff(console: Console, a: Trace, b: Trace, d, incomplete: dict | None = None) -> None:
    from analyzer.findings import ranks_text

    console.print(
        f"[bold]A[/] world size {d.world_size_a} · {a.n_events} events   "
        f"[bold]B[/] world size {d.world_size_b} · {b.n_events} events"
    )
    for side, found in (incomplete or {}).items():
        for f in found:
            console.print(f"[bold red]✗ {side.upper()}: {f.kind}[/] {escape(f.message)}")
    if d.equal:
        console.print(
            "[bold green]✓ same comm pattern[/] on every rank (normalized: timestamps, group names, paths ignored)"
        )
    elif not d.streams_compared:
        console.print("[yellow]world sizes differ:[/] per-rank streams not aligned; compare the volume table")
    for r in d.only_a or ():
        console.print(f"[red]rank {r}[/] has a stream in A only")
    for r in d.only_b or ():
        console.print(f"[red]rank {r}[/] has a stream in B only")
    for i, div in enumerate(d.divergences, 1):
        console.print(
            f"[bold red]✗ rank class {i}: ranks {ranks_text(div.ranks)}[/] · first divergence at "
            f"position A {div.position_a} / B {div.position_b} (event idx A {_dash(div.idx_a)} / "
            f"B {_dash(div.idx_b)}) · {div.n_runs} run{'s' if div.n_runs != 1 else ''} · "
            f"{div.length_a} → {div.length_b} events"
        )
        for sig in div.context:
            console.print(f"    [dim]  {escape(sig)}[/]")
        for side, ev in (("A", div.event_a), ("B", div.event_b)):
            if ev is None:
                console.print(f"  {side} [dim](end of stream)[/]")
            else:
                console.print(
                    f"  {side} {escape(ev['sig'])}  [dim]module {escape(ev['module'] or '-')} · "
                    f"{ev['phase']} · step {ev['step']} · {escape(ev['frame'] or '-')}[/]"
                )
        t = Table(show_lines=False)
        for col in ("run", "A pos", "B pos", "what", "where"):
            t.add_column(col)
        for run in div.runs:
            sigs = run.b_sigs if run.kind == "inserted" else run.a_sigs
            what = (
                "\n".join(sigs)
                if run.kind != "changed"
                else "\n".join([f"- {s}" for s in run.a_sigs] + [f"+ {s}" for s in run.b_sigs])
            )
            w = run.where
            t.add_row(
                run.kind,
                f"{run.a_start}..{run.a_stop}",
                f"{run.b_start}..{run.b_stop}",
                what,
                f"{w['module'] or '-'} · {w['phase']} · step {w['step']} · {w['frame'] or '-'}",
            )
        console.print(t)
        if div.n_runs > len(div.runs):
            console.print(f"... and {div.n_runs - len(div.runs)} more runs (see --json)")
    volume_table(console, d.volume)


def volume_table(console: Console, volume) -> None:
    t = Table(title="collectives per mesh dim × op × phase (all ranks; Δ = B − A)", title_justify="left")
    for col, right in (
        ("dim", False),
        ("op", False),
        ("phase", False),
        ("calls A", True),
        ("calls B", True),
        ("Δ calls", True),
        ("bytes A", True),
        ("bytes B", True),
        ("Δ bytes", True),
    ):
        t.add_column(col, justify="right" if right else "left")
    for r in volume.iter_rows(named=True):
        style = "red" if r["calls_delta"] or r["bytes_delta"] else None
        t.add_row(
            r["dim"],
            r["op"],
            r["phase"],
            str(r["calls_a"]),
            str(r["calls_b"]),
            f"{r['calls_delta']:+d}",
            human_bytes(r["bytes_a"]),
            human_bytes(r["bytes_b"]),
            ("+" if r["bytes_delta"] > 0 else "") + human_bytes(r["bytes_delta"]),
            style=style,
        )
    console.print(t)


def _dash(v) -> str:
    return "-" if v is None else str(v)
