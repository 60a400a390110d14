"""Layouts: how the indices of a tensor map to an element offset in its storage.

A layout has a `shape` (ints, or IR expressions for global tensors such as
``row_major(m, k)``), a `size` (storage elements), ``layout(*indices)`` (the offset as
an IR expression, from int or `Expr` indices) and ``layout.offset(*ints)`` (a Python
int, for tests and CPU checks). Kinds: ``row_major``/``column_major``/``dense``
(compact, strided), ``local`` (distributed dimensions: one element per worker),
``a * b`` (composition: offset = a(outer) * b.size + b(inner)), ``[2] + layout``
(concatenated dimensions), ``swizzle`` (XOR-permuted 2-D) and
``mapping_register_layout`` (the register tile of a task mapping). Semantics and laws:
``docs/mappings.md``.

Layouts are IR nodes (so structural equality maps the variables of symbolic shapes)
but, unlike other nodes, compare and hash by value: two ``row_major(4, 8)`` are equal.
"""
from __future__ import annotations

import functools
import operator
from typing import Any, Sequence

import attrs

from hidet_framework.ir.expr import Expr, Node, convert
from hidet_framework.mapping.index_arith import (  # noqa: F401 (re-exported: plugins import them here)
    Index, _as_index, _is, index_add, index_div, index_mod, index_mul, index_product, index_xor,
)


def _shape(items: Any) -> tuple:
    out = tuple(_as_index(s) for s in items)
    # zero extents are legal: a tensor may be empty (e.g. a split part of size 0)
    if any(isinstance(s, int) and s < 0 for s in out):
        raise ValueError(f"layout extents must be non-negative, got {out}")
    return out


def normalize_ranks(ranks: Any, rank: int) -> tuple:
    """`ranks` checked to be a permutation of ``range(rank)``; ``None``: row-major."""
    if ranks is None:
        return tuple(range(rank))
    ranks = tuple(operator.index(r) for r in ranks)
    if sorted(ranks) != list(range(rank)):
        raise ValueError(f"ranks {list(ranks)} is not a permutation of 0..{rank - 1}")
    return ranks


def _fmt(items: Sequence[Any]) -> str:
    return ", ".join(str(x) for x in items)


# ---------------------------------------------------------------------------------


class Layout(Node):
    """Base of layouts. Subclasses define `shape`, `size` and `_offset`."""

    __slots__ = ()

    @property
    def rank(self) -> int:
        return len(self.shape)

    def _offset(self, indices: tuple) -> Index:
        raise NotImplementedError

    def _check_rank(self, indices: tuple) -> None:
        if len(indices) != self.rank:
            raise ValueError(f"{self} takes {self.rank} indices, got {len(indices)}")

    def __call__(self, *indices: Any) -> Expr:
        """The element offset of `indices` (ints or `Expr`) as an IR expression."""
        self._check_rank(indices)
        return convert(self._offset(tuple(_as_index(i) for i in indices)))

    def offset(self, *indices: int) -> int:
        """The element offset of concrete, in-range `indices`, as a Python int."""
        self._check_rank(indices)
        indices = tuple(operator.index(i) for i in indices)
        for i, s in zip(indices, self.shape):
            if isinstance(s, int) and not 0 <= i < s:
                raise IndexError(f"index {indices} out of range for shape {self.shape} of {self}")
        out = self._offset(indices)
        if not isinstance(out, int):
            raise TypeError(f"{self} has a symbolic shape: its offsets are IR, use layout(*indices)")
        return out

    def __mul__(self, other: "Layout") -> "ComposedLayout":
        if not isinstance(other, Layout):
            return NotImplemented
        return ComposedLayout(_parts(self, ComposedLayout) + _parts(other, ComposedLayout))

    def __add__(self, other: Any) -> "ConcatLayout":
        other = _as_layout(other)
        if other is None:
            return NotImplemented
        return ConcatLayout(_parts(self, ConcatLayout) + _parts(other, ConcatLayout))

    def __radd__(self, other: Any) -> "ConcatLayout":
        other = _as_layout(other)
        if other is None:
            return NotImplemented
        return other + self

    def __repr__(self) -> str:
        return str(self)


def _parts(layout: Layout, cls: type) -> tuple:
    return layout.parts if isinstance(layout, cls) else (layout,)


def _as_layout(x: Any) -> Layout | None:
    """A layout as is; a list/tuple of extents as ``row_major(*extents)``."""
    if isinstance(x, Layout):
        return x
    if isinstance(x, (list, tuple)):
        return row_major(*x)
    return None


