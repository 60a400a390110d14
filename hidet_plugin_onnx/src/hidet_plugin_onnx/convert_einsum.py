"""Einsum equations that are matrix products (batch, contracted, left-only and
right-only letters, each letter at most once per operand) and single-operand
permutations, as transpose + reshape + matmul."""
from __future__ import annotations

import numpy as np

from .op_table import converter


def _parse(ctx, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    equation = equation.replace(" ", "")
    if "..." in equation:
        raise ctx.error(f"equation {equation!r}: ellipsis is not supported")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.error(f"equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    for term, rank in zip(terms, ranks):
        if len(term) != rank or len(set(term)) != len(term) or (term and not term.isalpha()):
            raise ctx.error(f"equation {equation!r}: term {term!r} does not fit an operand of rank {rank} "
                            f"(repeated letters, traces and diagonals are not supported)")
    if not arrow:  # implicit output: letters seen once, alphabetically
        counts = {}
        for c in "".join(terms):
            counts[c] = counts.get(c, 0) + 1
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    return terms, out


@converter("Einsum", needs=("matmul", "transpose", "reshape"))
def _einsum(ctx):
    operands = [ctx.tensor(k) for k in range(len(ctx.inputs))]
    terms, out = _parse(ctx, ctx.attr("equation"), [t.rank for t in operands])
    if len(operands) == 1:
        if sorted(out) != sorted(terms[0]):
            raise ctx.error(f"equation {ctx.attr('equation')!r}: summing over letters needs a reduction "
                            f"(not supported in Einsum)")
        return ctx.op("transpose")(operands[0], [terms[0].index(c) for c in out])
    if len(operands) != 2:
        raise ctx.error("only one or two operands are supported")
    (a, b), (ta, tb) = operands, terms
    for c in ta + tb:
        if c not in out and not (c in ta and c in tb):
            raise ctx.error(f"letter {c!r} is summed within one operand: needs a reduction (not supported)")
    batch = [c for c in out if c in ta and c in tb]
    contracted = [c for c in ta if c in tb and c not in out]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]
    size = {c: a.shape[ta.index(c)] for c in ta}
    for c in tb:
        if c in size and size[c] != b.shape[tb.index(c)]:
            raise ctx.error(f"letter {c!r} has extents {size[c]} and {b.shape[tb.index(c)]}")
        size[c] = b.shape[tb.index(c)]
    prod = lambda cs: int(np.prod([size[c] for c in cs], dtype=np.int64))  # noqa: E731

    def arrange(t, term, order, shape):
        perm = [term.index(c) for c in order]
        if perm != list(range(len(perm))):
            t = ctx.op("transpose")(t, perm)
        return ctx.op("reshape")(t, shape) if tuple(t.shape) != tuple(shape) else t

    a3 = arrange(a, ta, batch + left + contracted, [prod(batch), prod(left), prod(contracted)])
    b3 = arrange(b, tb, batch + contracted + right, [prod(batch), prod(contracted), prod(right)])
    y = ctx.op("matmul")(a3, b3)
    produced = batch + left + right
    y = ctx.op("reshape")(y, [size[c] for c in produced])
    perm = [produced.index(c) for c in out]
    return y if perm == list(range(len(perm))) else ctx.op("transpose")(y, perm)
