"""Task mappings and layouts: how they print (they appear in printed IR and in every
error message about them) and what they refuse, with the exact message; the method
forms (``m.spatial(..., ranks=...)``) against the function forms. Written to kill
mutants of mapping/ the law tests let through (issue 12)."""
from __future__ import annotations

import pytest

from hidet_framework.ir import var
from hidet_framework.mapping.layout import (
    column_major, dense, local, row_major, swizzle,
)
from hidet_framework.mapping.task_mapping import auto_map, repeat, spatial


def test_layouts_print():
    assert str(row_major(2, 3)) == "row_major(2, 3)" and str(column_major(2, 3)) == "column_major(2, 3)"
    assert str(dense(2, 3, 4, ranks=[1, 0, 2])) == "dense(2, 3, 4, ranks=[1, 0, 2])"
    assert str(local(4, 2)) == "local(4, 2)" and repr(local(4)) == "local(4)"
    assert str(row_major(2, 3) * local(4, 2)) == "row_major(2, 3) * local(4, 2)"
    cat = row_major(2) + column_major(3, 4)
    assert str(cat) == "(row_major(2) + column_major(3, 4))"
    # once parenthesised (it printed "((...))" before)
    assert str(row_major(2, 3, 4) * cat) == "row_major(2, 3, 4) * (row_major(2) + column_major(3, 4))"
    assert str(swizzle(row_major(8, 16), vector=2, period=4)) == \
        "swizzle(row_major(8, 16), vector=2, period=4, row_step=1)"
    n = var("n")
    assert str(row_major(n, 4)) == "row_major(n, 4)"


def test_layout_refusals():
    with pytest.raises(ValueError, match=r"layout extents must be non-negative, got \(2, -1\)"):
        row_major(2, -1)
    with pytest.raises(ValueError, match=r"ranks \[0, 0\] is not a permutation of 0..1"):
        dense(2, 3, ranks=[0, 0])
    with pytest.raises(ValueError, match=r"row_major\(2, 3\) takes 2 indices, got 1"):
        row_major(2, 3).offset(1)
    with pytest.raises(IndexError, match=r"index \(2, 0\) out of range for shape \(2, 3\) of row_major\(2, 3\)"):
        row_major(2, 3).offset(2, 0)
    with pytest.raises(IndexError, match="out of range"):
        row_major(2, 3).offset(0, -1)
    with pytest.raises(TypeError, match=r"row_major\(3, n\) has a symbolic shape"):
        row_major(3, var("n")).offset(1, 0)
    with pytest.raises(ValueError, match="composition needs layouts of one rank"):
        row_major(2) * row_major(2, 3)
    with pytest.raises(ValueError, match="concatenation needs two layouts or more"):
        type(row_major(2) + row_major(3))((row_major(2),))
    with pytest.raises(ValueError, match="swizzle vector 3 does not divide 16 columns"):
        swizzle(row_major(8, 16), vector=3)
    with pytest.raises(ValueError, match="swizzle row_step must be positive"):
        swizzle(row_major(8, 16), vector=2, row_step=0)
    with pytest.raises(ValueError, match="must be a power of two"):
        swizzle(row_major(8, 16), vector=2, period=3)
    with pytest.raises(ValueError, match="swizzle needs a 2-D layout"):
        swizzle(row_major(8, 16, 2))
    assert row_major(2, 3).offset(1, 2) == 5 and column_major(2, 3).offset(1, 2) == 5


def test_mappings_print_and_compose():
    assert str(spatial(4, 2)) == "spatial(4, 2)" and str(repeat(3)) == "repeat(3)"
    assert str(spatial(4, 2, ranks=[1, 0])) == "spatial(4, 2, ranks=[1, 0])"
    m = repeat(2, 1).spatial(4, 2, ranks=[1, 0])
    assert str(m) == "repeat(2, 1).spatial(4, 2, ranks=[1, 0])"
    assert m.atoms()[1].ranks == (1, 0)
    r = spatial(2, 2).repeat(1, 3, ranks=[1, 0])
    assert str(r) == "spatial(2, 2).repeat(1, 3, ranks=[1, 0])" and r.atoms()[1].ranks == (1, 0)
    assert m.worker2task(1) == (repeat(2, 1) * spatial(4, 2, ranks=[1, 0])).worker2task(1)
    loop = spatial(4).on(var("w"))
    assert str(loop) == "spatial(4).on(w)" and repr(loop) == "spatial(4).on(w)"
    assert list(spatial(4).on(2)) == [(2,)]
    assert [v.hint for v in spatial(2, 2).on(0).loop_vars()] == ["i", "j"]
    assert [v.hint for v in spatial(1, 1, 1, 1, 2).on(0).loop_vars()] == ["i0", "i1", "i2", "i3", "i4"]


