"""Evaluation protocol 2 (docs/protocol.md): every length of a trial scores the same tail tokens, whenever it
is evaluated, the lengths differing only in the context before them."""

import dataclasses

import numpy as np
import pytest
import torch

from dape_core import ExperimentConfig, build_model
from dape_core.data import DataConfig, load_corpus, tail_windows
from dape_core.experiment import evaluate_stored, protocol_windows

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(DataConfig(max_files=150))


def _tails(windows: dict, tail: int) -> dict[int, torch.Tensor]:
    return {length: rows[:, -tail:] for length, rows in windows.items()}


def test_a_length_added_later_scores_the_same_tail_tokens(corpus):
    regions = corpus.stream_regions("validation")
    trained = tail_windows(regions, [64, 128, 256, 512], n_windows=16, tail=32, seed=0)
    later = tail_windows(regions, [1024], n_windows=16, tail=32, seed=0)  # what `evaluate --lengths 1024` draws
    tails = _tails({**trained, **later}, 32)
    for length, rows in tails.items():
        assert torch.equal(rows, tails[64]), f"L={length} scores other tokens than L=64"
    # A length's windows do not depend on the others evaluated with it: the training run's 512 is the later one's.
    assert torch.equal(tail_windows(regions, [512, 1024], 16, 32, 0)[512], trained[512])
    # Nested: the window at a shorter length is the end of every longer one (ΔP compares them).
    for short, long in ((64, 128), (128, 1024)):
        assert torch.equal(later.get(long, trained.get(long))[:, -(short + 1):], trained[short])
    # Another seed picks other tails.
    assert not torch.equal(tail_windows(regions, [64], 16, 32, 1)[64][:, -32:], tails[64])


def test_tails_read_the_held_out_stream_around_its_end(corpus):
    regions = corpus.stream_regions("validation")
    stream = np.concatenate([np.asarray(region, dtype=np.int64) for region in regions])
    total = len(stream)
    # Every tail: n_windows = every slot, so the first tail (stream positions 0..31) is among them.
    every = tail_windows(regions, [64], n_windows=total // 32, tail=32, seed=0)[64]
    first = every[0].numpy()
    assert np.array_equal(first[-32:], stream[:32])
    assert np.array_equal(first[:-32], stream[total - 33:])  # its context: the stream's end, joined to its start
    assert np.array_equal(every[5].numpy(), stream[6 * 32 - 65 : 6 * 32])  # a tail far enough in reads in place
    with pytest.raises(ValueError, match="held-out text holds"):
        tail_windows(regions, [total + 5], n_windows=4, tail=32, seed=0)
    with pytest.raises(ValueError, match="evaluation budget"):
        tail_windows(regions, [64], n_windows=total // 32 + 1, tail=32, seed=0)


def test_a_stored_model_scores_a_length_as_it_did_with_fewer_lengths(corpus):
    """`evaluate_stored` at [64, 128] and at [64, 128, 1024] (only 1024 asked): ppl_128 does not move when a
    longer length joins, and 1024's ΔP compares the same tokens as ppl_64."""
    cfg = ExperimentConfig(model={"preset": "tiny", "pos_encoding": "kerple", "processor": "dapev2", "d_dape": 8},
                           data={"max_files": 150}, train={"steps": 1, "batch_size": 2, "seq_len": 64},
                           eval={"lengths": [64, 128], "tail_tokens": 32, "n_windows": 8, "timing": False})
    torch.manual_seed(0)
    model = build_model(cfg.model).eval()
    first = evaluate_stored(model, cfg, corpus=corpus)
    longer = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, lengths=[64, 128, 1024]))
    added = evaluate_stored(model, longer, corpus=corpus, lengths=[1024])
    again = evaluate_stored(model, longer, corpus=corpus, lengths=[128])
    assert again["perplexity"][128] == first["perplexity"][128]
    assert added["eval_protocol"] == first["eval_protocol"] == 2
    assert added["delta_p"][1024] == pytest.approx(first["perplexity"][64] - added["perplexity"][1024])
    windows = protocol_windows(longer, corpus)
    assert all(torch.equal(rows[:, -32:], windows[64][:, -32:]) for rows in windows.values())
