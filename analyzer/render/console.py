"""Rich terminal output, readable at 80 columns (a pipe, a CI log): names (op, group, mesh dim,
phase) and byte sizes are never cut or wrapped inside (their columns are as wide as their
longest word); findings whose text would get a narrow column are printed as a compact list
instead of a table. `--json` is the machine interface."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from analyzer.compare.summary import Summary
from analyzer.model.text import group_text, ranks_text
from analyzer.model.trace import Trace

WIDE_TEXT = 48
"""A finding's text gets at least this many columns in a table, else the compact list is used."""


def _whole(values) -> int:
    """Width that shows every word of every value unbroken."""
    return max((len(w) for v in values for w in str(v).split()), default=1)


def _longest_line(values) -> int:
    """Width that shows every line of every value unbroken."""
    return max((len(line) for v in values for line in str(v).split("\n")), default=1)


def _column(t: Table, header: str, values, *, right: bool = False, wrap: bool = True, **kw) -> None:
    """A column whose words are never cut: at least as wide as its longest word (and never
    wrapped at all with wrap=False, for names, sizes and signatures: then as wide as its longest
    line, so that a table too wide for the console is seen not to fit instead of being cropped)."""
    t.add_column(
        header,
        justify="right" if right else "left",
        no_wrap=not wrap,
        min_width=max(_whole(values) if wrap else _longest_line(values), *(len(w) for w in header.split())),
        **kw,
    )


def _fits(console: Console, t: Table) -> bool:
    """Whether the table's narrowest layout (unclamped) fits the console."""
    return Measurement.get(console, console.options.update_width(1 << 16), t).minimum <= console.width


def _text_table(
    console: Console,
    t: Table,
    columns: Sequence[tuple[str, dict]],
    rows: Sequence[tuple[str, ...]],
    compact: Callable[[tuple[str, ...]], None],
    compact_title: str = "",
) -> None:
    """`rows` as table `t`: a column per (header, _column options), then the last cell of each
    row as "what happened" in the width left. When even its narrowest layout does not fit the
    console, each row is printed as `compact(row)` (a heading line, then the text at full
    width) and a blank line, after `compact_title` if one is given."""
    for i, (header, options) in enumerate(columns):
        _column(t, header, [r[i] for r in rows], **options)
    texts = [Text.from_markup(r[-1]).plain for r in rows]
    narrowest = max(WIDE_TEXT, _whole(texts))  # a frame path is never folded inside the table
    t.add_column("what happened", ratio=1, min_width=narrowest)
    for r in rows:
        t.add_row(*r)
    # rich lays the other columns out at their full width and gives the ratio column what is
    # left: the table fits when that leaves the text its narrowest width (not when every column
    # is at its minimum; a table wider than the console is cropped, not wrapped)
    widest = max(narrowest, _longest_line([*texts, "what happened"]))
    if Measurement.get(console, console.options.update_width(1 << 16), t).maximum - widest + narrowest <= console.width:
        console.print(t)
        return
    if compact_title:
        console.print(compact_title)
    for r in rows:
        compact(r)
        console.print()


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def trace_header(console: Console, trace: Trace, notes: Sequence[str] = ()) -> None:
    """What the trace says it is: a field the source does not know (a Flight Recorder dump names
    no program and no torch version) is left out, not printed as `?`."""
    h = trace.header
    given = h.get("config")
    config: dict = given if isinstance(given, dict) else {}
    fields = [f"[bold]{escape(str(config['program']))}[/]"] if config.get("program") else []
    fields.append(f"world size {h['world_size']}")
    if h.get("mode"):
        fields.append(f"mode {escape(str(h['mode']))}")
    versions = config.get("fr_version")
    known = [str(v) for v in versions if str(v) not in ("", "?")] if isinstance(versions, list) else []
    if known:
        fields.append(f"FR version {escape(', '.join(known))}")
    if h.get("torch"):
        fields.append(f"torch {escape(str(h['torch']))}")
    fields += [f"{len(trace.ranks)} rank streams", f"{trace.n_events} events"]
    console.print(" · ".join(fields))
    for note in [*trace.notes, *notes]:
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
        cells = [
            (r["group"] or "-", str(r["size"] or ""), r["op"], str(r["calls"]), human_bytes(r["bytes"]))
            for r in rows.iter_rows(named=True)
        ]
        for i, (header, right) in enumerate(
            (("group", False), ("size", True), ("op", False), ("calls", True), ("bytes", True))
        ):
            _column(t, header, [c[i] for c in cells], right=right, wrap=False)
        for c in cells:
            t.add_row(*c)
        console.print(t)


