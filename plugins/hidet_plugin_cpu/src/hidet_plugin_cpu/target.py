"""The CPU `Target`: the facts CPU templates build their schedule spaces from.

Everything is read from the running machine (Linux: /proc/cpuinfo and sysfs) with
safe fallbacks elsewhere, because a wrong guess only costs speed, never correctness.
"""
from __future__ import annotations

import functools
import os
import platform

from hidet_framework.backend.contract import Target

__all__ = ["detect_cpu_target", "amx_permission", "read_cpu_flags", "vector_bits_from_flags", "read_cache_sizes", "forced_isa",
           "isa_compiler_flags", "ISA_ENV"]

# ``HIDET_FRAMEWORK_CPU_ISA=avx2`` builds AVX2 code on an AVX-512 machine (the target
# reports 256-bit vectors and no AVX-512/AMX flags, gcc gets -mno-avx512f -mno-amx-tile),
# to measure the AVX2 defaults without an AVX2 machine. Unset or "native": the machine.
# On a machine that has none of the dropped flags (an AVX2 machine) forcing changes
# nothing, not even the cache key: the code would be the same.
ISA_ENV = "HIDET_FRAMEWORK_CPU_ISA"
_FORCED = {"avx2": (("avx512", "amx"), ("-mno-avx512f", "-mno-amx-tile"))}


def forced_isa() -> str | None:
    value = os.environ.get(ISA_ENV, "").strip().lower()
    if value in ("", "native"):
        return None
    if value not in _FORCED:
        raise ValueError(f"{ISA_ENV}={value!r}: expected 'native' or one of {sorted(_FORCED)}")
    return value


def _restricting_isa(flags: tuple[str, ...]) -> str | None:
    """The forced ISA where it drops one of `flags`, else None (nothing to restrict)."""
    isa = forced_isa()
    if isa and any(f.startswith(_FORCED[isa][0]) for f in flags):
        return isa
    return None


def isa_compiler_flags() -> tuple[str, ...]:
    """gcc flags (after -march=native) that restrict code to the forced ISA; none where
    this machine has nothing the forced ISA leaves out."""
    isa = _restricting_isa(read_cpu_flags()[1])
    return _FORCED[isa][1] if isa else ()

# Conservative defaults for a modern core when sysfs says nothing.
DEFAULT_CACHE_BYTES = {"l1d_bytes": 32 * 1024, "l2_bytes": 512 * 1024, "l3_bytes": 8 * 1024 * 1024}

_ARCH_NAMES = {"x86_64": "x86-64", "amd64": "x86-64", "aarch64": "aarch64", "arm64": "aarch64"}


def read_cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> tuple[str, tuple[str, ...]]:
    """(model name, sorted ISA flags) of the first processor listed; x86 calls them
    ``flags``, ARM ``Features``. Empty when the file is unreadable."""
    model, flags = "", ()
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    if flags:
                        break  # end of the first processor's block
                    continue
                key = key.strip().lower()
                if key in ("model name", "cpu model") and not model:
                    model = value.strip()
                elif key in ("flags", "features") and not flags:
                    flags = tuple(sorted(set(value.split())))
    except OSError:
        pass
    return model, flags


def vector_bits_from_flags(flags: tuple[str, ...] | set[str]) -> int:
    """Widest SIMD register the code generator may use, in bits."""
    flags = set(flags)
    if "avx512f" in flags:
        return 512
    if "avx2" in flags or "avx" in flags:
        return 256
    return 128  # sse2 on x86-64, NEON on aarch64, and a safe guess elsewhere


def _parse_size(text: str) -> int | None:
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
    digits = text.rstrip("KMGB")
    return int(digits) * scale if digits.isdigit() else None


def read_cache_sizes(sysfs_dir: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """Per-core L1 data, L2 and L3 (per cache instance) sizes in bytes, from sysfs."""
    sizes = dict(DEFAULT_CACHE_BYTES)
    try:
        entries = sorted(e for e in os.listdir(sysfs_dir) if e.startswith("index"))
    except OSError:
        return sizes
    for entry in entries:
        def read(name: str) -> str:
            try:
                with open(os.path.join(sysfs_dir, entry, name)) as f:
                    return f.read().strip()
            except OSError:
                return ""
        level, kind, size = read("level"), read("type"), _parse_size(read("size"))
        if size is None:
            continue
        if level == "1" and kind in ("Data", "Unified"):
            sizes["l1d_bytes"] = size
        elif level == "2":
            sizes["l2_bytes"] = size
        elif level == "3":
            sizes["l3_bytes"] = size
    return sizes


def usable_cores() -> int:
    """Cores this process may run on (affinity / cgroup cpusets), not the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# Linux gives a process the AMX tile data state (XFEATURE_XTILEDATA, 18) only on request:
# arch_prctl(ARCH_REQ_XCOMP_PERM, 18); until then the first tile instruction raises SIGILL.
# The permission is per process (all its threads, inherited on fork), and the kernels run
# in this process, so the target reports AMX flags only where the request succeeded.
_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18


@functools.lru_cache(maxsize=None)
def amx_permission() -> bool:
    """Whether this process may use AMX tiles: asks Linux (x86-64) once; False on any
    failure (an older kernel, another OS, a seccomp filter, no libc through ctypes)."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        return libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM),
                            ctypes.c_long(_XFEATURE_XTILEDATA)) == 0
    except (OSError, AttributeError, TypeError):
        return False


@functools.lru_cache(maxsize=None)
def detect_cpu_target() -> Target:
    """This machine's CPU target (read once per process)."""
    machine = platform.machine().lower()
    model, flags = read_cpu_flags()
    isa = _restricting_isa(flags)
    if isa:
        dropped = _FORCED[isa][0]
        flags = tuple(f for f in flags if not f.startswith(dropped))
        model = f"{model} [forced {isa}]"
    if any(f.startswith("amx") for f in flags) and not amx_permission():
        flags = tuple(f for f in flags if not f.startswith("amx"))   # refused: no AMX kernels
        model = f"{model} [amx not permitted]"
    props = {
        "cores": usable_cores(),
        "vector_bits": vector_bits_from_flags(flags),
        "fma": "fma" in flags or machine in ("aarch64", "arm64"),  # FMA is baseline on ARMv8
        **read_cache_sizes(),
        # The full flag list (not just the few above) goes into the fingerprint, because
        # -march=native may use any of them: an artifact built here can raise SIGILL on a
        # CPU lacking one, e.g. when ~/.cache is on a home directory shared by a cluster.
        "flags": flags,
        "model": model,
    }
    return Target(kind="cpu", arch=_ARCH_NAMES.get(machine, machine or "unknown"), properties=props)
