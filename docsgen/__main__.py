"""`python -m docsgen pages DIR`: the site's generated pages, written to DIR (to read them without MkDocs);
`python -m docsgen readme`: rewrite README's table of studies from studies/*.yaml;
`python -m docsgen record NAME [--machine KEY]`: rerun the benchmark record docs/benchmarks/NAME.md's commands
and record their output."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "pages":
        from docsgen.hooks import generated_pages

        for path, text in generated_pages().items():
            target = Path(argv[1]) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(target)
        return 0
    if argv == ["readme"]:
        from docsgen.catalogue import update

        print("README.md: table of studies " + ("rewritten" if update() else "already current"))
        return 0
    if len(argv) in (2, 4) and argv[0] == "record" and (len(argv) == 2 or argv[2] == "--machine"):
        from docsgen.benchmarks import RecordError, record

        try:
            print(record(argv[1], machine=argv[3] if len(argv) == 4 else None))
        except RecordError as error:
            print(error, file=sys.stderr)
            return 2
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
