"""Data preparation throughput, and what a prepared token file saves at every trial start.

    python tests/benchmarks/bench_data_prepare.py              # about 6 minutes on 2 cores
    python tests/benchmarks/bench_data_prepare.py --gb 0.25    # a smaller token file for the load figures

Corpus: the embedded snapshot of CPython 3.11.7's standard library source (what the `stdlib` data source
reads; nothing is downloaded), written out once as files. Prints:
1. preparation throughput in MB of text per second, byte-level (the whole corpus) and a byte-level BPE
   trained on the corpus (vocabulary --vocab; the first --bpe-mb MB), with one process and with every core,
   and the ratio between them;
2. the time a trial spends before its first training step on a token file of about --gb GB (the stdlib
   tiled, byte-level), before (no metadata: the out-of-vocabulary scan and the chunk split, as every trial
   did) and after (the metadata lookup), with the page cache warm and dropped (posix_fadvise DONTNEED);
3. what 1 GB of text costs here, extrapolated from 1: time and disk space for each tokenizer.
The load average is printed: on a shared machine the all-cores figure is only as good as the idle cores;
"MB per CPU-second" (one process, its CPU time) is what one dedicated core would do.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from dape_core import ExperimentConfig, ModelConfig, run_experiment
from dape_core.data import DataConfig, PrepareConfig, load_corpus, prepare_corpus, snapshot_documents
from dape_core.data.prepare import available_cpus
from dape_core.data.token_meta import metadata_path
from dape_core.evaluate import EvalConfig
from dape_core.train import TrainConfig

MB = 1e6
STDLIB = Path(tempfile.gettempdir()) / "bench_data_prepare_stdlib"  # the snapshot written out as files


@functools.lru_cache(maxsize=1)
def _stdlib_files() -> list[Path]:
    """The embedded stdlib snapshot's files, written once under STDLIB (sorted, as the snapshot holds them)."""
    files = []
    for key, content in snapshot_documents():
        path = STDLIB / key
        if not path.is_file() or path.stat().st_size != len(content):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        files.append(path)
    return files


def _link_corpus(folder: Path, copies: int, limit_mb: float | None = None) -> float:
    """`copies` copies of the stdlib snapshot's .py files (the first `limit_mb` MB of them) as symlinks under
    `folder`; returns the text's MB."""
    size = 0
    for copy in range(copies):
        for path in _stdlib_files():
            if limit_mb is not None and size >= limit_mb * MB:
                break
            link = folder / f"copy{copy}" / path.relative_to(STDLIB)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
            size += path.stat().st_size
    return size / MB


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (the tokenizing workers, once joined)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _prepare(inputs: Path, out: Path, workers: int | None, **options) -> tuple[float, dict]:
    started, cpu = time.perf_counter(), _cpu_seconds()
    meta = prepare_corpus(PrepareConfig(inputs=[str(inputs)], output=str(out), pattern=["**/*.py"], workers=workers,
                                        **options))
    meta["cpu_seconds"] = _cpu_seconds() - cpu
    return time.perf_counter() - started, meta


