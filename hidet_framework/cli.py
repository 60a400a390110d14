"""The ``hidet-framework`` command line (also ``python -m hidet_framework``).

click parses the commands, rich draws the tables. ``plugins`` shows every plugin the
host knows about and exits 0 even when some failed: a broken plugin is information to
show, not a reason for the inspection tool itself to fail.
"""
from __future__ import annotations

import json

import click

import hidet_framework


def _registered_text(registered: dict[str, tuple[str, ...]] | dict[str, list[str]]) -> str:
    return "\n".join(f"{kind}: {', '.join(names)}" for kind, names in registered.items()) or "-"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(hidet_framework.__version__, prog_name="hidet-framework")
def main() -> None:
    """hidet-framework: a deep-learning compiler in which the schedule is part of the program."""


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--all", "show_all", is_flag=True, help="Include the core's own built-in plugins.")
def plugins(as_json: bool, show_all: bool) -> None:
    """List plugins: distribution, version, hooks, what each registered, and load errors."""
    # Imported here so `hidet-framework --help` stays instant.
    from hidet_framework.extension import plugin_host

    infos = [info for info in plugin_host().report() if show_all or not info.builtin]
    if as_json:
        click.echo(json.dumps([info.to_dict() for info in infos], indent=2))
        return

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title="hidet-framework plugins", show_lines=True)
    for column in ("plugin", "distribution", "version", "status"):
        table.add_column(column, no_wrap=True)
    for column in ("hooks", "registered", "error"):
        table.add_column(column, overflow="fold")
    for info in infos:
        status_style = ("green" if info.status == "loaded" else "red" if info.error or info.conflicts
                        else "yellow")
        # Text, not markup strings: plugin names and error messages may contain "[...]".
        table.add_row(
            Text(info.name + (" (built-in)" if info.builtin else "")),
            Text(info.distribution or "-"),
            Text(info.version or "-"),
            Text(info.status, style=status_style),
            Text("\n".join(info.hooks) or "-"),
            Text("\n".join([_registered_text(info.registered), *(f"overrides {o}" for o in info.overrides)])),
            Text("\n".join([*([str(info.error)] if info.error else []), *info.conflicts]) or "-",
                 style="red" if info.error or info.conflicts else ""),
        )
    console = Console()
    if infos:
        console.print(table)
    else:
        console.print("no plugins loaded (see HIDET_FRAMEWORK_DISABLE_AUTOLOAD, "
                      "HIDET_FRAMEWORK_PLUGINS, HIDET_FRAMEWORK_BLOCK_PLUGINS)")


if __name__ == "__main__":
    main()
