"""The op table against torch 2.13's dispatcher: every dispatcher op an entry claims exists, every
collective op torch registers is an entry's (or named here as not one), and local mode's capture
listens to every one of them under the table's name."""

import torch
import torch.distributed  # noqa: F401  (registers the c10d and functional ops)
import torch.distributed._functional_collectives  # noqa: F401

from traceformat.ops import COLLECTIVE, DISPATCHED, OPS, P2P
from tracer.capture import dispatched

NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor")

NOT_AN_OP = {
    # monitored_barrier: gloo's debugging barrier (no fake or LocalTensor implementation)
    "c10d::monitored_barrier_": "gloo-only debugging barrier",
    "c10d::check_for_nan": "a NaN check, no communication",
    "_c10d_functional::_wrap_tensor_autograd": "wraps a result for autograd, no communication",
    "_c10d_functional::batch_p2p_ops": "issues several sends and recvs: recorded as each of them",
    # the autograd wrappers dispatch the _c10d_functional op inside them, recorded as that one
    "_c10d_functional_autograd::all_gather_into_tensor": "wraps _c10d_functional::all_gather_into_tensor",
    "_c10d_functional_autograd::reduce_scatter_tensor": "wraps _c10d_functional::reduce_scatter_tensor",
    "_c10d_functional_autograd::all_to_all_single": "wraps _c10d_functional::all_to_all_single",
}


def _registered() -> set[str]:
    return {s.name for s in torch._C._jit_get_all_schemas() if s.name.split("::")[0] in NAMESPACES}


def test_every_dispatched_op_exists_in_torch():
    assert set(DISPATCHED) - _registered() == set()
    assert set(NOT_AN_OP) <= _registered()


def test_every_collective_torch_registers_is_an_op_of_the_table():
    assert _registered() - set(DISPATCHED) - set(NOT_AN_OP) == set()
    # the coalesced dispatcher ops are the coalesced entries, never the plain ones
    for name, op in DISPATCHED.items():
        assert ("coalesced" in name) == OPS[op].coalesced, name


def test_local_mode_listens_to_every_dispatched_op_of_the_table():
    # LocalTensorMode answers these ops itself: the capture wrapper sees each namespace, records
    # every collective under the table's name and refuses every p2p op
    assert {name.split("::")[0] for name in DISPATCHED} <= dispatched.NAMESPACES
    assert {**dispatched.C10D, **dispatched.FUNCTIONAL} == {
        n: op for n, op in DISPATCHED.items() if OPS[op].kind == COLLECTIVE
    }
    assert dispatched.P2P == {n for n, op in DISPATCHED.items() if OPS[op].kind == P2P}
