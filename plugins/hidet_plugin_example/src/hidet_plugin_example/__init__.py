"""hidet-plugin-example: a small third-party-style plugin for hidet-framework.

It is installed like any external plugin (its own distribution, one entry point in
the ``hidet_framework`` group) to prove discovery, and contributes one extra matmul
template for the ``cpu`` target (`SimpleRowMatmul`) that competes with the bundled
ones in the tuner: it is chosen only where it measures faster.
"""
from hidet_framework.extension import hookimpl


@hookimpl
def register_templates(register):
    from hidet_plugin_example.simple_matmul import SimpleRowMatmul

    register("example.matmul_simple_rows", SimpleRowMatmul())
