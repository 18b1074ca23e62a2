"""The command-line reference page, from the typer app itself (click's introspection of `orchestrator.cli.app`):
every command, its usage line, its help and each argument and option with its default, as `--help` prints them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click


@dataclass(frozen=True)
class Command:
    path: str  # "orchestrator data prepare"
    command: click.Command
    context: click.Context  # its click context (for usage and help records)


def root_command():
    """The click command typer builds from the app (the object `orchestrator` runs)."""
    import typer.main

    from orchestrator.cli import app

    return typer.main.get_command(app)


def commands(root=None) -> list[Command]:
    """Every leaf command, depth first in the app's order (a group, such as `data`, is not itself a command)."""
    root = root or root_command()
    found: list[Command] = []

    def walk(command, path: str, parent) -> None:
        context = command.context_class(command, info_name=path.split()[-1], parent=parent)
        children = getattr(command, "commands", None)
        if children is None:
            found.append(Command(path, command, context))
            return
        for name, child in children.items():
            if not getattr(child, "hidden", False):
                walk(child, f"{path} {name}", context)

    walk(root, "orchestrator", None)
    return found


def parameters(entry: Command) -> list:
    """The command's arguments and options as `--help` lists them (hidden ones and --help left out)."""
    return [param for param in entry.command.params
            if not getattr(param, "hidden", False) and param.name != "help"]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def anchor(path: str) -> str:
    return path.replace(" ", "-")


def render(root=None) -> str:
    root = root or root_command()
    entries = commands(root)
    lines = ["# Command line", "",
             "Generated from the `orchestrator` command itself (`orchestrator.cli.app`) at each build of this site: "
             "the same text as `orchestrator COMMAND --help`. What each command is for, with examples, is in the "
             "guides; the exit codes and the environment variables every command honours are in "
             "[Running studies](../guides/running.md#exit-codes).", "",
             _cell(root.help or ""), "",
             "| command | what it does |", "|---|---|"]
    for entry in entries:
        summary = (entry.command.help or "").strip().split("\n\n")[0]
        lines.append(f"| [`{entry.path}`](#{anchor(entry.path)}) | {_cell(summary)} |")
    for entry in entries:
        usage = " ".join(entry.command.collect_usage_pieces(entry.context))
        lines += ["", f"## `{entry.path}` {{#{anchor(entry.path)}}}", "", f"```\n{entry.path} {usage}\n```", ""]
        lines += [paragraph.strip().replace("\n", " ") + "\n" for paragraph in (entry.command.help or "").split("\n\n")]
        params = parameters(entry)
        if params:
            lines += ["| argument or option | what it is |", "|---|---|"]
            for param in params:
                names, text = param.get_help_record(entry.context) or (param.name, "")
                if param.param_type_name == "argument":
                    text = text or ""
                lines.append(f"| `{_cell(names)}` | {_cell(text)} |")
    return "\n".join(lines) + "\n"
