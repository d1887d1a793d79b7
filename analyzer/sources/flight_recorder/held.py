"""Dumps decoded where they are held, reduced to the frontier before they travel: the two-phase
read that `hang` uses on one machine (worker processes) and on a Ray cluster (actors) alike.

Phase 1: each decoder takes a fixed share of the files, decodes every dump into columns, keeps
them, and sends back one small `Summary` per dump (window.py). The caller resolves the groups
and plans each group's frontier window from the summaries alone. Phase 2: each decoder sends back
only its dumps' entries from their cut on. So what crosses a process boundary is a few rows per
group and the windows, never the whole history (16,384 dumps x 2,000 entries: ~4 GB of decoded
columns stay where they were decoded; a few MB travel).

A decoder set is anything with `calls(method, args_per_decoder) -> results in that order`:
`InProcess` (few dumps), `Processes` (this machine's cores) and on_ray.py's actors.
"""

from __future__ import annotations

import gc
from typing import Any, Protocol

from analyzer.model.trace import LoadError, Trace
from analyzer.sources.flight_recorder import window
from analyzer.sources.flight_recorder.blocks import RankDump
from analyzer.sources.flight_recorder.dumps import accept, assemble, resolve
from analyzer.sources.flight_recorder.options import ReadOptions
from analyzer.sources.flight_recorder.rank import read_rank, read_rank_data
from analyzer.sources.flight_recorder.read import sniff, will_need
from traceformat.workers import context

AHEAD = 32  # files asked of the kernel ahead of the one decoded (read.will_need)


class Decoder:
    """Decodes its share of the dumps and holds them until the caller's cut."""

    def __init__(self) -> None:
        self.dumps: dict[int, RankDump] = {}
        self.canon: dict = {}

    def _share(self, d: RankDump) -> None:
        """d's table values made one object per distinct value across this decoder's dumps: an
        answer is one pickle, memoised by identity, so 50,000 ranks' summaries and windows carry
        each call site, shape and group once, and the receiver holds them once. pg_config rows
        are keyed by their member tuple's identity (the reader parses each member list once,
        conventions._members_text; canon keeps every keyed tuple alive, so no id is reused):
        hashing a 100k-rank tuple per dump would cost more than the sharing saves."""
        canon = self.canon
        d.config = [canon.setdefault(("config", n, desc, id(m)), (n, desc, m)) for n, desc, m in d.config]
        for name in ("sites", "pgs", "shapes", "dtypes", "states"):
            try:
                setattr(d, name, [canon.setdefault(v, v) for v in getattr(d, name)])
            except TypeError:  # an unhashable value (a malformed dump's): left as it is
                pass

    def decode(self, items: list, make: Any = None) -> list[tuple]:
        """Per item (a file path, or with `make` an argument of make(item) -> (name, pickle
        bytes)): (index, file, rank, error, refused, kind, summary) of those that are dumps."""
        enabled = gc.isenabled()
        gc.disable()  # as the local reader: the collector would rescan every decoded container
        try:
            out = []
            for i, item in enumerate(items):
                if make is None and i % AHEAD == 0:  # the next files load while these decode
                    for ahead in items[i + AHEAD : i + 2 * AHEAD] if i else items[: 2 * AHEAD]:
                        will_need(ahead)
                if (meta := self._one(i, item, make)) is not None:
                    out.append(meta)
            return out
        finally:
            if enabled:
                gc.enable()

    def _one(self, i: int, item: Any, make: Any) -> tuple | None:
        if make is None:
            kind = sniff(item)
            if kind is None:
                return None
            d = read_rank((item, kind))
        else:
            name, data = make(item)
            kind = "pickle"
            d = read_rank_data(name, data, kind)
        s = None
        if not d.error and d.rank is not None:
            self._share(d)
            window.number_p2p(d)
            s = window.summarize(d)
            self.dumps[i] = d
        return (i, d.file, d.rank, d.error, d.refused, kind, s)

    def take(self, cuts: dict) -> list[RankDump]:
        """The accepted dumps (index -> window.Cut, or None: whole), cut; the rest dropped."""
        out = []
        for i, where in cuts.items():
            d = self.dumps.pop(i)
            out.append(window.pack(window.cut(d, where) if where is not None else d))
        self.dumps.clear()
        return out


