"""infer_type remembers the types of composite nodes: asking for every prefix of a
long chain (what the simplifier does, bottom-up) infers each node once, and the memo
never answers for a different node, even one of the same structure. The answer is kept
on the node (`Expr._type`), so it keeps nothing alive (issue 11: a global memo held
most of a lowering process's objects)."""
from __future__ import annotations

import gc
import pickle
import weakref

from hidet_framework.ir import dtypes, type_infer
from hidet_framework.ir.expr import Var, cast, const


def _counting(monkeypatch) -> list:
    calls = []
    real = type_infer._infer_composite

    def counted(e):
        calls.append(e)
        return real(e)

    monkeypatch.setattr(type_infer, "_infer_composite", counted)
    return calls


def test_each_node_of_a_chain_is_inferred_once(monkeypatch):
    calls = _counting(monkeypatch)
    i = Var("i", dtypes.int32)
    chain = [i]
    for k in range(300):  # (((i * 3 + 1) / 7) % 11 ...): a grafted index's shape
        chain.append(chain[-1] * 3 + k if k % 2 else chain[-1] / 7 % 11)
    for e in chain:
        assert type_infer.infer_type(e) is dtypes.int32
    nodes = len(calls)
    for e in chain:  # asked again: all from the memo
        type_infer.infer_type(e)
    assert len(calls) == nodes <= 2 * 300


def test_same_structure_other_types_are_told_apart(monkeypatch):
    _counting(monkeypatch)
    a32, a64 = Var("a", dtypes.int32), Var("a", dtypes.int64)
    e32, e64 = a32 + 1, a64 + 1
    assert type_infer.infer_type(e32) is dtypes.int32
    assert type_infer.infer_type(e64) is dtypes.int64
    assert type_infer.infer_type(cast(e32, dtypes.float16) * const(2.0, dtypes.float16)) is dtypes.float16


def test_the_memo_keeps_no_node_alive():
    x = Var("x", dtypes.int64)
    e = x * 3 + 1
    assert type_infer.infer_type(e) is dtypes.int64
    gone = weakref.ref(e)
    del e
    gc.collect()
    assert gone() is None


def test_the_remembered_type_is_not_a_field():
    """Not printed, compared, pickled or copied by `attrs.evolve`: a cache, asked again after a round trip."""
    import attrs

    e = Var("x", dtypes.int32) + 1
    type_infer.infer_type(e)
    assert [f.name for f in attrs.fields(type(e))] == ["op", "a", "b"]
    back = pickle.loads(pickle.dumps(e))
    assert not hasattr(back, "_type") and type_infer.infer_type(back) == dtypes.int32  # unpickled: not interned
    assert not hasattr(attrs.evolve(e, op="mul"), "_type")
