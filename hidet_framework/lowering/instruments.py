"""Pass instruments: observers a `PassContext` calls around every pass.

An instrument implements any of ``enter_pipeline(module, ctx)``,
``before_pass(pass_, module, ctx)``, ``after_pass(pass_, module, ctx)`` and
``exit_pipeline(module, ctx)``. Instruments never change the IR.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Optional, TextIO

from hidet_framework.ir.func import IRModule
from hidet_framework.ir.printer import format_ir


class TimingInstrument:
    """Records the seconds each pass took, in run order (a pass run twice appears
    twice). `report()` is a table with a total."""

    def __init__(self) -> None:
        self.records: list[tuple[str, float]] = []
        self._started: Optional[float] = None

    def before_pass(self, pass_: Any, module: IRModule, ctx: Any) -> None:
        self._started = time.perf_counter()

    def after_pass(self, pass_: Any, module: IRModule, ctx: Any) -> None:
        self.records.append((pass_.name, time.perf_counter() - self._started))

    def seconds(self, name: str) -> float:
        """Total seconds spent in passes called `name`."""
        return sum(s for n, s in self.records if n == name)

    def report(self) -> str:
        width = max([len("pass")] + [len(n) for n, _ in self.records])
        lines = [f"{'pass':<{width}}  {'ms':>10}", "-" * (width + 12)]
        lines += [f"{n:<{width}}  {s * 1e3:>10.3f}" for n, s in self.records]
        lines += ["-" * (width + 12), f"{'total':<{width}}  {sum(s for _, s in self.records) * 1e3:>10.3f}"]
        return "\n".join(lines)


class PrintAfter:
    """Prints the IR after the named passes (after every pass when none are named).

    :param pass_names: names of passes to print after.
    :param file: where to print; standard output by default.
    """

    def __init__(self, *pass_names: str, file: Optional[TextIO] = None) -> None:
        self.pass_names = set(pass_names)
        self.file = file

    def after_pass(self, pass_: Any, module: IRModule, ctx: Any) -> None:
        if not self.pass_names or pass_.name in self.pass_names:
            out = self.file if self.file is not None else sys.stdout
            print(f"# IR after {pass_.name}", file=out)
            print(format_ir(module), file=out)


class VerifyAfter:
    """Checks the IR is well formed before the pipeline and after every pass; a
    violation raises `IRVerificationError` naming the pass that introduced it."""

    def __init__(self) -> None:
        self._flattened = False  # from flatten_tensor_index on, one index per tensor access

    def enter_pipeline(self, module: IRModule, ctx: Any) -> None:
        from hidet_framework.lowering.verify_ir import verify_ir

        self._flattened = False
        verify_ir(module, after_pass="<input of the pipeline>")

    def after_pass(self, pass_: Any, module: IRModule, ctx: Any) -> None:
        from hidet_framework.lowering.verify_ir import verify_ir

        self._flattened = self._flattened or pass_.name == "flatten_tensor_index"
        verify_ir(module, after_pass=pass_.name, flattened=self._flattened)
