"""Mistakes are reported as ScriptError at the user's file and line, saying what is wrong."""
from __future__ import annotations

import pytest

from hidet_framework.lang import ScriptError, attrs, f32, i32, script, shared_tensor, static_range

THIS_FILE = __file__


def line_of(marker: str) -> int:
    """The line of this file that carries the comment `# marker`."""
    with open(THIS_FILE) as f:
        for k, text in enumerate(f, 1):
            if text.rstrip().endswith("# " + marker):
                return k
    raise AssertionError(f"marker {marker} not found")


def check(exc_info: pytest.ExceptionInfo, marker: str, *phrases: str) -> None:
    err = exc_info.value
    assert err.filename == THIS_FILE and err.lineno == line_of(marker), str(err)
    text = str(err)
    assert f'"{THIS_FILE}", line {line_of(marker)}' in text
    assert marker in text  # the offending source line is shown
    for p in phrases:
        assert p in text, text


def test_lambda_is_rejected():
    with pytest.raises(ScriptError) as e:
        @script
        def f(a: f32[4]):
            g = lambda x: x  # E_LAMBDA
    check(e, "E_LAMBDA", "lambda is not allowed")


def test_with_try_and_comprehension_are_rejected():
    with pytest.raises(ScriptError) as e:
        @script
        def f(a: f32[4]):
            with open("x"):  # E_WITH
                pass
    check(e, "E_WITH", "`with` is not allowed")

    with pytest.raises(ScriptError) as e:
        @script
        def g(a: f32[4]):
            try:  # E_TRY
                pass
            finally:
                pass
    check(e, "E_TRY", "`try` is not allowed")

    with pytest.raises(ScriptError) as e:
        @script
        def h(a: f32[4]):
            xs = [i for i in range(3)]  # E_COMP
    check(e, "E_COMP", "list comprehension is not allowed")


def test_undefined_name():
    with pytest.raises(ScriptError) as e:
        @script
        def f(a: f32[4]):
            a[0] = not_defined_anywhere  # E_UNDEF
    check(e, "E_UNDEF", "'not_defined_anywhere' is not defined")


def test_assigning_a_different_type():
    with pytest.raises(ScriptError) as e:
        @script
        def f(a: f32[4]):
            k = 0
            k = a[0]  # E_TYPE
    check(e, "E_TYPE", "type float32", "type int32", "cast(")


def test_float_literal_into_int_variable():
    with pytest.raises(ScriptError) as e:
        @script
        def f(n: i32):
            n = 2.5  # E_TRUNC
    check(e, "E_TRUNC", "truncated")


def test_wrong_number_of_arguments():
    @script
    def callee(x: f32, y: f32) -> f32:
        return x + y

    with pytest.raises(ScriptError) as e:
        @script
        def f(a: f32[4]):
            a[0] = callee(a[1])  # E_ARGS
    check(e, "E_ARGS", "callee() takes 2 argument(s), got 1")


def test_tensor_annotation_with_non_int_shape():
    with pytest.raises(ScriptError) as e:
        @script
        def f(a: f32[2.5, 4]):  # E_SHAPE
            pass
    check(e, "E_SHAPE", "shape entries must be ints")


def test_missing_annotation_and_wrong_rank():
    with pytest.raises(ScriptError) as e:
        @script
        def f(a):  # E_NOANN
            pass
    check(e, "E_NOANN", "needs a type annotation")

    with pytest.raises(ScriptError) as e:
        @script
        def g(a: f32[4, 4]):
            a[1] = 0.0  # E_RANK
    check(e, "E_RANK", "rank 2")


def test_assigning_to_a_loop_variable_and_variable_out_of_its_block():
    with pytest.raises(ScriptError) as e:
        @script
        def f(a: f32[4]):
            for i in range(4):
                i = 3  # E_LOOPVAR
    check(e, "E_LOOPVAR", "loop variable")

    with pytest.raises(ScriptError) as e:
        @script
        def g(a: f32[4]):
            for i in range(4):
                t = a[i]
            a[0] = t  # E_SCOPE
    check(e, "E_SCOPE", "'t' is not defined")


def test_bad_function_attributes_and_static_assert():
    with pytest.raises(ScriptError) as e:
        @script
        def f(a: f32[4]):
            attrs.func_kind = "gpu"  # E_KIND
    check(e, "E_KIND", "attrs.func_kind must be one of")

    with pytest.raises(ScriptError) as e:
        @script
        def g(a: f32[4]):
            attrs.cuda.block_size = 4  # E_ATTR
    check(e, "E_ATTR", "unknown attribute attrs.cuda.block_size")

    block = 48
    with pytest.raises(ScriptError) as e:
        @script
        def h(a: f32[4]):
            assert block % 32 == 0, f"block {block} is not a multiple of 32"  # E_STATIC
    check(e, "E_STATIC", "static assertion failed: block 48 is not a multiple of 32")


def test_misc_rejections():
    with pytest.raises(ScriptError) as e:
        @script
        def f(a: f32[4]):
            for s in static_range(2):
                break  # E_BREAK
    check(e, "E_BREAK", "unrolled at trace time")

    with pytest.raises(ScriptError) as e:
        @script
        def g(a: f32[4]):
            shared_tensor(f32, [4])  # E_DECL
    check(e, "E_DECL", "needs a name")

    with pytest.raises(ScriptError) as e:
        @script
        def h(a: f32[4]):
            x = range(4)  # E_RANGE
    check(e, "E_RANGE", "range() is only allowed")

    with pytest.raises(ScriptError) as e:
        @script
        def k(a: f32[4]):
            a[0] = a[1] ** 2  # E_POW
    check(e, "E_POW", "Pow is not supported")

    def helper(x):
        raise ValueError("helper refuses")

    with pytest.raises(ScriptError) as e:
        @script
        def m(a: f32[4]):
            a[0] = helper(1)  # E_HELPER
    check(e, "E_HELPER", "calling helper failed", "helper refuses")
