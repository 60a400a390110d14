"""c_identifier / NameScope: any string becomes a valid, safe, distinct C identifier."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, strategies as st

from hidet_framework.backend.naming import C_KEYWORDS, NameScope, c_identifier, is_reserved

VALID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

HOSTILE = [
    "", " ", "_", "__", "___x", "_Bool", "__init", "_X", "1abc", "123", "int", "for", "return",
    "main", "threadIdx", 'a"b', "a'b", "a\nb", "x */ int evil; /*", "*/", "/*", "//", "#include <stdio.h>",
    "a\\", "名前", "héllo", "😀", "a\x00b", "a b", "a-b", "a.b", "a::b", "x" * 1000, "\ud800",
    "conv1", "conv1 ", "v_1abc",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_become_valid_identifiers(name):
    ident = c_identifier(name)
    assert VALID.match(ident), ident
    assert not is_reserved(ident)
    assert len(ident) <= 220
    assert c_identifier(name) == ident  # deterministic: it feeds cache keys


def test_readable_names_are_kept():
    for name in ["x", "conv1", "matmul_f32", "A_tile", "v_1abc"]:
        assert c_identifier(name) == name


def test_distinct_hostile_names_stay_distinct():
    idents = [c_identifier(n) for n in HOSTILE]
    assert len(set(idents)) == len(set(HOSTILE))


def test_keywords_and_leading_digits_are_fixed():
    assert c_identifier("int") not in C_KEYWORDS
    assert c_identifier("1abc")[0].isalpha()
    assert c_identifier("1abc") != c_identifier("v_1abc")


def test_rejects_non_strings():
    with pytest.raises(TypeError):
        c_identifier(3)  # type: ignore[arg-type]


@given(st.text())
def test_any_text_is_valid(name):
    ident = c_identifier(name)
    assert VALID.match(ident) and not is_reserved(ident)


@given(st.lists(st.text(max_size=8), max_size=40))
def test_scope_hands_out_unique_valid_names(hints):
    scope = NameScope()
    names = [scope.unique(h) for h in hints]
    assert len(set(names)) == len(names)
    assert all(VALID.match(n) and not is_reserved(n) for n in names)


def test_scope_suffixes_and_reserved():
    scope = NameScope(reserved={"y"})
    assert [scope.unique("x"), scope.unique("x"), scope.unique("x")] == ["x", "x_1", "x_2"]
    assert scope.unique("y") == "y_1"
    assert scope.unique("x_1") == "x_1_1"  # x_1 was already handed out
    assert scope.unique("int") not in C_KEYWORDS
    assert scope.unique("__hidden").startswith("hidden")
    scope.reserve("z")
    assert "z" in scope and scope.unique("z") == "z_1"
