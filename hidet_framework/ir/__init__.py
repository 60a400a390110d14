"""The IR: types, expressions, statements, functions, modules, and the tools over them.

The IR imports nothing above it (no graph, DSL or backend)."""
from hidet_framework.ir import dtypes
from hidet_framework.ir.dtypes import DataType, data_type, vector_type
from hidet_framework.ir.expr import (
    Address, BinaryOp, Call, Cast, Constant, Dereference, Expr, IfThenElse, Node, TensorElement,
    TensorSlice, UnaryOp, Var, cast, const, convert, equal, if_then_else, logical_and, logical_not,
    logical_or, maximum, minimum, not_equal, var,
)
from hidet_framework.ir.func import FUNC_KINDS, Function, IRModule, module
from hidet_framework.ir.stmt import (
    AsmStmt, AssertStmt, AssignStmt, BreakStmt, BufferStoreStmt, ContinueStmt, DeclareStmt,
    EvaluateStmt, ForMappingStmt, ForStmt, IfStmt, LetStmt, ReturnStmt, SeqStmt, Stmt, WhileStmt, seq,
)
from hidet_framework.ir.types import PointerType, Scope, TensorType, pointer_type, tensor_type
from hidet_framework.ir.type_infer import infer_type
from hidet_framework.ir.functors import IRRewriter, IRVisitor, collect, substitute
from hidet_framework.ir.equality import assert_structural_equal, structural_equal, structural_hash
from hidet_framework.ir.printer import format_ir