@attrs.frozen(slots=True, repr=False)
class DenseLayout(Layout):
    """A compact strided layout: dimensions ordered by `ranks`, rank 0 slowest.

    ``ranks == (0, 1, ..., n-1)`` is row-major, the reverse is column-major."""

    shape: tuple = attrs.field(converter=_shape)
    ranks: tuple = ()

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "ranks", normalize_ranks(self.ranks or None, len(self.shape)))

    @property
    def size(self) -> Index:
        return index_product(self.shape)

    def strides(self) -> tuple:
        """Stride of each dimension: the product of the extents of higher rank."""
        return (_int_strides if all(type(s) is int for s in self.shape) else _strides)(self.shape, self.ranks)

    def _offset(self, indices: tuple) -> Index:
        out: Index = 0
        for i, stride in zip(indices, self.strides()):
            out = index_add(out, index_mul(i, stride))
        return out

    def __str__(self) -> str:
        n = len(self.shape)
        if self.ranks == tuple(range(n)):
            return f"row_major({_fmt(self.shape)})"
        if self.ranks == tuple(reversed(range(n))):
            return f"column_major({_fmt(self.shape)})"
        return f"dense({_fmt(self.shape)}, ranks={list(self.ranks)})"


def _strides(shape: tuple, ranks: tuple) -> tuple:
    return tuple(index_product([s for s, r in zip(shape, ranks) if r > rd]) for rd in ranks)


_int_strides = functools.lru_cache(maxsize=4096)(_strides)  # int shapes: asked at every flattened access


@attrs.frozen(slots=True, repr=False)
class LocalLayout(Layout):
    """Dimensions spread over workers (one element of each `shape`-block per worker).

    A worker stores only its own element of the block, so its storage for these
    dimensions is one element: `size` is 1 and every in-range index maps to offset 0.
    Composed with dense parts it drops the distributed dimensions from a register
    tile: ``row_major(4, 1) * local(16, 8)`` is a (64, 8) tile of which each of 128
    workers holds 4 elements, element (i, k) at offset ``i // 16``.
    """

    shape: tuple = attrs.field(converter=_shape)

    @property
    def size(self) -> int:
        return 1

    def _offset(self, indices: tuple) -> Index:
        return 0

    def __str__(self) -> str:
        return f"local({_fmt(self.shape)})"


@attrs.frozen(slots=True, repr=False)
class ComposedLayout(Layout):
    """``parts[0] * parts[1] * ...``: outer parts first. Index d splits in mixed radix
    over the parts' extents; offset = Horner of part offsets over part sizes."""

    parts: tuple = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        if len(self.parts) < 2 or len({p.rank for p in self.parts}) != 1:
            raise ValueError(f"composition needs layouts of one rank, got {[str(p) for p in self.parts]}")

    @property
    def shape(self) -> tuple:
        return tuple(index_product([p.shape[d] for p in self.parts]) for d in range(self.parts[0].rank))

    @property
    def size(self) -> Index:
        return index_product([p.size for p in self.parts])

    def _offset(self, indices: tuple) -> Index:
        # Split from the innermost part outwards: it takes idx % extent.
        remaining = list(indices)
        part_indices = []
        for k in range(len(self.parts) - 1, -1, -1):
            part = self.parts[k]
            if k == 0:  # indices are in range, so what is left fits the outermost part
                part_indices.append(tuple(remaining))
            else:
                part_indices.append(tuple(index_mod(i, s) for i, s in zip(remaining, part.shape)))
                remaining = [index_div(i, s) for i, s in zip(remaining, part.shape)]
        part_indices.reverse()
        out: Index = 0
        for part, idx in zip(self.parts, part_indices):
            out = index_add(index_mul(out, part.size), part._offset(idx))
        return out

    def __str__(self) -> str:
        return " * ".join(str(p) for p in self.parts)  # a ConcatLayout prints its own parentheses


@attrs.frozen(slots=True, repr=False)
class ConcatLayout(Layout):
    """``parts[0] + parts[1] + ...``: the dimensions of all parts side by side, outer
    parts first; offset = Horner of part offsets over part sizes."""

    parts: tuple = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        if len(self.parts) < 2:
            raise ValueError("concatenation needs two layouts or more")

    @property
    def shape(self) -> tuple:
        return tuple(s for p in self.parts for s in p.shape)

    @property
    def size(self) -> Index:
        return index_product([p.size for p in self.parts])

    def _offset(self, indices: tuple) -> Index:
        out: Index = 0
        start = 0
        for part in self.parts:
            idx = indices[start:start + part.rank]
            start += part.rank
            out = index_add(index_mul(out, part.size), part._offset(idx))
        return out

    def __str__(self) -> str:
        return "(" + " + ".join(str(p) for p in self.parts) + ")"


