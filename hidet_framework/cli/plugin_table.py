"""``hidet-framework plugins``: what is installed, what each provides, and what does
not work here and why; readable in an 80-column terminal."""
from __future__ import annotations

import json

import click

from hidet_framework.extension.host import KNOWN_BACKEND_DISTRIBUTIONS


def _provides(info, host) -> tuple[str, list[str]]:
    """(what the plugin registered, in words; notes: backends that cannot run here)."""
    parts, notes = [], []
    for kind, names in info.registered.items():
        if not names:
            continue
        if kind == "backends":
            for name in names:
                backend = host.backends[name]
                availability = backend.availability()
                state = "usable" if availability else "installed, not usable here"
                parts.append(f"backend {name} ({state})")
                if not availability:
                    notes.append(f"{info.name}: backend {name!r} cannot run here: {availability.reason}")
        elif kind == "frontends":
            parts.append("frontend " + ", ".join(names))
        elif len(names) <= 3:
            singular = {"operators": "operator", "templates": "template", "passes": "pass"}.get(kind, kind)
            parts.append(f"{singular if len(names) == 1 else kind}: " + ", ".join(names))
        else:
            parts.append(f"{len(names)} {kind}")
    return "; ".join(parts) or "nothing", notes


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--all", "show_all", is_flag=True, help="Include the core's own built-in plugins, if it has any.")
def plugins(as_json: bool, show_all: bool) -> None:
    """List the installed plugins: version, status, what each provides, and errors."""
    from hidet_framework.extension import plugin_host
    from hidet_framework.extension.manager import ENV_ALLOW, ENV_BLOCK, ENV_DISABLE_AUTOLOAD

    host = plugin_host()
    report = host.report()
    infos = [info for info in report if show_all or not info.builtin]
    if as_json:
        click.echo(json.dumps([info.to_dict() for info in infos], indent=2))
        return
    if show_all and not any(info.builtin for info in report):
        click.echo("(the core registers no built-in plugins; all of the below are installed distributions)")
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=min(Console().width, 100))
    if not infos:
        hints = ", ".join(f"{dist} (pip install -e {folder})" for dist, folder in KNOWN_BACKEND_DISTRIBUTIONS.values())
        if host._manager.autoload_disabled:
            console.print(f"no plugin loaded: {ENV_DISABLE_AUTOLOAD} is set, so installed plugins are not loaded")
        else:
            console.print(Text(f"no plugin is installed: the core alone cannot compile anything. Install a "
                               f"backend, e.g. {hints}, and the operator plugins (pip install -r "
                               f"requirements-dev.txt installs them all)."))
        return
    table = Table(title="hidet-framework plugins", show_lines=False, expand=False)
    table.add_column("plugin", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("provides", overflow="fold")
    notes: list[str] = []
    for info in infos:
        if info.error is None and info.status in ("loaded", "conflict"):
            provides, more = _provides(info, host)
            provides = "; ".join([provides, *(f"overrides {o}" for o in info.overrides)])
            more += [f"{info.name}: {conflict}" for conflict in info.conflicts]
            notes += more
            style = "red" if info.conflicts else "yellow" if more else "green"
            status = Text(info.status + ("*" if more else ""), style=style)
        else:
            provides = "-"
            status = Text(info.status, style="red" if info.error else "yellow")
            if info.status == "blocked":
                notes.append(f"{info.name}: blocked by {ENV_BLOCK}")
            elif info.status == "not-allowed":
                notes.append(f"{info.name}: not listed in {ENV_ALLOW}")
            if info.error is not None:
                notes.append(f"{info.name}: failed to load: {info.error}")
        table.add_row(Text(info.name + (" (built-in)" if info.builtin else "")), Text(info.version or "-"), status,
                      Text(provides))
    console.print(table)
    for note in notes:
        console.print(Text("* " + note), soft_wrap=False)
