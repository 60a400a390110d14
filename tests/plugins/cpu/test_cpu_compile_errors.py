"""Compile errors show gcc's message, the offending generated lines, and the IR function."""
from __future__ import annotations

import os

import pytest

from hidet_plugin_cpu.build import CompileError

BROKEN = """#include <stdint.h>
/* hidet function: fine_one */
void fine_one(float *x) {
    x[0] = 1.0f;
}

/* hidet function: broken_kernel */
void broken_kernel(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = undefined_variable * 2.0f;
    }
}
"""


def test_compile_error_shows_lines_and_function(cpu_backend, isolated_build_cache):
    with pytest.raises(CompileError) as info:
        cpu_backend.build(BROKEN, cpu_backend.detect_target())
    err = info.value
    text = str(err)
    assert "undefined_variable" in text and "error" in text  # gcc's own message
    assert "generated source line 10 in hidet function 'broken_kernel'" in text
    assert ">" in text and "10 |         x[i] = undefined_variable * 2.0f;" in text
    assert "   7 | /* hidet function: broken_kernel */" in text or " 7 | /* hidet function" in text
    assert err.errors[0] == (10, "broken_kernel")
    # nothing was cached for the broken source
    builds = isolated_build_cache / "builds"
    assert not [d for d in os.listdir(builds) if len(d) == 2]


def test_compile_error_without_markers_has_no_function_name(cpu_backend):
    with pytest.raises(CompileError) as info:
        cpu_backend.build("void f(void) { return 1 }\n", cpu_backend.detect_target())
    assert info.value.errors and info.value.errors[0][1] is None
    assert "generated source line 1:" in str(info.value)
