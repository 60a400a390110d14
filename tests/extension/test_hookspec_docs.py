"""Every hook is documented twice: `:param:` lines in the hookspecs module, and a
section of docs/plugins.md. Adding a hook without both fails here."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from hidet_framework.extension import hookspecs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
SPECS = [fn for _, fn in inspect.getmembers(hookspecs, inspect.isfunction)
         if hasattr(fn, f"{hookspecs.PROJECT_NAME}_spec")]


def test_hookspecs_exist():
    assert {fn.__name__ for fn in SPECS} >= {"register_operators", "register_templates",
                                             "register_backends", "register_frontends",
                                             "register_passes"}


@pytest.mark.parametrize("spec", SPECS, ids=lambda fn: fn.__name__)
def test_hookspec_documents_every_parameter(spec):
    doc = inspect.getdoc(spec) or ""
    for param in inspect.signature(spec).parameters:
        assert f":param {param}:" in doc, f"{spec.__name__} lacks ':param {param}:'"
    if getattr(spec, f"{hookspecs.PROJECT_NAME}_spec").get("firstresult"):
        assert "Stops at first non-None result." in doc
    assert inspect.signature(spec).return_annotation != inspect.Signature.empty


@pytest.mark.parametrize("spec", SPECS, ids=lambda fn: fn.__name__)
def test_hookspec_has_a_section_in_docs_plugins_md(spec):
    params = ", ".join(inspect.signature(spec).parameters)
    assert f"### {spec.__name__}({params})" in DOCS.read_text(), \
        f"docs/plugins.md has no '### {spec.__name__}({params})' section"
