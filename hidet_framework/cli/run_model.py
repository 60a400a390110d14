"""``hidet-framework run MODEL|DIR`` and ``hidet-framework compile MODEL --out DIR``:
load a model through its frontend, compile it (with progress), run it on given or
random inputs, and report latency, compile time, launches and fusion; ``--check``
compares with onnxruntime (or onnx's reference evaluator)."""
from __future__ import annotations

import os
import sys
import time
from typing import Any

import click
import numpy as np

from .model_check import check_against_reference, describe_outputs, input_arrays, parse_input_shapes

_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


def _say(message: str) -> None:
    click.echo(message, err=True)


def _options(fn):
    for option in reversed([
        click.option("--target", default="auto", type=click.Choice(["auto", "cpu", "cuda"]),
                     help="Where to run: auto picks cuda when usable, else cpu."),
        click.option("--space", default=None, type=click.IntRange(0, 2),
                     help="Tuning effort: 0 one default candidate, 1 ~30, 2 the full space."),
        click.option("--dtype", default="float32", type=click.Choice(["float32", "float16", "bfloat16"]),
                     help="Float type the model computes in (weights and float inputs converted)."),
        click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=1x3x224x224",
                     help="Static shape of an input with symbolic dimensions (repeatable)."),
    ]):
        fn = option(fn)
    return fn


def _load_and_compile(model: str, target: str, space: int | None, dtype: str, input_shapes: tuple) -> tuple:
    import hidet_framework as hf

    shapes = parse_input_shapes(input_shapes)
    start = time.perf_counter()
    _say(f"loading {model}")
    graph = hf.load(model, input_shapes=shapes)
    loaded = time.perf_counter()
    from hidet_framework.driver import resolve_target

    _say(f"  {len(graph.nodes)} operators, {len(graph.inputs)} inputs, {len(graph.outputs)} outputs "
         f"({loaded - start:.1f} s); compiling for {resolve_target(target)}")
    # --dtype float16/bfloat16: the graph pass of hf.compile converts weights and
    # activations (graph/passes/convert_float_dtype.py)
    fn = hf.compile(graph, target=target, space=space, dtype=None if dtype == "float32" else dtype)
    return fn, loaded - start, time.perf_counter() - loaded


def _fusion_summary(fn: Any) -> str:
    report = getattr(fn, "fusion_report", None)
    if report is None:
        return "n/a (loaded from a saved model)"
    rows = report()
    counts = {s: sum(1 for r in rows if r.status == s) for s in ("fused", "separate", "single")}
    return (f"{counts['fused']} fused kernels, {counts['single']} lone operators, "
            f"{counts['separate']} groups that fell back to one kernel per operator")


@click.command()
@click.argument("model", type=click.Path(exists=True))
@_options
@click.option("--inputs", "inputs_file", type=click.Path(exists=True, dir_okay=False),
              help="A .npz file with the inputs (by input name, or arr_0, arr_1 ... in order).")
