"""The embedded default corpus: a fixed snapshot of CPython 3.11.7's standard library, shipped with the package.

`source: stdlib` reads this snapshot, never the running interpreter's library, so every machine trains on
the same bytes (issue 53: Debian's 3.11.2 and a 3.11.7 used to train on different text). The snapshot is
every `*.py` file under CPython 3.11.7's `lib/python3.11` (site-packages excluded), 1790 files and
31,525,224 bytes, keyed by its path relative to that folder, in sorted order: exactly the documents the
`stdlib` source read on 3.11.7 before, so a corpus record of that Python (content hash `f5bdc01ad41baafc` for
the default `data:` section) is unchanged. It is one gzip-compressed tar (6.4 MB; about 0.5 s to read in a
process, kept for the process by `load_corpus`), licensed under the PSF licence shipped beside it
(`embedded/LICENSE-cpython-3.11.7.txt`). The archive's SHA-256 is pinned below: a damaged or edited archive
is an error, never a silent change of the corpus.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

EMBEDDED = Path(__file__).with_name("embedded")
SNAPSHOT = EMBEDDED / "cpython-3.11.7-lib.tar.gz"
SNAPSHOT_SHA256 = "c99f6e7260125cafcb79460dbe48c91db513e4434d7df29778ebca355e28bbbe"
SNAPSHOT_FILES, SNAPSHOT_BYTES = 1790, 31_525_224


class SnapshotMismatch(ValueError):
    """The embedded corpus archive is not the pinned one (damaged, edited or replaced)."""


def snapshot_documents(limit: int | None = None, path: Path | None = None) -> list[tuple[str, bytes]]:
    """(key, bytes) of the snapshot's files in its (sorted) order, the first `limit` of them; the archive is
    checked against the pinned SHA-256 first. `path` is for tests only (a damaged copy); the corpus is
    always `SNAPSHOT`."""
    archive = SNAPSHOT if path is None else path
    if not archive.is_file():
        raise FileNotFoundError(f"the embedded corpus {archive} is missing: the 'stdlib' data source reads it; "
                                "reinstall dape-orchestrator (the wheel ships it as package data)")
    blob = archive.read_bytes()
    actual = hashlib.sha256(blob).hexdigest()
    if actual != SNAPSHOT_SHA256:
        raise SnapshotMismatch(f"the embedded corpus {archive} has SHA-256 {actual}, not the pinned {SNAPSHOT_SHA256} "
                               "(dape_core/data/snapshot.py): the archive is damaged or was edited, and the 'stdlib' "
                               "data source will not train on other text under the same name; restore it "
                               "(git checkout, or reinstall dape-orchestrator)")
    documents: list[tuple[str, bytes]] = []
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for member in tar:  # streamed: a limit decompresses only the archive's start
            if limit is not None and len(documents) >= limit:
                break
            handle = tar.extractfile(member)
            assert handle is not None, f"{member.name}: the snapshot holds only regular files"
            documents.append((member.name, handle.read()))
    return documents


def build_snapshot(root: Path, out: Path) -> str:
    """Write the archive of every `*.py` under `root` (site-packages excluded), sorted, with no timestamps or
    owners, and return its SHA-256. How `cpython-3.11.7-lib.tar.gz` was made, from CPython 3.11.7's
    `lib/python3.11`: `python -c "from pathlib import Path; from dape_core.data.snapshot import build_snapshot;
    print(build_snapshot(Path('/root/.pyenv/versions/3.11.7/lib/python3.11'), Path('out.tar.gz')))"`."""
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts and p.is_file())
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in files:
            content = path.read_bytes()
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            info.size, info.mtime, info.mode = len(content), 0, 0o644
            tar.addfile(info, io.BytesIO(content))
    blob = gzip.compress(raw.getvalue(), compresslevel=9, mtime=0)
    out.write_bytes(blob)
    return hashlib.sha256(blob).hexdigest()
