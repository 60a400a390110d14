"""The core runs with every plugin blocked: it imports, imports no plugin, and says
clearly what is missing."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap


def test_core_with_every_plugin_blocked_explains_the_missing_backend():
    installed = sorted({ep.name for ep in importlib.metadata.entry_points(group="hidet_framework")})
    script = textwrap.dedent("""
        import sys
        import hidet_framework
        from hidet_framework.extension import MissingBackendError, plugin_host

        host = plugin_host()
        assert len(host.backends) == len(host.operators) == len(host.templates) == 0
        try:
            host.backend_for("cpu")
        except MissingBackendError as exc:
            print(exc)
        else:
            raise SystemExit("a backend was found with every plugin blocked")
        loaded = sorted(m for m in sys.modules if m.startswith("hidet_plugin"))
        assert not loaded, f"the core imported plugins: {loaded}"
        """)
    env = {**os.environ, "HIDET_FRAMEWORK_BLOCK_PLUGINS": ",".join(installed) or "none"}
    env.pop("HIDET_FRAMEWORK_PLUGINS", None)
    env.pop("HIDET_FRAMEWORK_DISABLE_AUTOLOAD", None)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr + result.stdout
    message = result.stdout.strip()
    assert message.startswith("no backend serves target 'cpu'")
    if "cpu" in installed:
        assert "plugin 'cpu' (hidet-plugin-cpu) is installed but blocked" in message
    else:
        assert "install hidet-plugin-cpu (pip install -e plugins/hidet_plugin_cpu)" in message
