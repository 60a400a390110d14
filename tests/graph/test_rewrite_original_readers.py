"""`GraphUses.original_readers` and `is_output` across a round's rebuilds
(graph/passes/rewrite_patterns.py): downstream of a rule's rewrite, the operators of the
same round are rebuilt over the new tensors, and `readers` answers None for their
outputs; `original_readers` answers for the tensor each is a copy of, so a rule that
asks whether a tensor is private to one reader decides in the same round (a chain of
N rewrites, each downstream of the last, would otherwise take N rounds and stop at
the round bound)."""
from __future__ import annotations

import hidet_framework as hf
from hidet_framework.graph.passes.base import GraphPassContext
from hidet_framework.graph.passes.rewrite_patterns import rewrite_patterns


class _Rule:
    point = "graph_rewrite"

    def __init__(self, name, op_names, fn, needs_uses=False):
        self.name, self.op_names, self.fn, self.needs_uses = name, op_names, fn, needs_uses

    def rewrite(self, op, *uses):
        return self.fn(op, *uses)


def test_original_readers_follow_rebuilt_tensors(dummy):
    x = hf.symbol((4,), "float32")
    a = dummy.scale(x, 3.0)          # the rule below replaces it (once)
    b = dummy.scale(a, 5.0)          # rebuilt in the same round
    c = dummy.scale(b, 7.0)          # the asking rule's operator, rebuilt too
    g = hf.trace([c, b], inputs=[x])
    seen = []

    def replace_or_ask(op, uses):
        if op.attributes["factor"] == 3.0:          # replaced once: everything after is rebuilt
            return [dummy.scale(op.inputs[0], 3.5)]
        if op.attributes["factor"] == 7.0:
            t = op.inputs[0]
            seen.append((uses.readers(t), uses.original_readers(t), uses.is_output(t), uses.is_output(op.outputs[0])))
        return None

    rewrite_patterns(g, GraphPassContext(rewrite_rules=[_Rule("replace_or_ask", ("scale",), replace_or_ask, True)]))
    first = seen[0]
    assert first[0] is None                                  # rebuilt this round: readers cannot say
    readers = first[1]
    assert readers is not None and len(readers) == 1         # ...its original has one reader
    assert readers[0][0].attributes["factor"] == 7.0 and readers[0][1] == 0
    assert first[2] is True and first[3] is True            # b and c are graph outputs, rebuilt or not
    # a tensor a rule made (not a rebuilt copy) has no original readers
    made = dummy.scale(x, 9.0)

    def probe(op, uses):
        seen.append(uses.original_readers(made))
        return None

    rewrite_patterns(hf.trace(c, inputs=[x]), GraphPassContext(rewrite_rules=[_Rule("p", ("scale",), probe, True)]))
    assert seen[-1] is None
