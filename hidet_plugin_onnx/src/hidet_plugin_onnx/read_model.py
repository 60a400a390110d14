"""Reading an ONNX model: the file, its external data, and the opset check.

Every problem gives one `OnnxImportError` naming the file and what is wrong: a
missing, truncated or non-ONNX file, a missing or short external-data file, an opset
outside the supported range.
"""
from __future__ import annotations

import os
from typing import Any

from .errors import OnnxImportError
from .names import shown

MIN_OPSET, MAX_OPSET = 13, 21
DEFAULT_DOMAINS = ("", "ai.onnx")


def read_model(source: Any) -> tuple[Any, str | None]:
    """(ModelProto with its external data loaded, the folder it came from or None)."""
    import onnx

    if isinstance(source, onnx.ModelProto):
        _check_is_model(source, "the model")
        _load_external_data(source, None, "the model")
        return source, None
    path = os.fspath(source)
    if not os.path.exists(path):
        raise OnnxImportError(f"{path}: no such file")
    if os.path.isdir(path):
        raise OnnxImportError(f"{path}: is a folder, not an ONNX file")
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise OnnxImportError(f"{path}: the file is empty, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError, or an error from the C++ parser
        raise OnnxImportError(f"{path}: not an ONNX model, or a truncated one (protobuf could not parse "
                              f"{len(data)} bytes: {type(exc).__name__})") from None
    _check_is_model(model, path)
    _load_external_data(model, os.path.dirname(os.path.abspath(path)), path)
    return model, os.path.dirname(os.path.abspath(path))


def _check_is_model(model: Any, where: str) -> None:
    # A protobuf parse succeeds on many byte strings: an ONNX model also names its IR
    # version and the opsets it imports.
    if model.ir_version <= 0 or not len(model.opset_import) or not model.HasField("graph"):
        raise OnnxImportError(f"{where}: not an ONNX model (no IR version, opset imports or graph; "
                              f"is the file truncated or in another format?)")


def default_opset(model: Any, where: str = "the model") -> int:
    """The default-domain opset, checked against the supported range. An older or a
    newer opset is accepted; its nodes are then checked one by one
    (`op_changed_since_supported`): each must mean what it does at opsets 13 to 21."""
    import onnx.defs

    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        raise OnnxImportError(f"{where}: imports no default-domain (ai.onnx) opset")
    version = int(versions[0])
    if not 1 <= version <= max(MAX_OPSET, onnx.defs.onnx_opset_version()):
        raise OnnxImportError(f"{where}: opset {version} is not supported (supported: {MIN_OPSET} to "
                              f"{MAX_OPSET}; onnx.version_converter can convert the model)")
    return version


def _attributes(schema: Any) -> dict:
    return {name: (int(a.type), a.required, a.default_value.SerializeToString()) for name, a in schema.attributes.items()}


def _params(ps: Any) -> tuple:
    return tuple((p.name, int(p.option)) for p in ps)


def op_changed_since_supported(node: Any, opset: int) -> str | None:
    """For a model newer than opset MAX_OPSET: why `node` may mean something else than
    it did at MAX_OPSET. None when the op's inputs and outputs are the same, its old
    attributes are unchanged, and the node sets none of the attributes added since
    (later revisions that only widened the element types, which are checked on their
    own, or added an attribute this node leaves at its default)."""
    import onnx.defs

    op_type = node.op_type
    if opset < MIN_OPSET:
        try:
            old, current = onnx.defs.get_schema(op_type, opset), onnx.defs.get_schema(op_type, MIN_OPSET)
        except Exception:
            return f"{op_type} is not defined at opset {opset}"
        if old.since_version != current.since_version:
            return (f"{op_type} at opset {opset} is its form of opset {old.since_version}, older than the one "
                    f"supported (opsets {MIN_OPSET} to {MAX_OPSET}); onnx.version_converter can convert the model")
        return None
    if opset <= MAX_OPSET:
        return None
    try:
        new = onnx.defs.get_schema(op_type, opset)
    except Exception:
        return f"{op_type} is not defined at opset {opset}"
    if new.since_version <= MAX_OPSET:
        return None
    try:
        old = onnx.defs.get_schema(op_type, MAX_OPSET)
    except Exception:
        return f"{op_type} is newer than opset {MAX_OPSET} (supported: {MIN_OPSET} to {MAX_OPSET})"
    old_attrs, new_attrs = _attributes(old), _attributes(new)
    added = set(new_attrs) - set(old_attrs)
    used = {a.name for a in node.attribute}
    same = (_params(old.inputs) == _params(new.inputs) and _params(old.outputs) == _params(new.outputs)
            and all(new_attrs.get(n) == a for n, a in old_attrs.items()) and not (added & used))
    if not same:
        return (f"{op_type} changed at opset {new.since_version} (attributes, inputs or outputs); "
                f"supported: its form at opsets {MIN_OPSET} to {MAX_OPSET}")
    return None


def _external_tensors(model: Any) -> list:
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    return [t for t in _get_all_tensors(model) if uses_external_data(t)]


def _load_external_data(model: Any, base_dir: str | None, where: str) -> None:
    tensors = _external_tensors(model)
    if not tensors:
        return
    for t in tensors:
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        if base_dir is None:
            raise OnnxImportError(f"{where}: initializer {shown(t.name)} keeps its data in the external file "
                                  f"{shown(location)}; load the model from its file path (or with "
                                  f"onnx.load) so the data can be found")
        if not location or os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
            raise OnnxImportError(f"{where}: initializer {shown(t.name)} names the external data file "
                                  f"{shown(location)}, which is not a path inside the model's folder")
        file = os.path.join(base_dir, location)
        if not os.path.isfile(file):
            raise OnnxImportError(f"{where}: initializer {shown(t.name)} needs the external data file "
                                  f"{file}, which does not exist")
        offset, length = int(info.get("offset", 0) or 0), info.get("length")
        size = os.path.getsize(file)
        if length is not None and offset + int(length) > size:
            raise OnnxImportError(f"{where}: initializer {shown(t.name)} reads bytes {offset}..{offset + int(length)} "
                                  f"of {file}, which has only {size} bytes (truncated?)")
    from onnx.external_data_helper import load_external_data_for_model

    try:
        load_external_data_for_model(model, base_dir)
    except Exception as exc:
        raise OnnxImportError(f"{where}: could not read external data: {type(exc).__name__}: {exc}") from None
