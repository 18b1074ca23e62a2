"""A folder of text files in which identical contents sit under names that the key rule alone would put in
different splits (issue 53: held-out text that was also trained on). Used by the in-memory `text` source's
tests and by `prepare_corpus`'s: one rule for both."""

from pathlib import Path

from dape_core.data.splits import document_split

VAL_FRACTION = 0.3


def _content(tag: str, lines: int) -> str:
    return "".join(f"{tag} line {i}: {'x' * (i % 17)}\n" for i in range(lines))


def plant(folder: Path) -> dict:
    """Writes 24 distinct files and two contents three times each; returns {content: the split the first
    copy's name gives}. Each content is about 3 KB (several pieces at max_piece_bytes=1024)."""
    for i in range(24):
        path = folder / f"f{i:02d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_content(f"distinct {i}", 30 + i), encoding="utf-8")
    names = [f"g{i:03d}.txt" for i in range(400)]  # after every f*.txt in key order
    by_key = {name: document_split(name, 0, VAL_FRACTION, 0.0) for name in names}
    expected = {}
    for tag, first_split in (("repeated A", "validation"), ("repeated B", "train")):
        first = next(n for n in names if by_key[n] == first_split and not (folder / n).exists())
        others = [n for n in names if n > first and by_key[n] != first_split and not (folder / n).exists()][:2]
        content = _content(tag, 120)
        for name in (first, *others):
            (folder / name).write_text(content, encoding="utf-8")
        expected[content] = first_split
    return expected
