"""hidet-plugin-cpu: the ``cpu`` target (C + OpenMP, gcc, ctypes).

Importing this package must stay cheap and must not fail on a machine without gcc:
the plugin manager imports every plugin at start. Only the backend object is built
here; the toolchain is probed lazily by ``CpuBackend.availability()``.
"""
from __future__ import annotations

from hidet_framework.extension import hookimpl

from .backend import CpuBackend

__all__ = ["CpuBackend", "register_backends"]
__version__ = "0.1.0"


@hookimpl
def register_backends(register) -> None:
    """Register the CPU backend under the name ``cpu``."""
    register("cpu", CpuBackend())
