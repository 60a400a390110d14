"""The ``hidet-framework`` command line (also ``python -m hidet_framework``).

click parses the commands, rich draws tables and progress. Commands: ``run`` and
``compile`` (a model from a file, through a frontend plugin), ``plugins``, ``env``
and ``cache``. Each lives in its own module and imports what it needs when it runs,
so ``hidet-framework --help`` stays instant.
"""
from __future__ import annotations

import click

import hidet_framework


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(hidet_framework.__version__, prog_name="hidet-framework")
def main() -> None:
    """hidet-framework: a deep-learning compiler in which the schedule is part of the program."""


from .environment import cache, env  # noqa: E402
from .plugin_table import plugins  # noqa: E402
from .run_model import compile_model, run  # noqa: E402

for command in (run, compile_model, plugins, env, cache):
    main.add_command(command)

__all__ = ["main"]
