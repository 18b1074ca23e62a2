"""The benchmarks page: every measured figure of the documentation, each with the command that printed it and
the machine it ran on, from the recorded outputs in `docs/benchmarks/*.md`.

A record is a Markdown file with a YAML header:

    ---
    title: The main job, end to end            # the section's heading
    command: orchestrator run studies/kernel_size.yaml   # what printed the figures (one line, or a list)
    machine: dev-cpu                            # a key of MACHINES below
    order: 10                                   # the page's order (lower first)
    figures: {main_job_minutes: 8.3}            # optional: named headline figures, each stated once
    ---
    the output, or the table made from it

To update a figure, rerun its command: `python -m docsgen record NAME [--machine KEY]` runs the record's commands
and writes their output as its body (a command with a placeholder, such as STUDY or DIR, is run by hand and its
output pasted in). The page is rebuilt from the records at every build of the site, and nothing else in the
documentation quotes a measured figure (a test checks both)."""

from __future__ import annotations

import datetime
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "benchmarks"

# The machines figures were measured on, named once: a record names one of these.
MACHINES = {
    "dev-cpu": "the project's development machine: 2 CPU cores, no GPU, shared with other engineers' test runs "
               "(the load average, where it was noted, is in the record; figures taken under load are slower "
               "than on a dedicated machine, and ratios within one run are the figures to compare)",
    "dev-cpu-idle": "the project's development machine (2 CPU cores, no GPU) with nothing else running",
}


@dataclass(frozen=True)
class Record:
    name: str  # the file's stem: the section's anchor
    title: str
    commands: list[str]
    machine: str
    order: int
    body: str
    figures: dict = field(default_factory=dict)


class RecordError(ValueError):
    """A record without its header's fields, or naming an unknown machine."""


def parse(path: Path) -> Record:
    text = path.read_text()
    if not text.startswith("---\n") or "\n---\n" not in text[4:]:
        raise RecordError(f"{path}: a record starts with a YAML header between '---' lines")
    header_text, body = text[4:].split("\n---\n", 1)
    header = yaml.safe_load(header_text) or {}
    missing = [key for key in ("title", "command", "machine") if key not in header]
    if missing:
        raise RecordError(f"{path}: the header lacks {', '.join(missing)}")
    if header["machine"] not in MACHINES:
        raise RecordError(f"{path}: machine {header['machine']!r} is not one of {sorted(MACHINES)}")
    commands = header["command"] if isinstance(header["command"], list) else [header["command"]]
    return Record(path.stem, header["title"], [str(command) for command in commands], header["machine"],
                  int(header.get("order", 100)), body.strip(), dict(header.get("figures") or {}))


def records(folder: Path = RECORDS) -> list[Record]:
    return sorted((parse(path) for path in folder.glob("*.md")), key=lambda record: (record.order, record.name))


def figures(found: list[Record]) -> dict[str, object]:
    """Every named figure, each once: a name two records give different values is an error."""
    named: dict[str, tuple[object, str]] = {}
    for record in found:
        for name, value in record.figures.items():
            if name in named and named[name][0] != value:
                raise RecordError(f"figure {name!r} is {named[name][0]!r} in {named[name][1]} and {value!r} in "
                                  f"{record.name}: measure it once")
            named[name] = (value, record.name)
    return {name: value for name, (value, _) in named.items()}


_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def rebased(body: str, folder: Path = RECORDS) -> str:
    """A record's links, written relative to its own file (`../protocol.md`, `main-job.md`: right where the record is
    read in the repository), made relative to the generated page, which sits one folder up: a sibling record
    becomes its section's anchor (`#main-job`), a page of the site `protocol.md`, a file outside the site
    `../orchestrator/run.py` (which the site's hook then names as a path)."""
    docs = folder.parent.resolve()

    def replace(match: re.Match) -> str:
        target, anchor = match.group(1), match.group(2) or ""
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
            return match.group(0)
        resolved = (folder / target).resolve()
        if resolved.parent == folder.resolve() and resolved.suffix == ".md":
            return f"](#{resolved.stem})" if not anchor else f"]({anchor})"
        return f"]({Path(os.path.relpath(resolved, docs)).as_posix()}{anchor})"

    return _LINK.sub(replace, body)


def render(folder: Path = RECORDS) -> str:
    found = records(folder)
    figures(found)
    lines = ["# Benchmarks", "",
             "Every measured figure of this documentation, in one place, with the command that printed it and the "
             "machine it ran on. The page is generated from the recorded outputs in `docs/benchmarks/` at each "
             "build: to update a figure, rerun its command (`python -m docsgen record NAME` reruns a record's "
             "commands and writes their output as the record). The benchmark scripts live in "
             "`tests/benchmarks/` and print ratios against a reference taken in the same run, the figures to "
             "compare across machines. Nothing here has been measured on a GPU yet: "
             "`tests/benchmarks/gpu_check.sh all` measures the GPU figures ([GPUs and doctor](guides/gpus.md)).", "",
             "Machines:", ""]
    lines += [f"- `{name}`: {text}." for name, text in MACHINES.items()]
    lines += ["", "| figures | command |", "|---|---|"]
    lines += [f"| [{record.title}](#{record.name}) | `{record.commands[0]}` |" for record in found]
    for record in found:
        lines += ["", f"## {record.title} {{#{record.name}}}", ""]
        lines += [f"Command: `{command}`  " for command in record.commands]
        lines += [f"Machine: `{record.machine}`", "", rebased(record.body, folder)]
    return "\n".join(lines) + "\n"


_PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]*\b")


def record(name: str, folder: Path = RECORDS, machine: str | None = None, cwd: Path = ROOT) -> Path:
    """Rerun a record's commands (from `cwd`, one after the other) and write their output as its body, with the
    date and the commit; `machine` names where it ran (default: the record's). Named figures are dropped from
    the header: they stated the old output, so name them again from the new one."""
    path = folder / f"{name}.md"
    old = parse(path)
    machine = machine or old.machine
    if machine not in MACHINES:
        raise RecordError(f"machine {machine!r} is not one of {sorted(MACHINES)}: add it to MACHINES first")
    for command in old.commands:
        if _PLACEHOLDER.search(command.replace("--", "")):
            raise RecordError(f"{path.name}: `{command}` has a placeholder; run it by hand and paste its output")
    parts = []
    for command in old.commands:
        done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RecordError(f"`{command}` exited {done.returncode}: {done.stderr[-2000:]}")
        parts.append(f"`$ {command}`\n\n```text\n{done.stdout.rstrip()}\n```")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True,
                            text=True).stdout.strip()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = {"title": old.title, "command": old.commands if len(old.commands) > 1 else old.commands[0],
              "machine": machine, "order": old.order}
    path.write_text("---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True) + "---\n"
                    + f"Recorded {when}" + (f" at commit {commit}" if commit else "") + ".\n\n"
                    + "\n\n".join(parts) + "\n")
    return path
