"""Compute definitions and Tasks: the math of operators, written once."""
from hidet_framework.compute.definitions import (
    REDUCE_KINDS, GridCompute, ReduceCompute, TensorNode, compute, reduce, tensor_input,
)
from hidet_framework.compute.task import InverseMap, Task
