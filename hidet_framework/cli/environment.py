"""``hidet-framework env`` (what this machine offers the compiler) and
``hidet-framework cache info|clear``."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import click


def _first_line(command: list[str]) -> str | None:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if out.returncode == 0 and text else None


def _openmp(cc: str) -> str:
    try:
        out = subprocess.run([cc, "-fopenmp", "-x", "c", "-E", "-dM", "-"], input="", capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    for line in out.stdout.splitlines():
        if "_OPENMP" in line:
            return f"yes (_OPENMP {line.split()[-1]})"
    return "no (gcc -fopenmp does not define _OPENMP)"


def _folder_size(path: str) -> tuple[int, int]:
    total = files = 0
    for root, _, names in os.walk(path):
        for n in names:
            try:
                total += os.path.getsize(os.path.join(root, n))
                files += 1
            except OSError:
                pass
    return total, files


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{n} B"
        value /= 1024
    return f"{n} B"


@click.command()
def env() -> None:
    """Python, compilers, CPU vector width and cores, CUDA, and the cache."""
    import hidet_framework
    from hidet_framework.backend.build_cache import cache_root
    from hidet_framework.extension import MissingBackendError, plugin_host

    rows = [("python", f"{platform.python_version()} ({sys.executable})"),
            ("hidet-framework", hidet_framework.__version__)]
    cc = os.environ.get("CC", "gcc")
    rows.append(("C compiler", _first_line([cc, "--version"]) or f"{cc}: not found (the cpu target needs it)"))
    if shutil.which(cc):
        rows.append(("OpenMP", _openmp(cc)))
    nvcc = shutil.which("nvcc")
    rows.append(("nvcc", (_first_line([nvcc, "--version"]) and nvcc) if nvcc else "not found"))
    host = plugin_host()
    for kind in ("cpu", "cuda"):
        try:
            backend = host.backend_for(kind)
        except MissingBackendError as exc:
            rows.append((kind, f"no backend: {exc}"))
            continue
        availability = backend.availability()
        if kind == "cpu" and availability:
            t = backend.detect_target()
            flags = set(t.get("flags", ()))
            isa = ", ".join(f for f in ("avx512f", "avx2", "fma", "amx_tile", "neon") if f in flags) or "baseline"
            rows.append(("cpu", f"{t.arch}, {t.get('cores')} cores, {t.get('vector_bits')}-bit vectors ({isa})"))
        elif kind == "cuda" and availability:
            t = backend.detect_target()
            rows.append(("cuda", f"usable: {t.arch}, {t.get('sm_count')} SMs"))
        else:
            rows.append((kind, f"not usable here: {availability.reason}"))
    root = cache_root()
    size, files = _folder_size(root) if os.path.isdir(root) else (0, 0)
    rows.append(("cache", f"{root} ({_human(size)} in {files} files)"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")


@click.group()
def cache() -> None:
    """The build and tuning cache ($HIDET_FRAMEWORK_CACHE)."""


@cache.command("info")
def cache_info() -> None:
    """Where the cache is and what it holds."""
    from hidet_framework.backend.build_cache import cache_root

    root = cache_root()
    if not os.path.isdir(root):
        click.echo(f"{root}: empty (not created yet)")
        return
    size, files = _folder_size(root)
    click.echo(f"{root}: {_human(size)} in {files} files")
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isdir(path):
            s, n = _folder_size(path)
            click.echo(f"  {name:<20} {_human(s):>10} {n:>7} files")


@cache.command("clear")
def cache_clear() -> None:
    """Delete every cached build and tuning record."""
    from hidet_framework.backend.build_cache import cache_root

    root = cache_root()
    if not os.path.isdir(root):
        click.echo(f"{root}: nothing to clear")
        return
    size, files = _folder_size(root)
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    click.echo(f"cleared {root}: {_human(size)} in {files} files")