@attrs.frozen(slots=True, repr=False)
class SwizzleLayout(Layout):
    """A 2-D layout whose column blocks are permuted per row by XOR.

    Columns are grouped in blocks of `vector` elements (kept contiguous, e.g. 16 bytes
    for vectorised copies); in row i, block b is stored where `base` puts block
    ``b ^ ((i // row_step) % period)``. Successive `period` row groups thus put the
    same logical column in different blocks (different shared-memory banks), which is
    what removes bank conflicts on column-wise access. `period` is a power of two
    dividing the number of blocks, so the XOR stays inside an aligned group of blocks
    and each row is permuted bijectively.
    """

    base: Layout
    vector: int = 1
    period: int = 1
    row_step: int = 1

    def __attrs_post_init__(self) -> None:
        if self.base.rank != 2 or not isinstance(self.base.shape[1], int):
            raise ValueError(f"swizzle needs a 2-D layout with a constant column count, got {self.base}")
        cols = self.base.shape[1]
        if self.vector < 1 or cols % self.vector:
            raise ValueError(f"swizzle vector {self.vector} does not divide {cols} columns")
        blocks = cols // self.vector
        p = self.period
        if p < 1 or p & (p - 1) or blocks % p:
            raise ValueError(f"swizzle period {p} must be a power of two dividing {blocks} column blocks")
        if self.row_step < 1:
            raise ValueError("swizzle row_step must be positive")

    @property
    def shape(self) -> tuple:
        return self.base.shape

    @property
    def size(self) -> Index:
        return self.base.size

    def _offset(self, indices: tuple) -> Index:
        i, j = indices
        pattern = index_mod(index_div(i, self.row_step), self.period)
        block = index_xor(index_div(j, self.vector), pattern)
        column = index_add(index_mul(block, self.vector), index_mod(j, self.vector))
        return self.base._offset((i, column))

    def __str__(self) -> str:
        return f"swizzle({self.base}, vector={self.vector}, period={self.period}, row_step={self.row_step})"


# ------------------------------------------------------------------- constructors


def dense(*shape: Index, ranks: Sequence[int] | None = None) -> DenseLayout:
    """Compact layout with dimension order `ranks` (rank 0 slowest; default row-major)."""
    return DenseLayout(shape, normalize_ranks(ranks, len(shape)))


def row_major(*shape: Index) -> DenseLayout:
    return DenseLayout(shape, tuple(range(len(shape))))


def layout_of(tensor_type: Any) -> "Layout":  # a TensorType's own layout, else row-major over its shape
    t = tensor_type
    if t.layout is not None:
        return t.layout
    return _int_row_major(t.shape) if all(type(s) is int for s in t.shape) else row_major(*t.shape)


_int_row_major = functools.lru_cache(maxsize=4096)(lambda shape: row_major(*shape))  # int shapes: values


def column_major(*shape: Index) -> DenseLayout:
    return DenseLayout(shape, tuple(reversed(range(len(shape)))))


def local(*shape: Index) -> LocalLayout:
    return LocalLayout(shape)


def swizzle(base: Layout, *, vector: int = 1, period: int | None = None, row_step: int = 1) -> SwizzleLayout:
    """XOR-swizzle the 2-D `base`; `period` defaults to the largest power of two
    dividing the number of column blocks (``shape[1] // vector``)."""
    if period is None:
        cols = base.shape[1] if base.rank == 2 else None
        blocks = cols // vector if isinstance(cols, int) and vector >= 1 and cols % vector == 0 else 1
        period = blocks & -blocks
    return SwizzleLayout(base, vector, period, row_step)


def mapping_register_layout(mapping: Any) -> Layout:
    """The mirror layout of a task mapping: per worker, its tasks' elements of a tile
    of shape ``mapping.task_shape``, indexed by global tile coordinates. Spatial parts
    become `local` (other workers hold those), repeat parts become `dense` with the
    same ranks, so the offset of the j-th task of ``mapping.worker2task(w)`` is j."""
    from hidet_framework.mapping.task_mapping import RepeatTaskMapping  # mapping imports layout

    parts = [DenseLayout(a.shape, a.ranks) if isinstance(a, RepeatTaskMapping) else LocalLayout(a.shape)
             for a in mapping.atoms()]  # atoms are repeat or spatial
    return parts[0] if len(parts) == 1 else ComposedLayout(tuple(parts))
