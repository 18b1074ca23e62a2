"""`orchestrator data prepare` and `orchestrator data verify`: the command line over dape_core.data.prepare."""

import json

from typer.testing import CliRunner

from dape_core.data import snapshot_documents
from orchestrator.cli import app


def _corpus(folder):
    folder.mkdir()
    texts = [text for _, text in snapshot_documents(300) if 3_000 < len(text) < 30_000][:20]
    for i, text in enumerate(texts):
        (folder / f"{i}.txt").write_bytes(text)
    return folder


def test_prepare_writes_the_default_layout_and_says_how_to_use_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["data", "prepare", str(_corpus(tmp_path / "corpus")), "--quiet",
                                      "--val-fraction", "0.25"])
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "data/paper/tokens.meta.json").read_text())
    assert meta["tokenizer"]["kind"] == "byte" and meta["split"]["val_fraction"] == 0.25
    assert "data: {source: tokens, path: data/paper/tokens.bin, dtype: uint16, val_fraction: 0.25}" in result.output
    verified = CliRunner().invoke(app, ["data", "verify", "data/paper/tokens.bin"])
    assert verified.exit_code == 0 and "matches its metadata (sha256" in verified.output
    with (tmp_path / "data/paper/tokens.bin").open("r+b") as handle:
        handle.seek(100)
        handle.write(b"\x09\x00")
    changed = CliRunner().invoke(app, ["data", "verify", "data/paper/tokens.bin", "--quick"])
    assert changed.exit_code == 1 and "changed since it was prepared" in changed.output


def test_bad_options_and_inputs_exit_2_naming_them(tmp_path):
    invalid = CliRunner().invoke(app, ["data", "prepare", "x", "--train-tokenizer", "100", "--test-fraction", "1",
                                       "-o", str(tmp_path / "out")])
    assert invalid.exit_code == 2
    assert "--train-tokenizer: Input should be greater than 256" in invalid.output
    assert "--test-fraction: Input should be less than 1" in invalid.output
    missing = CliRunner().invoke(app, ["data", "prepare", str(tmp_path / "nothing"), "-o", str(tmp_path / "out")])
    assert missing.exit_code == 2 and "does not exist" in missing.output and "Nothing was written" in missing.output
    unprepared = CliRunner().invoke(app, ["data", "verify", str(tmp_path / "nothing.bin")])
    assert unprepared.exit_code == 2 and "has no metadata" in unprepared.output


def test_prepare_says_how_many_repeated_documents_followed_their_first_copy(tmp_path):
    import planted_duplicates

    planted_duplicates.plant(tmp_path / "corpus")
    result = CliRunner().invoke(app, ["data", "prepare", str(tmp_path / "corpus"), "-o", str(tmp_path / "out"),
                                      "--quiet", "--val-fraction", str(planted_duplicates.VAL_FRACTION)])
    assert result.exit_code == 0, result.output
    assert "4 document(s) repeat an earlier one's content and went to its split (4 of them would have crossed " \
           "splits by their name)" in " ".join(result.output.split())
