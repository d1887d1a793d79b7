"""Fuzz the loader: truncated and bit-flipped traces (merged blocks and streamed rows) load or
fail with LoadError, never anything else; whatever loads is checked and summarized cleanly."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.checks import run_checks
from analyzer.load import LoadError, load
from analyzer.summary import summarize
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader

_SAMPLES: dict[str, bytes] = {}


def _sample(recorded, tmp_path_factory, kind: str) -> bytes:
    if not _SAMPLES:
        path, _ = recorded("bug_subgroup_skip", 8, "fake")
        _SAMPLES["blocks"] = open(path, "rb").read()
        rows = tmp_path_factory.mktemp("rows") / "all.part"
        trace_parts.write_data(rows, trace_reader.read_trace(path), rows=True)
        _SAMPLES["rows"] = rows.read_bytes()
    return _SAMPLES[kind]


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(["blocks", "rows"]),
    cut=st.floats(0, 1),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 7)), max_size=6),
)
def test_truncated_and_bit_flipped_traces(recorded, tmp_path_factory, kind, cut, flips):
    data = bytearray(_sample(recorded, tmp_path_factory, kind))
    if cut < 0.98:
        data = data[: max(1, int(len(data) * cut))]
    for where, bit in flips:
        data[min(len(data) - 1, int(where * len(data)))] ^= 1 << bit
    path = tmp_path_factory.mktemp("fuzz") / "f.trace"
    path.write_bytes(bytes(data))
    try:
        t = load(path)
    except LoadError:
        return
    run_checks(t)
    summarize(t)
