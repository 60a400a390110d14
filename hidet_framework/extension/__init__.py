"""The plugin seam of hidet-framework (kept apart from the top-level ``plugins/``
folder, which holds distributions).

Plugins write ``from hidet_framework.extension import hookimpl``; the rest of the core
asks ``plugin_host()`` for backends, operators, templates, frontends and passes.
Graph rewrite rules are `RewriteRule` descriptors (``rules.py``); ``rules_off(*names)``
switches registered ones off for a with-block.
"""
from . import points
from .hookspecs import PROJECT_NAME, hookimpl, hookspec
from .host import (MissingBackendError, PluginHost, PluginInfo, plugin_host, reset_plugin_host,
                   temporary_plugin)
from .manager import ExtensionManager, PluginError
from .registry import (DuplicateRegistrationError, Register, RegistrationError, Registry)
from .rules import RewriteRule, registered_rule_names, rules_off, rules_switched_off

__all__ = [
    "PROJECT_NAME", "hookimpl", "hookspec", "points",
    "plugin_host", "reset_plugin_host", "temporary_plugin",
    "PluginHost", "PluginInfo", "PluginError", "MissingBackendError", "ExtensionManager",
    "Register", "Registry", "RegistrationError", "DuplicateRegistrationError",
    "RewriteRule", "registered_rule_names", "rules_off", "rules_switched_off",
]
