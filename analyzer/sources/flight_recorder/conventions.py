"""What Flight Recorder's fields mean, in commtrace's terms: op names, dtypes, call sites, groups.

FR records what the *backend* ran, not what the program called, and in its own conventions:
- gloo runs `reduce_scatter_tensor` (and DTensor's Partial -> Shard) as one `all_reduce` of the
  whole input, `all_reduce_coalesced` as an `all_reduce` of several tensors, and the list
  `reduce_scatter` as one `all_reduce` per chunk;
- every all-gather is `all_gather`, with an output size that is not the output buffer's: c10d's
  `all_gather_into_tensor` gives `[group size, *input]`, a functional (DTensor) all-gather
  `[1, *input]` -- so "output = input x group size" does not hold on what FR wrote;
- dtypes are c10 names (`Float`, `BFloat16`), p2p peers are group ranks inside the name
  (`nccl:send 0->1`), `collective_seq_id` counts from 1.
The importer maps all this onto commtrace's vocabulary (traceformat.format) so that the checks see
one convention. Where the Python frames are in the dump (pickle dumps with stack traces), the
c10d / functional API the program called names the op; without frames (JSON dumps) the backend
op stays. Outputs of gathers and of reduce-scatters named from frames are derived from the
input and the group size on gloo, whose recorded outputs follow the conventions above.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from traceformat.ops import OPS

# FR / backend op names (after "backend:") -> commtrace ops. Unknown names are kept as they are.
BACKEND_OPS = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "all_reduce_coalesced": "all_reduce_coalesced",
    "all_gather": "all_gather_into_tensor",
    "allgather": "all_gather_into_tensor",
    "_allgather_base": "all_gather_into_tensor",
    "_all_gather_base": "all_gather_into_tensor",
    "all_gather_base": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "all_gather_into_tensor": "all_gather_into_tensor",
    "all_gather_v": "all_gather_v",
    "allgather_coalesced": "all_gather_coalesced",
    "all_gather_coalesced": "all_gather_coalesced",
    "all_gather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "ALLGATHER_coalesced": "all_gather_into_tensor_coalesced_marker",
    # NCCL flattens a list reduce_scatter of equal chunks into one input [size * n, ...] (output
    # [n, ...]): the tensor form. Uneven ones are `reduce_scatter_v` / `all_gather_v` (each member
    # its own size: the op table's `uneven` ops), as a per-member list or one flat tensor
    "reduce_scatter": "reduce_scatter_tensor",
    "reduce_scatter_v": "reduce_scatter_v",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "reduce_scatter_tensor": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "REDUCE_SCATTER_coalesced": "reduce_scatter_tensor_coalesced_marker",
    "coalesced": "coalesced",
    "broadcast": "broadcast",
    "_broadcast_oop": "broadcast",
    "reduce": "reduce",
    "_reduce_oop": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "all_to_all_single": "all_to_all_single",
    "alltoall_base": "all_to_all_single",
    "all_to_all_v_single": "all_to_all_single",
    "barrier": "barrier",
    "all_reduce_barrier": "barrier",
    "send": "send",
    "recv": "recv",
    "recvAnysource": "recv",
}

# Python API functions (c10d, functional collectives, DTensor) seen in the frames -> the op the
# program called, when the backend ran it as another op (key: backend op after BACKEND_OPS).
API_OPS = {
    "all_reduce": {
        "reduce_scatter_tensor": "reduce_scatter_tensor",
        "reduce_scatter_single": "reduce_scatter_tensor",
        "_reduce_scatter_base": "reduce_scatter_tensor",
        "all_reduce_coalesced": "all_reduce_coalesced",
    },
    "all_gather_into_tensor": {"all_gather": "all_gather"},
}
API_FILES = ("distributed_c10d.py", "_functional_collectives.py", "c10d_logger.py")

DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "ComplexHalf": "complex32",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e5m2": "float8_e5m2",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
}
ITEMSIZE = {
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
    "complex32": 4,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
}

# The end markers ProcessGroupNCCL::endCoalescing records for a coalesced block (names after
# BACKEND_OPS) -> (the op of the block's ops, the op the whole block is). A block of other ops
# (uneven all_gather / reduce_scatter run as `_broadcast_oop` / `_reduce_oop` ops, a plain
# `nccl:coalesced` block) is those ops coalesced: every member agrees on each op's shape.
COALESCED_MARKERS = {
    "coalesced": (None, None),
    "all_gather_into_tensor_coalesced_marker": ("all_gather_into_tensor", "all_gather_into_tensor_coalesced"),
    "reduce_scatter_tensor_coalesced_marker": ("reduce_scatter_tensor", "reduce_scatter_tensor_coalesced"),
}


def dtype_name(fr: str | None) -> str | None:
    if not fr:
        return None
    return DTYPES.get(fr, fr.lower())


def dtype_pair(ins: tuple, outs: tuple) -> str | None:
    """The dtype of an entry: its input's, or 'in->out' when the output is written in another
    dtype (a gather's non-root ranks record no output: no difference)."""
    i = dtype_name(ins[0]) if ins else None
    o = dtype_name(outs[0]) if outs else None
    return f"{i}->{o}" if i and o and i != o else (i or o)


def parse_profiling_name(name: str) -> tuple[str, str, int]:
    """'nccl:send 0->1' -> ('nccl', 'send', 1); 'gloo:all_reduce' -> ('gloo', 'all_reduce', -1).
    The peer is a group rank (the other side of a p2p op)."""
    backend, _, rest = (name or "").partition(":")
    if not rest:
        backend, rest = "", backend
    op, _, meta = rest.partition(" ")
    peer = -1
    if op == "send" and "->" in meta:
        peer = _int(meta.split("->")[1])
    elif op.startswith("recv") and "<-" in meta:
        peer = _int(meta.split("<-")[1])
    return backend, BACKEND_OPS.get(op, op), peer


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


_STDLIB = re.compile(r"[/\\]lib[/\\]python\d+(\.\d+)?[/\\]", re.IGNORECASE)


def _is_library(path: str) -> bool:
    """torch, other installed packages, the standard library, <string>: not the user's code."""
    return "site-packages" in path or "dist-packages" in path or path.startswith("<") or bool(_STDLIB.search(path))


def call_site(frames: list[dict] | None) -> tuple[str | None, str | None]:
    """(outermost c10d / functional-collective API function, first user frame as
    'path:line in function') of one entry's frames (innermost first)."""
    if not frames:
        return None, None
    api = user = None
    for f in frames:
        path = str(f.get("filename", ""))
        if not _is_library(path):
            user = f"{path}:{f.get('line', '?')} in {f.get('name', '?')}"
            break
        if path.endswith(API_FILES):
            api = f.get("name") if f.get("name") != "wrapper" else api
    return api, user


def program_op(backend: str, op: str, api: str | None) -> str:
    """The op the program called: the API seen in the frames when it is a known alias of the
    backend op (gloo's reduce_scatter-as-all_reduce), else the backend op."""
    return API_OPS.get(op, {}).get(api or "", op)


def derive_outputs(op: str, inputs: list, size: int) -> list | None:
    """Output shapes in commtrace's convention from the inputs and the group size (for gathers
    and reduce-scatters whose recorded outputs follow FR's conventions); None: keep them."""
    kind = OPS.get(op)
    if size <= 0 or not inputs or kind is None or not kind.size_factor or kind.uneven:
        return None
    if kind.flat and kind.size_factor > 0:  # all_gather_into_tensor(_coalesced)
        return [[s[0] * size, *s[1:]] if s else [size] for s in inputs]
    if kind.flat:  # reduce_scatter_tensor(_coalesced)
        return [[s[0] // size, *s[1:]] if s else [] for s in inputs]
    if kind.size_factor > 0 and not kind.coalesced:  # all_gather: one output per member
        return [list(inputs[0]) for _ in range(size)]
    return None


def config_groups(pg_config: Any) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, desc, member ranks in group-rank order) of one dump's pg_config. gloo writes a
    single placeholder {'': {'name': '', 'ranks': '[]'}}: no groups. Ranks are parsed as JSON,
    never evaluated."""
    out: list[tuple[str, str, tuple[int, ...]]] = []
    if not isinstance(pg_config, dict):
        return out
    for key, pg in pg_config.items():
        if not isinstance(pg, dict):
            continue
        try:
            members = _members(pg.get("ranks", "[]"))
        except (ValueError, TypeError):
            continue
        name = str(pg.get("name", key))
        if members and name:
            out.append((name, str(pg.get("desc", "undefined")), members))
    return out


@functools.lru_cache(maxsize=4096)
def _members_text(text: str) -> tuple[int, ...]:
    # every rank's dump repeats the same member lists (thousands of ranks long): parse each once
    return tuple(int(r) for r in json.loads(text))


def _members(ranks) -> tuple[int, ...]:
    return _members_text(ranks) if isinstance(ranks, str) else tuple(int(r) for r in ranks)


def numel(shape) -> int:
    """Elements of a shape; 0 for a malformed one (a dump is untrusted input)."""
    out = 1
    for d in shape:
        if type(d) is not int:
            return 0
        out *= d
    return out
