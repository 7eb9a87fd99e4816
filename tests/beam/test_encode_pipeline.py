"""The Beam encode pipeline on the DirectRunner: the shards `encode_to_files` writes."""

import numpy as np
import pytest

import apache_beam as beam  # noqa: E402  (the test extra installs it)

from keras_sentemb.beam.encode_pipeline import build_pipeline  # noqa: E402
from keras_sentemb.beam.encode_pipeline import main  # noqa: E402
from keras_sentemb.models.sharded_encoding import read_embedding_shards  # noqa: E402
from keras_sentemb.models.sharded_encoding import read_manifest  # noqa: E402
from tests.conftest import make_tiny_encoder  # noqa: E402
from tests.numeric import assert_close_vectors

FILE_A = ["a man plays the guitar", "", "the cat sits on the mat", "hello world", "x y z"]
FILE_B = ["the dog runs in the park", "world"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("beam")
    (folder / "a.txt").write_text("\n".join(FILE_A) + "\n", encoding="utf-8")
    (folder / "b.txt").write_text("\n".join(FILE_B), encoding="utf-8")
    encoder = make_tiny_encoder(pooling="mean")
    encoder.save(folder / "model")
    return folder, encoder


@pytest.mark.parametrize("shard_format", ["npy", "tfrecord"])
def test_direct_runner_writes_the_shards_of_encode_to_files(corpus, tmp_path, shard_format):
    folder, encoder = corpus
    out = tmp_path / "beam_out"
    with beam.Pipeline(runner="DirectRunner") as pipeline:
        build_pipeline(pipeline, str(folder / "*.txt"), str(out), model=str(folder / "model"),
                       shard_size=2, batch_size=3, shard_format=shard_format)
    ids, vectors = read_embedding_shards(out)
    expected_ids = [[0, i] for i in range(len(FILE_A))] + [[1, i] for i in range(len(FILE_B))]
    np.testing.assert_array_equal(ids, expected_ids)
    assert_close_vectors(vectors, encoder.encode(FILE_A + FILE_B, precision="float32"), rtol=1e-5)
    manifest = read_manifest(out)
    assert manifest["complete"] and manifest["rows"] == 7
    assert [s["name"] for s in manifest["shards"]] == [
        "00000-000000", "00000-000001", "00000-000002", "00001-000000"]
    # The same folder layout as the single-machine streaming encoder.
    local = tmp_path / "local_out"
    encoder.encode_to_files(str(folder / "*.txt"), str(local), shard_size=2,
                            shard_format=shard_format)
    assert sorted(p.name for p in out.glob("embeddings-*")) == sorted(
        p.name for p in local.glob("embeddings-*"))


def test_command_line_passes_runner_flags_to_beam(corpus, tmp_path):
    folder, encoder = corpus
    out = tmp_path / "cli_out"
    assert main(["--model", str(folder / "model"), "--input", str(folder / "b.txt"),
                 "--output", str(out), "--shard-size", "10", "--normalize",
                 "--runner", "DirectRunner", "--direct_num_workers", "1"]) == 0
    ids, vectors = read_embedding_shards(out)
    np.testing.assert_array_equal(ids, [[0, 0], [0, 1]])
    assert_close_vectors(vectors, encoder.encode(FILE_B, normalize=True, precision="float32"), rtol=1e-5)
