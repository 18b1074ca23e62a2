"""Both readers of raw text (the in-memory `text`/`hf_disk` sources and `prepare_corpus`'s streaming inputs) find
their files and open saved Hugging Face datasets through one function each (dape_core/data/raw_inputs.py): the
same path gives the same files, and the same dataset problem the same explanation."""

import pytest

from dape_core.data.config import DataConfig
from dape_core.data.inputs import expand_inputs, read_pieces
from dape_core.data.sources import text_files


@pytest.mark.parametrize("spec", ["folder", "folder/**/*.txt", "folder/b/two.txt"])
def test_both_readers_find_the_same_files(tmp_path, spec):
    (tmp_path / "folder" / "b").mkdir(parents=True)
    for name in ("one.txt", "b/two.txt", "b/skip.md"):
        (tmp_path / "folder" / name).write_text(f"text of {name}")
    path = str(tmp_path / spec)
    root, files = text_files(DataConfig(source="text", path=path, pattern="**/*.txt"))
    sources = expand_inputs([path], ("**/*.txt",))
    assert [source.path for source in sources] == files
    assert [source.key for source in sources] == [file.relative_to(root).as_posix() for file in files]


def test_both_readers_explain_a_saved_dataset_the_same_way(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"body": ["a b", "c d"]})}).save_to_disk(
        str(tmp_path / "saved"))
    sources = expand_inputs([str(tmp_path / "saved")])
    assert [source.format for source in sources] == ["hf_disk"]
    assert [piece.text for piece in read_pieces(sources, text_field="body")] == [b"a b", b"c d"]
    from dape_core.data import load_corpus

    for options, problem in (({"text_field": "text"}, "text_field 'text' is not a column of the dataset at "),
                             ({"text_field": "body", "hf_split": "test"}, "hf_split 'test' is not in the dataset at ")):
        with pytest.raises(ValueError) as streamed:
            list(read_pieces(sources, **options))
        with pytest.raises(ValueError) as in_memory:
            load_corpus(DataConfig(source="hf_disk", path=str(tmp_path / "saved"), **options))
        assert problem in str(streamed.value) and str(in_memory.value) == "data." + str(streamed.value)
