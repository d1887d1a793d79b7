"""The `int` a module of the program gets in local mode (rank_reads.ProgramInt) stands for the
builtin wherever a framework uses `int` as a type: annotations looked up in a dict keyed by
`int` (torch.library's schema inference), `typing.Optional[int]`, isinstance, pickles of it."""

from __future__ import annotations

import pickle
import typing

import torch

from tracer.local.rank_reads import ProgramInt


def test_it_is_the_builtin_for_every_use_as_a_type():
    assert ProgramInt == int  # noqa: E721 (the comparison is the point)
    assert hash(ProgramInt) == hash(int) and {int: "int"}[ProgramInt] == "int"
    assert typing.Optional[ProgramInt] == typing.Optional[int]  # noqa: UP045 (what annotations spell)
    assert isinstance(3, ProgramInt) and isinstance(True, ProgramInt) and issubclass(bool, ProgramInt)
    assert type(ProgramInt("7")) is int and ProgramInt("7") == 7 and ProgramInt("ff", 16) == 255
    assert pickle.loads(pickle.dumps([ProgramInt, 3])) == [int, 3]
    assert pickle.loads(pickle.dumps(ProgramInt)) is int


def test_a_custom_op_annotated_with_it_gets_the_int_schema():
    def scale(x: torch.Tensor, n: ProgramInt) -> torch.Tensor:  # type: ignore[valid-type]
        return x * n

    schema = torch.library.infer_schema(scale, mutates_args=())
    assert schema == "(Tensor x, SymInt n) -> Tensor"
