"""An example plugin: a score processor that convolves over queries and keys, causally.

The DAPE processors mix heads point-wise (DAPE) or along the keys (DAPE V2); Multi-Token Attention
(Golovneva et al. 2025) convolves each head's scores over neighbouring queries and keys. This is the plain
form of that idea: per head, a depthwise kq x kk convolution of z = S + B over (queries, keys), added back:

    A = S + B + conv_h(z)      (S + conv_h(S) without a bias encoding)

Causality: every convolution is padded on the past side of both axes, so the logit at (i, j) reads z at
queries i − kq + 1..i and keys j − kk + 1..j only. The causal mask keeps j <= i, so every token it reads is at
or before i: no later token reaches row i, with or without the `tril` (so `model.leak` changes nothing here,
and the record leaves it out of its settings). The audit checks this before a study's first trial.

Settings of its own (given in a study as `model.options.kq_rows` / `kq_cols`): the kernel's query rows and
key columns. Everything else is the product's: validation, `plan`'s cost, the report's words, `evaluate`,
Ray workers (this file travels with the study), provenance (its source hash tags every trial run).
Study: examples/kq_conv.yaml; guide: docs/extending.md.
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field
from torch import nn
from torch.nn import functional as F

from dape_core.components import Cost, Processor, Setting, register_processor
from dape_core.processors import ScoreProcessor


class KQConv(ScoreProcessor):
    """`forward(scores [B,H,Tq,Tk], bias [H,Tq,Tk] | None, q_pos, k_pos) -> logits`, the interface of
    dape_core.processors.ScoreProcessor. `row_halo`: earlier query rows a row's logits read (the block path
    gives a block that many rows before it); `key_halo`: keys beyond the diagonal they read (none)."""

    def __init__(self, n_head: int, rows: int, cols: int):
        super().__init__()
        self.rows, self.cols = rows, cols
        self.row_halo, self.key_halo = rows - 1, 0
        self.conv = nn.Conv2d(n_head, n_head, (rows, cols), groups=n_head)  # one kernel per head

    def forward(self, scores, bias, q_pos, k_pos):
        z = scores if bias is None else scores + bias.to(scores.dtype)
        mixed = self.conv(F.pad(z, (self.cols - 1, 0, self.rows - 1, 0)))  # past side of keys and queries
        return z + mixed


def _cost(cfg) -> Cost:
    taps = cfg.option("kq_rows") * cfg.option("kq_cols")
    return Cost(parameters=cfg.n_head * (taps + 1), macs=cfg.n_head * taps, stored=2 * cfg.n_head,
                working=cfg.n_head)


Width = Annotated[int, Field(ge=1, le=15)]

register_processor(Processor(
    "kq_conv", "KQ conv",
    build=lambda cfg, has_bias: KQConv(cfg.n_head, cfg.option("kq_rows"), cfg.option("kq_cols")),
    cost=_cost,
    settings=(Setting("kq_rows", Width, 2, label="KQ-conv query rows"),
              Setting("kq_cols", Width, 3, label="KQ-conv key columns"),
              Setting("attention_block_size", label="attention block size", step_cost=False, field=True)),
))

if __name__ == "__main__":  # a quick look: python examples/kq_conv.py
    from dape_core import ModelConfig, build_model

    model = build_model(ModelConfig(preset="tiny", processor="kq_conv", options={"kq_rows": 2, "kq_cols": 3}))
    print(model(torch.zeros(1, 8, dtype=torch.long)).shape)
