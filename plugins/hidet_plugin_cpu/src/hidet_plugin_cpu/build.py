"""Build generated C source into a shared library with gcc, through the build cache.

Compile errors in generated code are bugs in a code generator or a template, and the
raw gcc message (``source.c:812:13: error: ...``) is useless without the source in
front of you: :class:`CompileError` shows the offending generated lines with context
and, when the code generator marks each function with ``/* hidet function: NAME */``,
the IR function the error is in.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess

from hidet_framework.backend.build_cache import BuildCache
from hidet_framework.backend.c_style import function_at, source_excerpt

from .target import detect_cpu_target, isa_compiler_flags
from .vector_math import available_vector_functions, link_flags

__all__ = ["CFLAGS", "LDFLAGS", "CompileError", "CompilerTimeout", "compiler_identity", "build_shared_library",
           "compiler_timeout"]

COMPILER = os.environ.get("HIDET_FRAMEWORK_CC", "gcc")
TIMEOUT_ENV = "HIDET_FRAMEWORK_CC_TIMEOUT"
# A build holds its key's lock; a compiler that never returns would hold it forever.
# Generous: the largest generated sources take about a minute on a loaded 2-core box.
DEFAULT_TIMEOUT_S = 900.0
# -std=c11 (ISO mode) turns floating-point contraction off, so `acc + a * b` would stay a
# multiply and an add; -ffp-contract=fast lets gcc emit FMA instructions (one rounding,
# twice the throughput), as every BLAS does. -fno-math-errno lets gcc vectorize calls of
# libm functions (see vector_math.py); generated code never reads errno.
# -fno-trapping-math: generated code never reads the floating-point exception flags
# either, and without the flag gcc keeps the clamps of vector_math's own erf and tanh
# (``t > 3.92f ? 3.92f : t``) as branches for AVX2, which leaves their loops scalar
# (AVX-512 if-converts them with masks); no value changes.
CFLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c11", "-ffp-contract=fast",
                           "-fno-math-errno", "-fno-trapping-math")
LDFLAGS: tuple[str, ...] = ("-lm",)  # plus -lmvec where this machine has it: linker_flags()
SOURCE_NAME = "source.c"
CONTEXT_LINES = 3
_MAX_ERRORS_SHOWN = 5
_DIAGNOSTIC = re.compile(r"^(?:.*/)?" + re.escape(SOURCE_NAME) + r":(\d+):(?:\d+:)?\s*(fatal error|error)\b", re.M)


class CompileError(RuntimeError):
    """gcc rejected generated source. Attributes: `compiler_output` (raw stderr),
    `source`, `command`, and `errors`: ``(line, function name or None)`` per error."""

    def __init__(self, compiler_output: str, source: str, command: list[str]) -> None:
        self.compiler_output = compiler_output
        self.source = source
        self.command = command
        self.errors: list[tuple[int, str | None]] = []
        lines = source.splitlines()
        seen: set[int] = set()
        for match in _DIAGNOSTIC.finditer(compiler_output):
            line = int(match.group(1))
            if line not in seen:
                seen.add(line)
                self.errors.append((line, function_at(lines, line)))
        super().__init__(self._message(lines))

    def _message(self, lines: list[str]) -> str:
        parts = [f"C compilation failed: {' '.join(self.command)}", "", self.compiler_output.rstrip()]
        for line, func in self.errors[:_MAX_ERRORS_SHOWN]:
            where = f" in hidet function {func!r}" if func else ""
            parts += ["", f"generated source line {line}{where}:", source_excerpt(lines, line, CONTEXT_LINES)]
        if len(self.errors) > _MAX_ERRORS_SHOWN:
            parts.append(f"\n... and {len(self.errors) - _MAX_ERRORS_SHOWN} more error line(s)")
        return "\n".join(parts)


class CompilerTimeout(RuntimeError):
    """The C compiler ran past its time limit (``HIDET_FRAMEWORK_CC_TIMEOUT``)."""


def compiler_timeout() -> float:
    """Seconds a compiler run may take: ``$HIDET_FRAMEWORK_CC_TIMEOUT`` or 900."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds")
    return value


@functools.lru_cache(maxsize=None)
def compiler_identity(compiler: str = COMPILER) -> str:
    """First line of ``<compiler> --version`` plus the resolved binary: part of every
    cache key so upgrading gcc never serves stale artifacts. Raises FileNotFoundError
    when the compiler is missing. Computed once per process."""
    path = shutil.which(compiler)
    if path is None:
        raise FileNotFoundError(f"C compiler {compiler!r} not found on PATH")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True, timeout=60)
    first = out.stdout.splitlines()[0] if out.stdout else ""
    return f"{first} ({os.path.realpath(path)})"


def isa_fingerprint() -> str:
    """What ``-march=native`` depends on: this machine's architecture and ISA flags.
    Not the whole Target: core counts differ between tuner workers pinned to different
    cpusets, and they should share artifacts (anything baked into code is in the source)."""
    target = detect_cpu_target()
    payload = json.dumps([target.arch, list(target.get("flags", ())), target.get("model", "")])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def linker_flags() -> tuple[str, ...]:
    """LDFLAGS and libmvec where the generated source may call its SIMD variants."""
    return LDFLAGS + link_flags(available_vector_functions(COMPILER))


def build_shared_library(source: str, *, name: str = "module", cache: BuildCache | None = None,
                         extra_flags: tuple[str, ...] = ()) -> tuple[str, bool]:
    """Compile `source` to a shared library; returns ``(path, cache_hit)``.

    A hit starts no process at all (the compiler identity is memoised per process).
    Raises :class:`CompileError` with the offending lines when gcc rejects the source.
    """
    cache = cache or BuildCache.default()
    flags = list(CFLAGS) + list(isa_compiler_flags()) + list(extra_flags)
    key_parts = {
        "backend": "cpu",
        "source": source,
        "flags": flags + list(linker_flags()),
        "compiler": compiler_identity(),
        "target": isa_fingerprint(),
    }

    def build(work_dir: str) -> str:
        src_path = os.path.join(work_dir, SOURCE_NAME)
        out_path = os.path.join(work_dir, "lib" + name_for_file(name) + ".so")
        with open(src_path, "w", encoding="utf-8") as f:
            f.write(source)
        # Run in work_dir with relative paths so diagnostics say "source.c:LINE:".
        command = [COMPILER, *flags, "-o", os.path.basename(out_path), SOURCE_NAME, *linker_flags()]
        # LC_ALL=C: plain ASCII quotes in diagnostics, whatever the user's locale.
        env = dict(os.environ, LC_ALL="C")
        limit = compiler_timeout()
        try:
            result = subprocess.run(command, cwd=work_dir, capture_output=True, text=True, env=env, timeout=limit)
        except subprocess.TimeoutExpired:  # run() has killed the compiler by now
            raise CompilerTimeout(
                f"{COMPILER} did not finish compiling {name!r} ({source.count(chr(10)) + 1} lines of C) within "
                f"{limit:g} s; raise {TIMEOUT_ENV} if the machine is just slow") from None
        if result.returncode != 0:
            raise CompileError(result.stderr or result.stdout, source, command)
        return out_path

    return cache.get_or_build(key_parts, build, suffix=".so", source_suffix=".c")


def name_for_file(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")[:64]
    return safe or "module"
