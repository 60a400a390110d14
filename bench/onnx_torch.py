"""The torch side of bench/models.py --target cuda: an ONNX graph evaluated node by
node with torch operations, as a torch.nn.Module that torch.compile can trace.

onnx2torch is not installed on the GPU machine (nor here), so the bench carries this
small evaluator instead. It covers the operators of the five benchmark models (Conv,
Gemm, MatMul, pooling, LayerNormalization, Softmax, Gather, Where, Split, ...) with
ONNX semantics; anything else raises NotImplementedError naming the operator. The
weights are the ONNX initializers themselves (buffers of the module), so torch and
hidet-framework run the same numbers. `to_half` converts float buffers the way
``hf.compile(dtype="float16")`` converts constants (finite values beyond float16's
range saturate at +-65504).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

_TORCH_DTYPES = {1: torch.float32, 2: torch.uint8, 3: torch.int8, 6: torch.int32, 7: torch.int64, 9: torch.bool,
                 10: torch.float16, 11: torch.float64, 16: torch.bfloat16}
# inputs that must be known at build time (shapes, axes, split sizes, clip bounds)
_STATIC_INPUTS = {"Reshape": (1,), "ReduceMean": (1,), "ReduceSum": (1,), "Split": (1,), "Unsqueeze": (1,),
                  "Squeeze": (1,), "Clip": (1, 2), "Expand": (1,)}


def _attributes(node: Any) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _pads2d(pads: list) -> tuple:
    """ONNX [top, left, bottom, right] -> (symmetric padding for torch, or None and
    the F.pad tuple)."""
    if not pads:
        return (0, 0), None
    top, left, bottom, right = pads
    if (top, left) == (bottom, right):
        return (top, left), None
    return (0, 0), (left, right, top, bottom)


class OnnxModule(torch.nn.Module):
    """``OnnxModule(model_proto)(*inputs)``: the graph's outputs (a tuple)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        from onnx import numpy_helper

        graph = model.graph
        self.consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.buffer_of: dict[str, str] = {}
        for k, (name, array) in enumerate(self.consts.items()):
            self.register_buffer(f"c{k}", torch.from_numpy(np.array(array)), persistent=False)
            self.buffer_of[name] = f"c{k}"
        self.float_dtype = torch.float32  # what Cast(to=FLOAT) means: the model's float type
        self.input_names = [i.name for i in graph.input if i.name not in self.consts]
        self.output_names = [o.name for o in graph.output]
        self.nodes = []
        for node in graph.node:
            attrs = _attributes(node)
            static = {k: self.consts[node.input[k]].tolist() for k in _STATIC_INPUTS.get(node.op_type, ())
                      if k < len(node.input) and node.input[k] in self.consts}
            if node.op_type == "Constant":
                value = numpy_helper.to_array(attrs["value"])
                self.register_buffer(f"k{len(self.nodes)}", torch.from_numpy(np.array(value)), persistent=False)
                static["buffer"] = f"k{len(self.nodes)}"
            self.nodes.append((node.op_type, list(node.input), list(node.output), attrs, static))

    def to_half(self) -> "OnnxModule":
        limit = float(torch.finfo(torch.float16).max)
        for name, buf in list(self.named_buffers()):
            if buf.dtype == torch.float32:
                finite = torch.isfinite(buf)
                setattr(self, name, torch.where(finite, buf.clamp(-limit, limit), buf).half())
        self.float_dtype = torch.float16
        return self

    def forward(self, *inputs: torch.Tensor) -> tuple:
        env: dict[str, Any] = {name: getattr(self, buf) for name, buf in self.buffer_of.items()}
        env.update(zip(self.input_names, inputs))
        for op_type, ins, outs, attrs, static in self.nodes:
            args = [env[n] if n else None for n in ins]
            result = _run(self, op_type, args, attrs, static)
            for name, value in zip(outs, result if isinstance(result, (list, tuple)) else [result]):
                if name:
                    env[name] = value
        return tuple(env[n] for n in self.output_names)


def _float_of(x: Any) -> float:
    """A bound read at build time (``tolist()``: a number or a one-element list)."""
    while isinstance(x, list):
        x = x[0]
    return float(x)


