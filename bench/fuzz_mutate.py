"""Mutations for bench/fuzz.py: byte level (truncate, bit flips, overwritten / inserted / deleted /
duplicated spans, splices of two inputs) and structural (a msgpack record's or a dump entry's
field set to an odd value or removed, entries dropped, duplicated or reordered). Each takes a
seeded random.Random: a case is a pure function of its seed."""

from __future__ import annotations

import io
import json
import pickle
import random

ODD = [
    None,
    -1,
    0,
    1,
    2**31,
    -(2**63),
    2**64,
    1.5,
    float("nan"),
    "",
    "x" * 300,
    "all_reduce",
    [],
    [[-1]],
    [1, "a"],
    {},
    {"a": 1},
    True,
    b"\xff",
]


def mutate_bytes(rng: random.Random, data: bytes, other: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if not b:
            b = bytearray(b"\x80")
        how = rng.randrange(7)
        at = rng.randrange(len(b))
        if how == 0:
            b = b[: max(1, rng.randrange(len(b) + 1))]
        elif how == 1:
            for _ in range(rng.randint(1, 6)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif how == 2:
            for i in range(at, min(len(b), at + rng.randint(1, 8))):
                b[i] = rng.choice(
                    [0x00, 0xFF, 0x7F, 0x80, 0xC0, 0xC1, 0xD9, 0xDC, 0xDD, 0xDE, 0xDF, rng.randrange(256)]
                )
        elif how == 3:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif how == 4:
            del b[at : at + rng.randint(1, 64)]
        elif how == 5:
            span = b[at : at + rng.randint(1, 256)]
            to = rng.randrange(len(b) + 1)
            b[to:to] = span
        else:
            cut = rng.randrange(len(other) + 1)
            b = b[:at] + other[cut:]
    return bytes(b)


def mutate_value(rng: random.Random, value, depth: int = 0):
    """One odd change somewhere inside a msgpack / JSON / pickle value."""
    if isinstance(value, dict) and value and depth < 6:
        key = rng.choice(list(value))
        value = dict(value)
        r = rng.random()
        if r < 0.15:
            del value[key]
        elif r < 0.55:
            value[key] = rng.choice(ODD)
        else:
            value[key] = mutate_value(rng, value[key], depth + 1)
        return value
    if isinstance(value, (list, tuple)) and value and depth < 6:
        value = list(value)
        r = rng.random()
        i = rng.randrange(len(value))
        if r < 0.15:
            del value[i]
        elif r < 0.25:
            value.insert(rng.randrange(len(value) + 1), value[i])
        elif r < 0.35:
            rng.shuffle(value)
        elif r < 0.55:
            value[i] = rng.choice(ODD)
        else:
            value[i] = mutate_value(rng, value[i], depth + 1)
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return rng.choice([value + 1, value - 1, -value, value * 2**20, 0, -1])
    return rng.choice(ODD)


def mutate_records(rng: random.Random, data: bytes) -> bytes:
    """Decode a trace's msgpack records, change a field of one or two of them, pack them again."""
    import msgpack

    records = list(msgpack.Unpacker(io.BytesIO(data), raw=False, strict_map_key=False))
    for _ in range(rng.randint(1, 2)):
        i = rng.randrange(len(records))
        r = rng.random()
        if r < 0.1 and len(records) > 1:
            del records[i]
        elif r < 0.2:
            records.insert(rng.randrange(len(records) + 1), records[i])
        else:
            records[i] = mutate_value(rng, records[i])
    packer = msgpack.Packer(use_bin_type=True)
    out = []
    for rec in records:
        try:
            out.append(packer.pack(rec))
        except (TypeError, ValueError, OverflowError):
            out.append(packer.pack(None))
    return b"".join(out)


def file_bytes(rng: random.Random, seed: bytes, other: bytes) -> bytes:
    if rng.random() < 0.5:
        try:
            seed = mutate_records(rng, seed)
            if rng.random() < 0.7:
                return seed
        except Exception:
            pass
    return mutate_bytes(rng, seed, other)


def dump_bytes(rng: random.Random, kind: str, d: dict) -> bytes:
    if rng.random() < 0.7:
        for _ in range(rng.randint(1, 3)):
            d = mutate_value(rng, d)
    if kind == "fr_pickle":
        data = pickle.dumps(d, protocol=2)
    else:
        data = json.dumps(d, default=repr).encode()
    return mutate_bytes(rng, data, data) if rng.random() < 0.3 else data