class Decoders(Protocol):
    def calls(self, method: str, args: list[tuple]) -> list: ...


class InProcess:
    """One Decoder in this process (a few dumps: a worker costs more than it saves)."""

    def __init__(self) -> None:
        self.decoder = Decoder()

    def calls(self, method: str, args: list[tuple]) -> list:
        return [getattr(self.decoder, method)(*a) for a in args]


def _serve(conn) -> None:
    """A worker process's loop: (method, args) in, its result out; None ends it."""
    decoder = Decoder()
    while (msg := conn.recv()) is not None:
        method, args = msg
        conn.send(getattr(decoder, method)(*args))


class Processes:
    """`n` fork-server worker processes, one Decoder each, that keep their dumps between calls
    (a pool's tasks go to any worker: the cut must reach the process that holds the dump)."""

    def __init__(self, n: int) -> None:
        ctx = context(["analyzer.sources.flight_recorder.held"])
        self.conns, self.procs = [], []
        for _ in range(n):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(theirs,), daemon=True)
            p.start()
            theirs.close()
            self.conns.append(mine)
            self.procs.append(p)

    def calls(self, method: str, args: list[tuple]) -> list:
        try:
            for conn, a in zip(self.conns, args):
                conn.send((method, a))
            return [conn.recv() for conn in self.conns]
        except (EOFError, OSError):  # a worker died (killed, out of memory): say so, not a traceback
            dead = [p for p in self.procs if not p.is_alive()]
            code = dead[0].exitcode if dead else None
            raise LoadError(f"a dump-decoding worker process died (exit code {code})") from None

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
            conn.close()
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def shares(items: list, n: int) -> list[list]:
    """`items` in n contiguous shares of (nearly) equal size, in order."""
    return [items[k * len(items) // n : (k + 1) * len(items) // n] for k in range(n)]


def reduce(decoders: Decoders, n: int, items: list, make: Any, source: str, options: ReadOptions) -> Trace:
    """The Trace of the dumps `items` name, decoded by the `n` decoders (share k to decoder k)
    and, with options.frontier, cut where they were decoded."""
    metas = decoders.calls("decode", [(share, make) for share in shares(items, n)])
    if not any(metas):
        raise LoadError(f"{source}: no Flight Recorder dumps found")
    single = sum(map(len, metas)) == 1
    seen: dict[int, RankDump] = {}
    where: dict[int, tuple[int, int]] = {}  # rank -> (decoder, index)
    summaries: dict[int, window.Summary] = {}
    notes: list[str] = []
    kinds = set()
    for k, meta in enumerate(metas):  # shares are contiguous: file order, as the streamed read
        for i, file, rank, error, refused, kind, summary in meta:
            kinds.add(kind)
            if accept(RankDump(file=file, rank=rank, error=error, refused=refused), seen, notes, single):
                where[rank] = (k, i)
                summaries[rank] = summary
    if not summaries:
        raise LoadError(f"{source}: no readable Flight Recorder dump" + (f" ({notes[0]})" if notes else ""))
    cuts: dict = {}
    if options.frontier:
        _, groups, _, _, _, by_local = resolve(summaries)
        cuts = window.plan(list(summaries.values()), groups, by_local, options.context)
    asks: list[dict] = [{} for _ in range(n)]
    for rank, (k, i) in where.items():
        asks[k][i] = cuts.get(rank)
    del metas, seen, cuts, where  # the driver's peak is in assemble: hold only what it needs
    dumps = {d.rank: d for part in decoders.calls("take", [(ask,) for ask in asks]) for d in part}
    del asks
    return assemble(source, dumps, summaries, notes, "+".join(sorted(kinds)), options)
