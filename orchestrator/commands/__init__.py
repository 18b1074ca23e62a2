"""The `orchestrator` commands' work, one module per command (cli.py holds their arguments and help).

Every command that reads a study starts from one `Invocation` (invocation.py): the study located, loaded with its
profile and overrides, and its folders and tracking store chosen, with the same messages and exit codes
everywhere. output.py holds the consoles and the exit codes. Adding a command: a module here with one function
that takes the parsed arguments, and its Typer signature in cli.py.

Each module imports only typer and rich at import time: the study format (torch), Ray and MLflow are imported
inside the functions, so that `orchestrator --help` answers at once.
"""
