"""Random streams keyed by a seed and a name: common random numbers across a study's variants.

A study compares variants at the same seeds, and its paired tests read the difference of two variants at one
seed. That difference is free of the initialisation's noise only if, at one seed, the two variants start from
the same network wherever they share a parameter. So a model's initial weights are not drawn one after another
from PyTorch's global generator, where whatever one component draws shifts every draw after it; each is drawn
from a stream of its own, keyed by the seed and by what it is:

- the transformer's own weights (embedding, attention and MLP projections, LM head) by their parameter's name
  (`CausalLM`'s `_init_weights`);
- a component's parameters (an encoding's, a processor's: built-in, contrib or a plugin) by the component's
  kind, its name and its layer (`component_stream`, around its builder), so a plugin gets its own stream
  without doing anything.

Building a model draws nothing from the global generator, so the streams a trial uses after it (the
randomized positions of randomized RoPE, drawn during training) start from the same state in every variant
too. The data order, the evaluation windows and the CHE samplers have generators of their own, seeded by the
trial's seed alone. The seeds themselves are still independent draws of the experiment: only the noise two
variants share cancels in their difference (docs/method.md §6.6).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch

STREAM_VERSION = 1  # part of every key: a change to how streams are derived is a new set of initial networks


def stream_seed(seed: int, *key: object) -> int:
    """A 63-bit seed for the stream named `key` at `seed`: a hash, so that neighbouring seeds or keys give
    unrelated streams."""
    text = "/".join(str(part) for part in (STREAM_VERSION, int(seed), *key))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def generator(seed: int, *key: object) -> torch.Generator:
    """A CPU generator for the stream `key` at `seed`."""
    return torch.Generator().manual_seed(stream_seed(seed, *key))


@contextmanager
def drawn_from(seed: int, *key: object) -> Iterator[None]:
    """Within the block, PyTorch's global CPU generator is the stream `key` at `seed`; after it, the global
    generator is where it was before the block (nothing drawn inside shifts a draw outside)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(seed, *key))
        yield


def component_stream(seed: int, kind: str, name: str, layer: int | str):
    """The stream a component's builder draws its parameters from: `kind` (encoding, processor), its
    registered name and its layer (or "shared" for one module shared by every layer)."""
    return drawn_from(seed, kind, name, layer)


def model_seed(seed: int | None) -> int:
    """The seed a model is built at: the one given, else the one PyTorch's global generator was last seeded with
    (`torch.manual_seed(s)` then `build_model(cfg)` builds at s)."""
    return torch.initial_seed() if seed is None else int(seed)