def throughput(work: Path, vocab: int, bpe_mb: float) -> dict:
    corpus, subset = work / "stdlib", work / "subset"
    text_mb, subset_mb = _link_corpus(corpus, 1), _link_corpus(subset, 1, bpe_mb)
    print(f"corpus: Python standard library source, {len(_stdlib_files())} files, {text_mb:.1f} MB of text "
          f"(BPE: its first {subset_mb:.1f} MB); {available_cpus()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    rates = {}
    for workers in (1, available_cpus()):
        seconds, meta = _prepare(corpus, work / f"byte{workers}", workers)
        rates[("byte", workers)] = (text_mb / seconds, meta)
    started = time.perf_counter()
    _, trained = _prepare(subset, work / "bpe_trained", available_cpus(), train_tokenizer=vocab)
    train_seconds = time.perf_counter() - started
    tokenizer = work / "bpe_trained" / "tokenizer.json"
    for workers in (1, available_cpus()):
        seconds, meta = _prepare(subset, work / f"bpe{workers}", workers, tokenizer=str(tokenizer))
        rates[("bpe", workers)] = (subset_mb / seconds, meta)
    training = train_seconds - subset_mb / rates[("bpe", available_cpus())][0]  # the same run less its tokenizing
    trained_mb = trained["tokenizer"]["trained_on_bytes"] / MB
    print(f"BPE {vocab}: trained on {trained_mb:.1f} MB of training documents in about {training:.1f} s "
          f"({trained_mb / max(training, 1e-9):.1f} MB/s; "
          f"the whole preparation with training took {train_seconds:.1f} s)")
    rates["bpe_training_mb_s"] = trained_mb / max(training, 1e-9)
    for kind, label in (("byte", "byte-level (vocab 256)"), ("bpe", f"byte-level BPE (vocab {vocab})")):
        one, many = rates[(kind, 1)][0], rates[(kind, available_cpus())][0]
        meta = rates[(kind, 1)][1]
        per_cpu = meta["text_bytes"] / MB / meta["cpu_seconds"]
        print(f"prepare {label:<28} 1 process: {one:6.2f} MB/s   {available_cpus()} processes: {many:6.2f} MB/s   "
              f"(x{many / one:.2f}; {per_cpu:.2f} MB per CPU-second; {meta['tokens'] / meta['text_bytes']:.3f} "
              f"tokens/byte, {meta['dtype']})")
    return rates


class _FirstStep:
    def __init__(self):
        self.at = None

    def on_step(self, step, loss, lr):
        self.at = self.at or time.perf_counter()


def _drop_cache(path: Path) -> None:
    with path.open("rb") as handle:
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def _time_to_first_step(data: DataConfig, cold: bool) -> tuple[float, float]:
    """(seconds in load_corpus, seconds from run_experiment's call to its first training step)."""
    if cold:
        _drop_cache(Path(data.path))
    started = time.perf_counter()
    load_corpus(data)
    loaded = time.perf_counter() - started
    if cold:
        _drop_cache(Path(data.path))
    cfg = ExperimentConfig(model=ModelConfig(preset="tiny", vocab_size=256), data=data,
                           train=TrainConfig(steps=1, batch_size=4, seq_len=64, log_every=1),
                           eval=EvalConfig(lengths=[64], tail_tokens=32, n_windows=4, timing=False))
    callback = _FirstStep()
    started = time.perf_counter()
    run_experiment(cfg, callback)
    return loaded, callback.at - started


def loading(work: Path, gb: float, repeats: int) -> None:
    copies = max(1, round(gb * 1e9 / 2 / (sum(p.stat().st_size for p in _stdlib_files()))))
    text_mb = _link_corpus(work / "tiled", copies)
    seconds, meta = _prepare(work / "tiled", work / "big", None)  # the default: one process for byte-level
    token_file = work / "big" / "tokens.bin"
    print(f"token file: {meta['content']['bytes'] / 1e9:.2f} GB ({copies} copies of the stdlib, byte-level, uint16), "
          f"prepared from {text_mb:.0f} MB of text in {seconds:.1f} s ({text_mb / seconds:.1f} MB/s, "
          f"{meta['prepared']['workers']} process)")
    data = DataConfig(source="tokens", path=str(token_file))
    _time_to_first_step(data, cold=False)  # warm-up: the first experiment in a process pays torch's start-up
    figures = {}
    for state in ("after", "before"):
        if state == "before":
            metadata_path(token_file).rename(work / "meta.json")  # what every token file was until now
        for cold in (False, True):
            runs = [_time_to_first_step(data, cold) for _ in range(repeats)]
            figures[(state, cold)] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
    for cold in (False, True):
        before, after = figures[("before", cold)], figures[("after", cold)]
        print(f"trial start on a {meta['content']['bytes'] / 1e9:.2f} GB token file, page cache "
              f"{'dropped' if cold else 'warm   '}: load_corpus {before[0]:7.3f} s before (scan) -> {after[0]:6.3f} s "
              f"after (metadata), x{before[0] / after[0]:.0f};  to the first step {before[1]:7.3f} s -> "
              f"{after[1]:6.3f} s")


def per_gigabyte(rates: dict, vocab: int) -> None:
    for kind, label in (("byte", "byte-level"), ("bpe", f"BPE {vocab}")):
        meta = rates[(kind, 1)][1]
        disk = meta["tokens"] / meta["text_bytes"] * 1e9 * (2 if meta["dtype"] == "uint16" else 4) / 1e9
        one, many = (1e9 / MB / rates[(kind, workers)][0] for workers in (1, available_cpus()))
        training = f" + about {1e9 / MB / rates['bpe_training_mb_s'] / 60:.1f} min to train it on 1 GB" \
            if kind == "bpe" else ""
        print(f"1 GB of text, {label:<10} (extrapolated): {many / 60:5.1f} min with {available_cpus()} processes "
              f"({one / 60:.1f} min with 1){training}, {disk:.2f} GB token file (+ the text, read, not copied)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=8192, help="BPE vocabulary trained on the corpus")
    parser.add_argument("--bpe-mb", type=float, default=8.0, help="MB of the corpus used for the BPE figures")
    parser.add_argument("--gb", type=float, default=1.0, help="size of the token file whose loading is timed")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_prepare_") as folder:
        work = Path(folder)
        rates = None if args.skip_throughput else throughput(work, args.vocab, args.bpe_mb)
        loading(work, args.gb, args.repeats)
        if rates:
            per_gigabyte(rates, args.vocab)


if __name__ == "__main__":
    main()
