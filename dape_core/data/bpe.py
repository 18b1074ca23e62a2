"""Train a byte-level BPE tokenizer on the corpus itself, with the `tokenizers` library, offline.

Byte-level (GPT-2's scheme): text is first mapped to its UTF-8 bytes, so every string has an encoding and
`decode(encode(text)) == text`; the 256 byte symbols are the initial alphabet and merges are learnt on top,
up to `vocab_size` entries including the end-of-text token. Only training-split documents are used, so the
held-out text the protocol scores was never seen by the tokenizer either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

BYTE_ALPHABET = 256
EOS = "<|endoftext|>"


def check_vocab_size(vocab_size: int) -> int:
    if vocab_size <= BYTE_ALPHABET:
        raise ValueError(f"train_tokenizer={vocab_size}: a byte-level BPE vocabulary holds the 256 bytes and "
                         f"{EOS}, so it needs more than {BYTE_ALPHABET} entries (GPT-2 has 50257)")
    return vocab_size


def train_bpe(texts: Iterable[str], vocab_size: int, path: Path, eos: str = EOS) -> Path:
    """Learn merges from `texts` and save a tokenizer.json at `path` (written whole, then renamed)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    check_vocab_size(vocab_size)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[eos], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    temporary = path.with_name(path.name + ".tmp")
    tokenizer.save(str(temporary))
    temporary.replace(path)
    return path