@click.option("--check", is_flag=True, help="Compare with onnxruntime (or onnx.reference) and print the error.")
@click.option("--bench", default=0, type=click.IntRange(0), metavar="N", help="Time N runs (median and p90).")
@click.option("--save", "save_dir", type=click.Path(file_okay=False), help="Save the compiled model to DIR.")
def run(model: str, target: str, space: int | None, dtype: str, input_shapes: tuple, inputs_file: str | None,
        check: bool, bench: int, save_dir: str | None) -> None:
    """Compile MODEL (a .onnx file) or load DIR (saved by `compile`), then run it."""
    import hidet_framework as hf

    try:
        if os.path.isdir(model):
            _refuse_compile_options(model)
            start = time.perf_counter()
            fn = hf.load_compiled(model)
            _refuse_other_target(model, target, fn.target)
            _say(f"loaded the compiled model {model} ({time.perf_counter() - start:.1f} s, nothing compiled)")
            source, load_s, compile_s = _saved_source(model), 0.0, 0.0
            specs = [(n, s, d) for n, s, d in fn.inputs]
        else:
            fn, load_s, compile_s = _load_and_compile(model, target, space, dtype, input_shapes)
            source = model
            specs = [(t.name, t.shape, t.dtype.name) for t in fn.graph.inputs]
        arrays = input_arrays(specs, inputs_file, model if not os.path.isdir(model) else source)
        outputs = fn(*arrays)
        outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
        graph = getattr(fn, "graph", None)
        if graph is not None:  # bfloat16 comes back as uint16 bits: show and check values
            outputs = [_values(o, t.dtype.name) for o, t in zip(outputs, graph.outputs)]
    except (ValueError, TypeError, LookupError, RuntimeError, OSError) as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    click.echo(f"target: {fn.target}   compile: {compile_s:.1f} s (load {load_s:.1f} s)   "
               f"kernel launches: {fn.num_launches}")
    click.echo(f"fusion: {_fusion_summary(fn)}")
    click.echo(describe_outputs(outputs))
    if bench:
        times = sorted(_time(fn, arrays, bench))
        median, p90 = times[len(times) // 2], times[min(len(times) - 1, int(0.9 * len(times)))]
        click.echo(f"latency over {bench} runs: median {median * 1e3:.3f} ms, p90 {p90 * 1e3:.3f} ms")
    failed = False
    if check:
        if source is None:
            raise click.ClickException("--check needs the source model; this saved model does not name one "
                                       "that exists")
        reference_name, errors = check_against_reference(source, specs, arrays, outputs)
        # a saved half-precision model is checked at its own type's tolerance
        half = [d for _, _, d in specs if d in ("float16", "bfloat16")]
        tolerance = _TOLERANCE[half[0] if half and dtype == "float32" else dtype]
        for k, err in enumerate(errors):
            ok = err <= tolerance
            failed |= not ok
            click.echo(f"check vs {reference_name}: output {k} max relative error {err:.3e} "
                       f"({'ok' if ok else 'MISMATCH'}, tolerance {tolerance:g})")
    if save_dir:
        _save(fn, save_dir, source)
    if failed:
        sys.exit(1)


# A saved model is compiled already: options that only steer compiling cannot apply to
# it, and ignoring them would run something other than what the user asked for.
_COMPILE_ONLY = {"space": "--space", "dtype": "--dtype", "input_shapes": "--input-shape"}


def _refuse_compile_options(folder: str) -> None:
    context = click.get_current_context()
    given = [flag for name, flag in _COMPILE_ONLY.items()
             if context.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(
            f"{', '.join(given)} cannot change {folder}: it is a saved model, compiled already. "
            f"Compile the .onnx file again with the option instead (hidet-framework compile MODEL.onnx ... "
            f"--out DIR).")


def _refuse_other_target(folder: str, asked: str, compiled_for: Any) -> None:
    if asked != "auto" and asked != str(compiled_for):
        raise click.UsageError(f"{folder} was compiled for {compiled_for}; --target {asked} needs the .onnx "
                               f"file compiled again (hidet-framework compile MODEL.onnx --target {asked} "
                               f"--out DIR).")


def _values(array: np.ndarray, dtype: str) -> np.ndarray:
    if dtype != "bfloat16":
        return array
    import ml_dtypes

    return np.asarray(array).view(ml_dtypes.bfloat16)


def _time(fn: Any, arrays: list, n: int) -> list[float]:
    fn(*arrays)  # warm-up
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn(*arrays)
        times.append(time.perf_counter() - start)
    return times


def _saved_source(folder: str) -> str | None:
    import json

    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            source = json.load(f).get("source")
    except (OSError, ValueError):
        return None
    return source if source and os.path.isfile(source) else None


def _save(fn: Any, folder: str, source: str | None) -> None:
    from hidet_framework.runtime.saved_graph import save_compiled

    try:
        save_compiled(fn, folder, source=os.path.abspath(source) if source else None)
    except (ValueError, OSError) as exc:
        raise click.ClickException(f"cannot save: {exc}") from None
    click.echo(f"saved the compiled model to {folder} (run it with: hidet-framework run {folder})")


@click.command("compile")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@_options
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder to save the compiled model in (must not exist or be empty).")
def compile_model(model: str, target: str, space: int | None, dtype: str, input_shapes: tuple, out_dir: str) -> None:
    """Compile MODEL and save it to --out DIR, for `hidet-framework run DIR`."""
    try:
        fn, load_s, compile_s = _load_and_compile(model, target, space, dtype, input_shapes)
    except (ValueError, TypeError, LookupError, RuntimeError, OSError) as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    click.echo(f"target: {fn.target}   compile: {compile_s:.1f} s   kernel launches: {fn.num_launches}")
    _save(fn, out_dir, model)
