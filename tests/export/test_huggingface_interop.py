"""Exported folders loaded by the real sentence-transformers and transformers.

`SentenceTransformer(folder).encode(...)` (and `AutoModel` token vectors) must
match `encode()` on the same sentences: min cosine >= 0.99999. The libraries
(and torch) are test-only dependencies; the package never imports them. They
run in their own interpreter (the `torch_worker` fixture), as a user's
PyTorch service loads an exported folder: TensorFlow and PyTorch never share
a process.
"""

import numpy as np
import pytest

from keras_sentemb.export.huggingface import export_huggingface
from keras_sentemb.models.vocabulary import extend_vocabulary
from keras_sentemb.models.whitening import Whitening
from tests.export.hf_helpers import SENTS, make_tiny_bert, make_tiny_roberta

CHINESE = ["我喜欢在公园里散步。", "我喜欢猫。", "猫在垫子上。", "a man 喜欢 the guitar ."]


def _min_cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float((np.sum(a * b, 1) / np.maximum(norms, 1e-12)).min())


def _whitened(encoder):
    corpus = [f"{a} {b} ." for a in ("a man", "the cat", "a dog", "the woman", "x")
              for b in ("sits on the mat", "runs", "is playing", "plays the piano", "z y")]
    encoder.postprocess = Whitening.from_vectors(encoder.encode(corpus, precision="float32"), dim=8,
                                                 pooling=encoder.pooling)
    return encoder


CASES = {
    "bert-mean": lambda: make_tiny_bert(pooling="mean"),
    "bert-cls-normalize": lambda: make_tiny_bert(pooling="cls", normalize=True),
    "bert-max-projection-tanh": lambda: make_tiny_bert(pooling="max", projection_dim=8,
                                                       projection_activation="tanh"),
    "bert-whitened-cls": lambda: _whitened(make_tiny_bert(pooling="cls")),
    "bert-projection-normalize-whitened": lambda: _whitened(
        make_tiny_bert(pooling="mean", normalize=True, projection_dim=12)),
}


@pytest.fixture(scope="module")
def roberta():
    # One encoder for the module: building and tracing the byte-level BPE
    # tokenizer is most of a tiny RoBERTa's cost.
    return make_tiny_roberta()


def _set(encoder, pooling, normalize):
    encoder.pooling, encoder.normalize = pooling, normalize
    return encoder


@pytest.mark.parametrize("case", list(CASES) + ["roberta-mean", "roberta-cls-normalize"])
def test_sentence_transformers_encodes_as_encode(case, tmp_path, request, torch_worker):
    if case.startswith("roberta"):
        normalize = case.endswith("normalize")
        encoder = _set(request.getfixturevalue("roberta"), case.split("-")[1], normalize)
    else:
        encoder = CASES[case]()
    export_huggingface(encoder, tmp_path / "m", verify=False)
    theirs = torch_worker.st_encode(tmp_path / "m", SENTS)
    ours = encoder.encode(SENTS, precision="float32")
    assert theirs.shape == ours.shape
    assert _min_cosine(theirs, ours) >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(theirs, axis=1), np.linalg.norm(ours, axis=1),
                               rtol=1e-4)


def test_extended_vocabulary_encodes_chinese_as_encode(tmp_path, torch_worker):
    grown = extend_vocabulary(make_tiny_bert(pooling="mean"), CHINESE * 2, min_count=1)
    export_huggingface(grown, tmp_path / "m", verify=False)
    _, theirs = torch_worker.request("hf_token_ids", folder=tmp_path / "m", sentences=CHINESE)
    ours = grown.preprocess(np.array(CHINESE))
    for i in range(len(CHINESE)):
        n = int(ours["padding_mask"][i].numpy().sum())
        assert theirs[f"ids_{i}"].tolist() == ours["token_ids"][i, :n].numpy().tolist()
    assert _min_cosine(torch_worker.st_encode(tmp_path / "m", CHINESE),
                       grown.encode(CHINESE, precision="float32")) >= 0.99999


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_transformers_automodel_gives_the_token_vectors(family, tmp_path, request, torch_worker):
    encoder = make_tiny_bert() if family == "bert" else request.getfixturevalue("roberta")
    export_huggingface(encoder, tmp_path / "m", format="transformers", verify=False)
    answer, batch = torch_worker.request("hf_hidden_states", folder=tmp_path / "m",
                                         sentences=SENTS)
    assert answer["model_class"] == ("BertModel" if family == "bert" else "RobertaModel")
    theirs = batch["last_hidden_state"]
    inputs = encoder.preprocess(np.array(SENTS))
    np.testing.assert_array_equal(batch["input_ids"], inputs["token_ids"].numpy())
    ours = encoder.hidden_states(inputs)[-1].numpy()
    mask = batch["attention_mask"].astype(bool)
    assert _min_cosine(theirs[mask], ours[mask]) >= 0.99999


@pytest.mark.integration
def test_default_model_round_trips_through_sentence_transformers(default_encoder, tmp_path,
                                                                torch_worker):
    from keras_sentemb.data.resources import bundled_sts_dir
    from keras_sentemb.evaluation.readers import read_stsb

    pairs = read_stsb(bundled_sts_dir(), "test")
    sentences = list(dict.fromkeys(s for pair in pairs[:150] for s in pair[:2]))
    export_huggingface(default_encoder, tmp_path / "minilm")
    theirs = torch_worker.st_encode(tmp_path / "minilm", sentences)
    assert _min_cosine(theirs, default_encoder.encode(sentences, precision="float32")) >= 0.99999


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("method,extra", [("ct", ["--steps", "2", "--batch-size", "8", "--dev", "none"]),
                                          ("whitening", ["--pooling", "cls", "--dev", "none"])])
def test_cli_train_export_loads_in_sentence_transformers(method, extra, tmp_path, capsys,
                                                        torch_worker):
    # The round trip on a fresh checkout: train from the default model, export as a
    # sentence-transformers folder, load it with the real library.
    from keras_sentemb.cli import main
    from keras_sentemb.data.resources import bundled_corpus
    from keras_sentemb.data.resources import bundled_sts_dir
    from keras_sentemb.evaluation.readers import read_stsb
    from keras_sentemb.models import SentenceEncoder

    corpus = tmp_path / "corpus.txt"
    lines = open(bundled_corpus(), encoding="utf-8").read().splitlines()[:400]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["train", method, "--model", "default", "--train-file", str(corpus),
                 "--output", str(tmp_path / "model"), "--verbose", "0"] + extra) == 0
    assert main(["export", "--model", str(tmp_path / "model"), "--format", "sentence-transformers",
                 "--output", str(tmp_path / "hf")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "hf")
    pairs = read_stsb(bundled_sts_dir(), "test")
    sentences = list(dict.fromkeys(s for pair in pairs[:100] for s in pair[:2]))
    ours = SentenceEncoder.from_preset(str(tmp_path / "model")).encode(sentences, precision="float32")
    assert _min_cosine(torch_worker.st_encode(tmp_path / "hf", sentences), ours) >= 0.99999
