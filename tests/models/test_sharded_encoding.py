"""Streaming encode to shards: every line once, in order, resumable, bounded per shard."""

import json

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.models.sharded_encoding import read_embedding_shards
from keras_sentemb.models.sharded_encoding import read_manifest
from tests.conftest import make_tiny_encoder
from tests.numeric import assert_close_vectors
from tests.numeric import default_precision_bounds

FILE_A = ["a man plays the guitar", "", "the cat sits on the mat", "hello world", "x y z"]
FILE_B = ["the dog runs in the park", "world"]


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "a.txt").write_bytes(("\r\n".join(FILE_A) + "\n").encode("utf-8"))
    (tmp_path / "b.txt").write_text("\n".join(FILE_B), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("shard_format", ["npy", "tfrecord"])
def test_every_line_of_every_file_once_in_order(corpus, tmp_path, shard_format):
    enc = make_tiny_encoder()
    manifest = enc.encode_to_files(str(corpus / "*.txt"), tmp_path / "out", shard_size=2,
                                   shard_format=shard_format)
    ids, vectors = read_embedding_shards(tmp_path / "out")
    np.testing.assert_array_equal(
        ids, [[0, i] for i in range(len(FILE_A))] + [[1, i] for i in range(len(FILE_B))])
    assert_close_vectors(vectors, enc.encode(FILE_A + FILE_B), rtol=1e-5)
    assert manifest["complete"] and manifest["rows"] == 7 and manifest["dim"] == 32
    assert [s["rows"] for s in manifest["shards"]] == [2, 2, 1, 2]
    assert read_manifest(tmp_path / "out")["complete"]


def test_a_resumed_run_skips_written_shards_and_refuses_other_settings(corpus, tmp_path):
    enc = make_tiny_encoder()
    out = tmp_path / "out"
    enc.encode_to_files(str(corpus / "*.txt"), out, shard_size=2)
    first = {p.name: p.stat().st_mtime_ns for p in out.glob("embeddings-*")}
    # A crash after two shards: remove the others, and leave a partial temp file.
    for name in ("embeddings-00000-000002.npy", "embeddings-00001-000000.npy"):
        (out / name).unlink()
    (out / "embeddings-00001-000000.npy.tmp-1").write_bytes(b"partial")
    manifest = enc.encode_to_files(str(corpus / "*.txt"), out, shard_size=2)
    assert manifest["shards_skipped"] == 2 and manifest["shards_written"] == 2
    for name in ("embeddings-00000-000000.npy", "embeddings-00000-000001.npy"):
        assert (out / name).stat().st_mtime_ns == first[name]  # not rewritten
    ids, vectors = read_embedding_shards(out)
    assert len(ids) == 7
    assert_close_vectors(vectors, enc.encode(FILE_A + FILE_B), rtol=1e-5)
    with pytest.raises(ValueError, match="shard_size"):
        enc.encode_to_files(str(corpus / "*.txt"), out, shard_size=3)
    with pytest.raises(ValueError, match="normalize"):
        enc.encode_to_files(str(corpus / "*.txt"), out, shard_size=2, normalize=True)


def test_inputs_and_arguments_are_checked(corpus, tmp_path):
    enc = make_tiny_encoder()
    with pytest.raises(FileNotFoundError, match="No input file"):
        enc.encode_to_files(str(corpus / "*.csv"), tmp_path / "out")
    with pytest.raises(ValueError, match="shard_size"):
        enc.encode_to_files(str(corpus / "a.txt"), tmp_path / "out", shard_size=0)
    with pytest.raises(ValueError, match="shard_format"):
        enc.encode_to_files(str(corpus / "a.txt"), tmp_path / "out", shard_format="csv")


def test_cli_streams_a_glob_into_a_folder(corpus, tmp_path, capsys):
    model = tmp_path / "model"
    enc = make_tiny_encoder()
    enc.save(model)
    out = tmp_path / "shards"
    argv = ["encode", "--model", str(model), "--input", str(corpus / "*.txt"),
            "--output", str(out), "--shard-size", "3", "--normalize"]
    assert cli.main(argv) == 0
    ids, vectors = read_embedding_shards(out)
    assert_close_vectors(vectors, enc.encode(FILE_A + FILE_B, normalize=True),
                         **default_precision_bounds())
    assert "7 rows x 32 float32 in 3 shard(s) (0 already there)" in capsys.readouterr().err
    assert cli.main(argv) == 0  # the same command again: nothing to do
    assert "(3 already there)" in capsys.readouterr().err
    assert json.loads((out / "manifest.json").read_text())["model"] == str(model)
    # A folder output without --shard-size is still refused, with the hint.
    assert cli.main(["encode", "--model", str(model), "--input", str(corpus / "a.txt"),
                     "--output", str(out)]) == 2
    assert "--shard-size" in capsys.readouterr().err
    assert cli.main(["encode", "--model", str(model), "--input", str(corpus / "none*.txt"),
                     "--output", str(out), "--shard-size", "3"]) == 2
    assert "No input file matches" in capsys.readouterr().err
