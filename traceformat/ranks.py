"""Rank lists as people write them ("0,3,8-15") and read them ("3-507 step 8"). Torch-free:
the recorder parses --ranks with it and the analyzer prints culprits with it."""

from __future__ import annotations


def parse_ranks(spec: str, world_size: int) -> list[int]:
    """'all' or '0,3,8-15' -> sorted ranks; ValueError with a one-line message otherwise."""
    if spec.strip() in ("", "all"):
        return list(range(world_size))
    ranks: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                ranks.update(range(lo, hi + 1))
            else:
                ranks.add(int(part))
        except ValueError:
            raise ValueError(f"--ranks: cannot read {part!r} (use e.g. all or 0,3,8-15)") from None
    bad = sorted(r for r in ranks if not 0 <= r < world_size)
    if bad or not ranks:
        raise ValueError(f"--ranks: {bad or 'none'} outside 0..{world_size - 1}")
    return sorted(ranks)


def ranks_text(ranks) -> str:
    """[0,1,2,5] -> '0-2,5'; a long strided list [3,11,...,507] -> '3-507 step 8'."""
    ranks = sorted(ranks)
    # a whole range or a strided one, compared at C speed: a 16k-rank job names its world and
    # dp groups once per stuck rank
    step = ranks[1] - ranks[0] if len(ranks) > 1 else 1
    if len(ranks) > 4 and step > 1 and ranks == list(range(ranks[0], ranks[-1] + 1, step)):
        return f"{ranks[0]}-{ranks[-1]} step {ranks[1] - ranks[0]}"
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(out)
