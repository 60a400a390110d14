"""Old import paths of modules that moved, kept working.

The core's folders follow the pipeline (docs/layout.md); several modules moved there
from where they first lived. Plugins, examples and user code written against the old
paths (``from hidet_framework.ir.mapping import spatial, repeat, auto_map``) keep
working: a finder on ``sys.meta_path`` answers an old name with the module at its new
name, the very same module object (so classes, registries and ``mock.patch`` targets
are shared). The old files are gone rather than left as re-export files, so that git
records the moves as renames and merges edits made to the old files elsewhere.

New code imports the new paths; a test keeps every entry below importable.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

# old module name -> new module name
MOVED_MODULES: dict[str, str] = {
    # the IR's analyses and simplifier, apart from its nodes
    "hidet_framework.ir.bounds": "hidet_framework.analysis.bounds",
    "hidet_framework.ir.evaluator": "hidet_framework.analysis.evaluator",
    "hidet_framework.ir.simplify": "hidet_framework.simplifier.simplify",
    "hidet_framework.ir.simplify_div_mod": "hidet_framework.simplifier.simplify_div_mod",
    "hidet_framework.ir.simplify_rules_common": "hidet_framework.simplifier.simplify_rules_common",
    # the task-mapping and layout algebra (its lowering, TaskMapping.lower, with it)
    "hidet_framework.ir.mapping": "hidet_framework.mapping.task_mapping",
    "hidet_framework.ir.layout": "hidet_framework.mapping.layout",
    # lowering
    "hidet_framework.transforms": "hidet_framework.lowering",
    "hidet_framework.transforms.lower_task_mapping": "hidet_framework.lowering.lower_task_mapping",
    "hidet_framework.transforms.flatten_tensor_index": "hidet_framework.lowering.flatten_tensor_index",
    "hidet_framework.transforms.flatten_tensor_slice": "hidet_framework.lowering.flatten_tensor_slice",
    "hidet_framework.transforms.insert_bounds_check": "hidet_framework.lowering.insert_bounds_check",
    "hidet_framework.transforms.instruments": "hidet_framework.lowering.instruments",
    "hidet_framework.transforms.pass_base": "hidet_framework.lowering.pass_base",
    "hidet_framework.transforms.pass_context": "hidet_framework.lowering.pass_context",
    "hidet_framework.transforms.pipeline": "hidet_framework.lowering.pipeline",
    "hidet_framework.transforms.simplify_expr": "hidet_framework.lowering.simplify_expr",
    "hidet_framework.transforms.unroll_loops": "hidet_framework.lowering.unroll_loops",
    "hidet_framework.transforms.verify_ir": "hidet_framework.lowering.verify_ir",
    # fusion owns its partition pass
    "hidet_framework.graph.passes.partition_fusion_groups": "hidet_framework.fusion.partition_fusion_groups",
    # scheduling owns templates
    "hidet_framework.tuner.template": "hidet_framework.schedule.template",
    # the runtime: what runs a compiled graph
    "hidet_framework.graph.compiled_graph": "hidet_framework.runtime.compiled_graph",
    "hidet_framework.graph.memory_plan": "hidet_framework.runtime.memory_plan",
}


class _AliasLoader(importlib.abc.Loader):
    """Loads an old name as the module at its new name."""

    def __init__(self, new_name: str) -> None:
        self.new_name = new_name
        self._spec: Any = None

    def create_module(self, spec: Any) -> Any:
        module = importlib.import_module(self.new_name)
        self._spec = module.__spec__  # the import machinery overwrites it; put it back
        return module

    def exec_module(self, module: Any) -> None:
        module.__spec__ = self._spec


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        new_name = MOVED_MODULES.get(fullname)
        if new_name is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new_name))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (before the path finders: an old name
    never reaches a stale file)."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())