def test_mapping_refusals():
    with pytest.raises(ValueError, match=r"a task mapping needs positive int extents, got \(4, 0\)"):
        spatial(4, 0)
    with pytest.raises(ValueError, match="positive int extents"):
        repeat()
    with pytest.raises(ValueError, match=r"cannot compose spatial\(4\) \(rank 1\) with spatial\(2, 2\) \(rank 2\)"):
        spatial(4) * spatial(2, 2)
    with pytest.raises(IndexError, match=r"worker 4 out of range \[0, 4\) of spatial\(4\)"):
        spatial(4).worker2task(4)
    with pytest.raises(IndexError, match="out of range"):
        spatial(4).worker2task(-1)
    with pytest.raises(ValueError, match="auto_map needs a positive worker count, got 0"):
        auto_map(4, workers=0)
    with pytest.raises(ValueError, match=r"6 workers cannot be spread over task shape \(4, 4\) by gcd splits "
                                         r"\(3 workers left over\)"):
        auto_map(4, 4, workers=6)
    with pytest.raises(TypeError, match=r"spatial\(4\).on\(w\) is symbolic"):
        list(spatial(4).on(var("w")))


def test_auto_map_shapes():
    assert str(auto_map(4, 6, workers=6)) == "repeat(4, 1).spatial(1, 6)"
    assert str(auto_map(4, 6, workers=12)) == "repeat(2, 1).spatial(2, 6)"
    assert str(auto_map(4, 6, workers=24)) == "spatial(4, 6)"
    assert str(auto_map(4, 6, workers=1)) == "repeat(4, 6)"
    assert str(auto_map(1, 1, workers=1)) == "spatial(1, 1)"


def test_index_helpers_fold_units_and_zeros():
    from hidet_framework.ir.expr import BinaryOp
    from hidet_framework.mapping.layout import index_add, index_mod, index_mul, index_xor

    x = var("x")
    assert index_add(2, 3) == 5 and index_mul(2, 3) == 6 and index_mod(7, 3) == 1 and index_xor(6, 3) == 5
    assert index_add(0, x) is x and index_add(x, 0) is x and index_mul(1, x) is x and index_mul(x, 1) is x
    assert index_mul(x, 0) == 0 and index_mul(0, x) == 0 and index_mod(x, 1) == 0
    assert index_xor(x, 0) is x and index_xor(0, x) is x
    for e, op in ((index_add(2, x), "add"), (index_add(x, 1), "add"), (index_mul(2, x), "mul"),
                  (index_mod(x, 2), "mod"), (index_xor(1, x), "bit_xor"), (index_xor(x, 1), "bit_xor")):
        assert isinstance(e, BinaryOp) and e.op == op, e
    assert str(row_major(4, 8)(x, var("y"))) == "((x * 8) + y)"
    assert str(column_major(4, 8)(x, var("y"))) == "(x + (y * 4))"


def test_lowering_binds_a_compound_worker_once_and_unrolls_by_default():
    from hidet_framework.ir.printer import format_ir
    from hidet_framework.ir.stmt import EvaluateStmt

    w, i = var("w"), var("i")
    text = format_ir(repeat(3).lower(w + 1, [i], EvaluateStmt(i)))
    assert text.splitlines()[0] == "let worker = (w + 1)" and "    for i_0 in range(3):  # unroll" in text.splitlines()
    text = format_ir(repeat(2).spatial(4).lower(w, [i], EvaluateStmt(i)))
    assert text.splitlines()[0] == "if (w < 4):" and "let worker" not in text
    with pytest.raises(ValueError, match=r"^spatial\(4, 2\) needs 2 loop variables, got \(i,\)$"):
        spatial(4, 2).lower(w, [i], EvaluateStmt(i))


def test_composed_mapping_and_swizzle_details():
    from hidet_framework.mapping.task_mapping import ComposedTaskMapping

    with pytest.raises(ValueError, match=r"composed mappings need one rank: \['spatial\(4\)', 'spatial\(2, 2\)'\]"):
        ComposedTaskMapping((spatial(4), spatial(2, 2)))
    s = swizzle(row_major(8, 16), vector=2)
    assert str(s) == "swizzle(row_major(8, 16), vector=2, period=8, row_step=1)" and type(s.period) is int
