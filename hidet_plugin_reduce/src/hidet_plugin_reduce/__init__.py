"""hidet-plugin-reduce: reductions (sum, mean, max, min, prod, l2, sum of squares,
argmax/argmin, cumsum), softmax and the normalizations (layer, RMS, batch, instance,
group), with CPU and CUDA templates written with task mappings.

Operators reach users as ``hidet_framework.ops.<name>`` through the operator registry;
the templates compete in the tuner like the matmul ones, and anything they do not
cover (a reduction over axes that are not one block, a softmax over a non-innermost
axis on the CPU...) is scheduled by the core's auto-scheduler.
"""
from __future__ import annotations

from typing import Callable

from hidet_framework.extension import hookimpl

from . import normalization, reductions


def operators() -> dict[str, Callable]:
    """Every operator this plugin registers, by name."""
    table = dict(reductions.OPERATORS)
    for name, fn in normalization.OPERATORS.items():
        if name in table:
            raise RuntimeError(f"operator {name!r} is defined twice in hidet_plugin_reduce")
        table[name] = fn
    return table


@hookimpl
def register_operators(register) -> None:
    for name, fn in operators().items():
        register(name, fn)


@hookimpl
def register_templates(register) -> None:
    # Imported here so the operators stay importable even if a template module breaks.
    from .cpu_template import CpuRowTemplate
    from .row_access import FAMILIES

    for operator in FAMILIES:
        register(f"reduce.cpu.{operator}", CpuRowTemplate(operator))
    from .cuda_template import cuda_templates

    for name, template in cuda_templates().items():
        register(name, template)