def findings(console: Console, trace: Trace, found: list, notes: Sequence[str] = ()) -> None:
    trace_header(console, trace, notes)
    if not found:
        console.print("[bold green]✓ no findings[/]: collectives, p2p and group creation match on every rank")
        return
    console.print(f"[bold red]✗ {len(found)} finding{'s' if len(found) != 1 else ''}[/]")
    rows = [
        (
            f.kind.name,
            group_text(f.group),
            "-" if f.seq is None else str(f.seq),
            ranks_text(f.culprit_ranks),
            _detail(f),
        )
        for f in found
    ]

    def compact(row: tuple[str, ...]) -> None:
        kind, group, seq, culprits, detail = row
        console.print(f"[bold]{kind}[/] · {escape(group)} · seq {seq} · culprits [red]{escape(culprits)}[/]")
        for line in detail.split("\n"):
            console.print(line, style=None)

    columns: tuple[tuple[str, dict], ...] = (
        ("kind", {"wrap": False, "style": "bold"}),
        ("group", {}),
        ("seq", {"right": True, "wrap": False}),
        ("culprits", {"style": "red"}),
    )
    _text_table(console, Table(show_lines=True), columns, rows, compact)


def advice(console: Console, trace: Trace, found: list, notes: Sequence[str] = (), cluster: str | None = None) -> None:
    """`analyzer lint`: each advice with its ranks, module, frame and (on a cluster) its time."""
    trace_header(console, trace, notes)
    if not found:
        console.print("[bold green]✓ no advice[/]" + (f" on {escape(cluster)}" if cluster else ""))
        return
    console.print(f"[bold yellow]{len(found)} advice[/]" + (f" on {escape(cluster)}" if cluster else ""))
    for f in found:
        head = [f"[bold]{f.kind.name}[/]", escape(group_text(f.group)), f"ranks {escape(ranks_text(f.ranks))}"]
        if f.seconds_per_step is not None:
            head.append(f"~{f.seconds_per_step * 1e3:.3g} ms/step")
        console.print(" · ".join(head))
        console.print(Padding(escape(f.message), (0, 0, 0, 2)))
        if f.module or f.frame:
            where = " · ".join(x for x in (f"module {f.module}" if f.module else "", f.frame or "") if x)
            console.print(Padding(f"[dim]{escape(where)}[/]", (0, 0, 0, 2)))


def numerics(console: Console, trace: Trace, found: list, notes: Sequence[str] = (), ref: str | None = None) -> None:
    trace_header(console, trace, notes)
    against = f" and match {escape(ref)}" if ref else ""
    if not found:
        console.print(f"[bold green]✓ no findings[/]: replicated values agree on every rank{against} within tolerance")
        return
    console.print(f"[bold red]✗ {len(found)} finding{'s' if len(found) != 1 else ''}[/]")
    for f in found:
        console.print(
            f"[bold]{f.kind.name}[/] · {escape(str(f.module))} · step {f.step} {f.phase} · "
            f"ranks [red]{escape(ranks_text(f.culprit_ranks))}[/]"
        )
        console.print("  " + escape(f.message), style=None)
        info = f.numerics or {}
        for side, key in (("here", "comms"), ("reference", "reference_comms")):
            if key in info:
                console.print(f"  [dim]{side}:[/] " + (escape("; ".join(info[key])) or "no collective"))


def _detail(f) -> str:
    """A finding's message, what the majority did and the culprits' frames (rich markup)."""
    detail = [escape(f.message)]
    if f.expected is not None and f.kind.majority:  # the kind says whether `expected` is a majority
        detail.append(
            f"[dim]majority:[/] {escape(str(f.expected))}"
            + (f"  [dim]at {escape(f.frames[-1])}[/]" if -1 in f.frames else "")
        )
    for r in f.culprit_ranks:
        if r in f.frames and f.frames[r] != "-":
            detail.append(f"[dim]rank {r}:[/] {escape(f.frames[r])}")
    return "\n".join(detail)


def hang(console: Console, trace: Trace, report, frontier: list[dict]) -> None:
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
    rows = [(f.kind.name, ranks_text(f.culprit_ranks), escape(f.message)) for f in report.findings]

    def compact(row: tuple[str, ...]) -> None:
        kind, ranks, message = row
        console.print(f"[bold]{kind}[/] · ranks [red]{escape(ranks)}[/]")
        console.print(message)

    columns = (("kind", {"wrap": False, "style": "bold"}), ("ranks", {"style": "red"}))
    t = Table(title="root causes", title_justify="left", show_lines=True)
    _text_table(console, t, columns, rows, compact, compact_title="[bold]root causes[/]")
    cells = [
        (row["what"], row["group"], ranks_text(row["blocked"]), ranks_text(row["missing"])) for row in frontier[:40]
    ]
    t = Table(title="stuck frontier", title_justify="left")
    _column(t, "blocked in", [c[0] for c in cells])
    _column(t, "group", [c[1] for c in cells])
    _column(t, "blocked ranks", [c[2] for c in cells], style="yellow")
    _column(t, "waiting for", [c[3] for c in cells], style="red")
    for c in cells:
        t.add_row(*c)
    console.print(t)
    if len(frontier) > 40:
        console.print(f"... and {len(frontier) - 40} more stuck ops (see --json)")


