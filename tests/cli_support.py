"""The `orchestrator` command run in the test's own process (its imports are paid once), for tests that read
its exit code and output."""

from __future__ import annotations

import sys

from orchestrator.cli import main


def run_cli(capsys, *args) -> tuple[int, str]:
    """`orchestrator ARGS...` in this process: its exit code and its output (stdout, then stderr)."""
    argv = sys.argv
    sys.argv = ["orchestrator", *map(str, args)]
    try:
        main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        sys.argv = argv
    captured = capsys.readouterr()
    return code, captured.out + captured.err