def _run(module: OnnxModule, op: str, a: list, attrs: dict, static: dict) -> Any:  # noqa: C901 - one table
    if op in ("Add", "Sub", "Mul", "Div", "Pow", "And", "Where", "IsNaN", "Erf", "Tanh", "Relu", "Sqrt", "Identity"):
        return {"Add": lambda: a[0] + a[1], "Sub": lambda: a[0] - a[1], "Mul": lambda: a[0] * a[1],
                "Div": lambda: a[0] / a[1], "Pow": lambda: torch.pow(a[0], a[1].to(a[0].dtype)),
                "And": lambda: torch.logical_and(a[0], a[1]), "Where": lambda: torch.where(a[0], a[1], a[2]),
                "IsNaN": lambda: torch.isnan(a[0]), "Erf": lambda: torch.erf(a[0]), "Tanh": lambda: torch.tanh(a[0]),
                "Relu": lambda: torch.relu(a[0]), "Sqrt": lambda: torch.sqrt(a[0]),
                "Identity": lambda: a[0]}[op]()
    if op == "Constant":
        return getattr(module, static["buffer"])
    if op == "Conv":
        padding, extra = _pads2d(list(attrs.get("pads", [])))
        x = F.pad(a[0], extra) if extra else a[0]
        return F.conv2d(x, a[1], a[2] if len(a) > 2 else None, stride=tuple(attrs.get("strides", (1, 1))),
                        padding=padding, dilation=tuple(attrs.get("dilations", (1, 1))), groups=attrs.get("group", 1))
    if op in ("MaxPool", "AveragePool"):
        padding, extra = _pads2d(list(attrs.get("pads", [])))
        x = a[0]
        if extra:
            x = F.pad(x, extra, value=float("-inf") if op == "MaxPool" else 0.0)
        kernel, stride = tuple(attrs["kernel_shape"]), tuple(attrs.get("strides", (1, 1)))
        ceil = bool(attrs.get("ceil_mode", 0))
        if op == "MaxPool":
            return F.max_pool2d(x, kernel, stride, padding, tuple(attrs.get("dilations", (1, 1))), ceil_mode=ceil)
        return F.avg_pool2d(x, kernel, stride, padding, ceil_mode=ceil,
                            count_include_pad=bool(attrs.get("count_include_pad", 0)))
    if op == "GlobalAveragePool":
        return a[0].mean(dim=(2, 3), keepdim=True)
    if op in ("ReduceMean", "ReduceSum"):
        axes = static.get(1, attrs.get("axes"))
        keep = bool(attrs.get("keepdims", 1))
        dims = tuple(axes) if axes is not None else tuple(range(a[0].dim()))
        return a[0].mean(dim=dims, keepdim=keep) if op == "ReduceMean" else a[0].sum(dim=dims, keepdim=keep)
    if op == "Reshape":
        shape = [a[0].shape[i] if s == 0 else s for i, s in enumerate(static[1])]
        return a[0].reshape(shape)
    if op == "Flatten":
        axis = attrs.get("axis", 1)
        return a[0].reshape(int(np.prod(a[0].shape[:axis])), -1)
    if op == "Transpose":
        return a[0].permute(*attrs.get("perm", list(range(a[0].dim()))[::-1]))
    if op == "Gemm":
        x = a[0].t() if attrs.get("transA", 0) else a[0]
        w = a[1].t() if attrs.get("transB", 0) else a[1]
        y = (x @ w) * attrs.get("alpha", 1.0)
        return y + a[2] * attrs.get("beta", 1.0) if len(a) > 2 and a[2] is not None else y
    if op == "MatMul":
        return torch.matmul(a[0], a[1])
    if op == "Clip":
        low, high = static.get(1), static.get(2)
        return torch.clamp(a[0], None if low is None else _float_of(low), None if high is None else _float_of(high))
    if op == "Concat":
        return torch.cat(a, dim=attrs["axis"])
    if op == "Softmax":
        return torch.softmax(a[0], dim=attrs.get("axis", -1))
    if op == "LayerNormalization":
        axis = attrs.get("axis", -1) % a[0].dim()
        return F.layer_norm(a[0], tuple(a[0].shape[axis:]), a[1], a[2] if len(a) > 2 else None,
                            attrs.get("epsilon", 1e-5))
    if op == "Gather":
        axis = attrs.get("axis", 0) % a[0].dim()
        idx = a[1].long()
        idx = torch.where(idx < 0, idx + a[0].shape[axis], idx)
        flat = torch.index_select(a[0], axis, idx.reshape(-1))
        return flat.reshape(tuple(a[0].shape[:axis]) + tuple(idx.shape) + tuple(a[0].shape[axis + 1:]))
    if op == "GatherElements":
        axis = attrs.get("axis", 0)
        idx = a[1].long()
        return torch.gather(a[0], axis, torch.where(idx < 0, idx + a[0].shape[axis], idx))
    if op == "Split":
        axis = attrs.get("axis", 0) % a[0].dim()
        sizes = static.get(1, attrs.get("split"))
        if sizes is None:
            n = attrs.get("num_outputs")
            sizes = [-(-a[0].shape[axis] // n)] * (n - 1)
            sizes.append(a[0].shape[axis] - sum(sizes))
        return torch.split(a[0], list(sizes), dim=axis)
    if op in ("Unsqueeze", "Squeeze"):
        axes = static.get(1, attrs.get("axes"))
        x = a[0]
        if op == "Unsqueeze":
            for ax in sorted(ax % (x.dim() + len(axes)) for ax in axes):
                x = x.unsqueeze(ax)
            return x
        return x.squeeze(tuple(ax % x.dim() for ax in axes)) if axes is not None else x.squeeze()
    if op == "Cast":
        dtype = _TORCH_DTYPES[attrs["to"]]
        return a[0].to(module.float_dtype if dtype == torch.float32 else dtype)
    if op == "Expand":
        return a[0].expand(*torch.broadcast_shapes(tuple(a[0].shape), tuple(static[1])))
    raise NotImplementedError(f"bench/onnx_torch.py has no torch version of ONNX operator {op}")
