"""Issue 12 item 7: a template whose build() returns garbage (or raises) fails with an
error naming the template and the plugin that registered it, at every space level."""
from __future__ import annotations

import pytest

import hidet_framework as hf
from hidet_framework.extension import hookimpl, plugin_host
from hidet_framework.schedule.template import Template, TemplateError
from hidet_framework.tuner.tuner import TuningError


class GarbageTemplate(Template):
    operator = "relu"
    target = "cpu"
    priority = 1000  # the level-0 default

    def __init__(self, name, result):
        self.name, self.result = name, result

    def space(self, target, level):
        return [{"variant": k} for k in range(3 if level else 1)]

    def build(self, task, attributes, params, target):
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def _plugin(template):
    class Plugin:
        @staticmethod
        @hookimpl
        def register_templates(register):
            register(template.name, template)
    return Plugin()


@pytest.mark.parametrize("result", [None, "a string", {"module": 1}, ValueError("no tile fits")],
                         ids=["None", "str", "dict", "raises"])
@pytest.mark.parametrize("space", [0, 1])
def test_a_bad_template_is_named_with_its_plugin(tmp_path, monkeypatch, result, space):
    from hidet_framework.driver import compile_task

    monkeypatch.setenv("HIDET_FRAMEWORK_CACHE", str(tmp_path / "hf-cache"))
    template = GarbageTemplate(f"garbage.relu_{space}", result)
    x = hf.symbol((3, 7), "float32")
    task = hf.ops.relu(x).producer.task
    with plugin_host().temporary_plugin(_plugin(template), name="garbage_plugin"):
        with pytest.raises((TemplateError, TuningError)) as excinfo:
            compile_task(task, "cpu", space=space)
    message = str(excinfo.value)
    assert f"garbage.relu_{space}" in message and "garbage_plugin" in message, message