def diff(console: Console, a: Trace, b: Trace, d, incomplete: dict | None = None) -> None:
    console.print(
        f"[bold]A[/] world size {d.world_size_a} · {a.n_events} events   "
        f"[bold]B[/] world size {d.world_size_b} · {b.n_events} events"
    )
    for side, found in (incomplete or {}).items():
        for f in found:
            console.print(f"[bold red]✗ {side.upper()}: {f.kind.name}[/] {escape(f.message)}")
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
                    _indented(
                        f"{side} {escape(ev['sig'])}  [dim]module {escape(ev['module'] or '-')} · "
                        f"{ev['phase']} · step {ev['step']} · {escape(ev['frame'] or '-')}[/]",
                        2,
                    )
                )
        _runs(console, div.runs)
        if div.n_runs > len(div.runs):
            console.print(f"... and {div.n_runs - len(div.runs)} more runs (see --json)")
    volume_table(console, d.volume)


def _runs(console: Console, runs) -> None:
    """The inserted / removed / changed runs of a divergence: a table where the signatures fit
    unbroken, else one heading line per run and its signatures one per line."""
    rows = []
    for run in runs:
        sigs = run.b_sigs if run.kind == "inserted" else run.a_sigs
        what = (
            "\n".join(sigs)
            if run.kind != "changed"
            else "\n".join([f"- {s}" for s in run.a_sigs] + [f"+ {s}" for s in run.b_sigs])
        )
        w = run.where
        where = f"{w['module'] or '-'} · {w['phase']} · step {w['step']} · {w['frame'] or '-'}"
        rows.append((run.kind, f"{run.a_start}..{run.a_stop}", f"{run.b_start}..{run.b_stop}", what, where))
    t = Table(show_lines=False)
    for i, head in enumerate(("run", "A pos", "B pos", "what", "where")):
        _column(t, head, [r[i] for r in rows], wrap=i == 4)
    for r in rows:
        t.add_row(*(escape(c) for c in r))
    if _fits(console, t):
        console.print(t)
        return
    for kind, a_pos, b_pos, what, where in rows:  # wrapped between words, indented: no token cut
        console.print(_indented(f"[bold]{kind}[/] A {a_pos} / B {b_pos} · [dim]{escape(where)}[/]", 2))
        for sig in what.split("\n"):
            console.print(_indented(escape(sig), 4), overflow="fold")


def _indented(markup: str, n: int) -> Padding:
    """`markup` wrapped at the console width with every line `n` columns in (a hanging indent:
    a continued signature or frame does not read as the next item)."""
    return Padding(markup, (0, 0, 0, n), expand=False)


def volume_table(console: Console, volume) -> None:
    """Calls and bytes per mesh dim x op x phase, A, B and B - A. Where the nine columns do not
    fit, A -> B and the deltas share a cell, one value per line (a size is never wrapped)."""
    title = "collectives per mesh dim × op × phase (all ranks; Δ = B − A)"
    rows = []
    for r in volume.iter_rows(named=True):
        rows.append(
            (
                r["dim"],
                r["op"],
                r["phase"],
                str(r["calls_a"]),
                str(r["calls_b"]),
                f"{r['calls_delta']:+d}",
                human_bytes(r["bytes_a"]),
                human_bytes(r["bytes_b"]),
                ("+" if r["bytes_delta"] > 0 else "") + human_bytes(r["bytes_delta"]),
                "red" if r["calls_delta"] or r["bytes_delta"] else None,
            )
        )
    t = Table(title=title, title_justify="left")
    heads = ("dim", "op", "phase", "calls A", "calls B", "Δ calls", "bytes A", "bytes B", "Δ bytes")
    for i, head in enumerate(heads):
        _column(t, head, [r[i] for r in rows], right=i >= 3, wrap=False)
    for r in rows:
        t.add_row(*r[:9], style=r[9])
    if _fits(console, t):
        console.print(t)
        return
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), show_lines=False)
    cells = [
        (
            r[0],
            r[1],
            r[2],
            f"{r[3]} → {r[4]}" + (f"\n{r[5]}" if r[9] else ""),
            f"{r[6]} →\n{r[7]}" + (f"\n{r[8]}" if r[9] else "") if r[6] != r[7] else r[6],
            r[9],
        )
        for r in rows
    ]
    for i, head in enumerate(("dim", "op", "phase", "calls A → B", "bytes A → B")):
        _column(t, head, [c[i] for c in cells], right=i >= 3, wrap=False)
    for c in cells:
        t.add_row(*c[:5], style=c[5])
    console.print(t)


def _dash(v) -> str:
    return "-" if v is None else str(v)
