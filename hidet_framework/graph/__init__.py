"""The graph: symbolic tensors, operators, tracing into a FlowGraph."""
from hidet_framework.graph.flow_graph import FlowGraph, GraphError, trace
from hidet_framework.graph.tensor import Operator, ShapeError, Tensor, constant, symbol
