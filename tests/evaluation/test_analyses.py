"""Analyses: STS alignment/uniformity (+ callback), frequent-token removal, t-SNE/PCA maps, CLI."""

import json

import numpy as np
import pytest
from scipy.stats import spearmanr

import keras_sentemb
from keras_sentemb import cli
from keras_sentemb.evaluation.alignment_uniformity import alignment
from keras_sentemb.evaluation.alignment_uniformity import sts_alignment_uniformity
from keras_sentemb.evaluation.alignment_uniformity import uniformity
from keras_sentemb.evaluation.embedding_map import embedding_map
from keras_sentemb.evaluation.embedding_map import pca
from keras_sentemb.evaluation.embedding_map import tsne
from keras_sentemb.evaluation.sts import cosine_scores
from keras_sentemb.evaluation.sts_alignment_uniformity_tracker import STSAlignmentUniformityTracker
from keras_sentemb.evaluation.token_removal import frequent_token_removal
from keras_sentemb.evaluation.token_removal import token_frequencies
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS, STS_PAIRS as PAIRS, STS_SENTENCES as SENTENCES
from tests.helpers.files import write_stsb
from keras_sentemb.kernels.precision import PIN_ENV


@pytest.fixture(autouse=True)
def float32_encode(monkeypatch):
    """These tests check results against float32 references (a SavedModel, closed forms, the
    model's own forward pass), so `"auto"` computes float32 here; the default precision is
    tested in tests/test_default_precision.py."""
    monkeypatch.setenv(PIN_ENV, "float32")


# Scores on 0-5 with several pairs >= 4.
SCORED = [(a, b, 5.0 * ((i * 7) % 11) / 10) for i, (a, b, _) in enumerate(PAIRS)]


def test_sts_alignment_uniformity_is_simcse_s_definition():
    encoder = make_tiny_encoder()
    result = sts_alignment_uniformity(encoder, SCORED)
    vectors = encoder.encode(sorted(SENTENCES))
    index = {s: i for i, s in enumerate(sorted(SENTENCES))}
    positive = [p for p in SCORED if p[2] >= 4]
    assert result["num_positive_pairs"] == len(positive) > 0
    want_a = alignment(vectors[[index[p[0]] for p in positive]], vectors[[index[p[1]] for p in positive]])
    assert result["alignment"] == pytest.approx(want_a, rel=1e-6)
    assert result["uniformity"] == pytest.approx(uniformity(vectors), rel=1e-6)
    assert "pairs scored >= 4" in result["protocol"]
    with pytest.raises(ValueError, match="No pair"):
        sts_alignment_uniformity(encoder, SCORED, threshold=6)


def test_tracker_records_a_trajectory_during_fit(tmp_path):
    tracker = STSAlignmentUniformityTracker(SCORED, every=2)
    keras_sentemb.fit_simcse(CORPUS[:32], model=make_tiny_encoder(), steps=4, eval_every=2, dev="none",
                             batch_size=8, verbose=0, callbacks=[tracker])
    assert [h["step"] for h in tracker.history] == [0, 2, 4]
    assert tracker.history[0] != tracker.history[-1]  # the weights moved
    assert tracker.plot(tmp_path / "t.png").exists()


def test_frequent_token_removal_is_a_masked_mean():
    encoder = make_tiny_encoder()
    result = frequent_token_removal(encoder, SCORED, top_k=(0, 2), count_special=False)
    # k = 0 is plain mean pooling.
    vectors = encoder.encode(sorted(SENTENCES), pooling="mean")
    index = {s: i for i, s in enumerate(sorted(SENTENCES))}
    cos = cosine_scores(vectors[[index[p[0]] for p in SCORED]], vectors[[index[p[1]] for p in SCORED]])
    assert result["points"][0]["spearman"] == pytest.approx(100 * spearmanr(cos, [p[2] for p in SCORED])[0])
    # k = 2: the two most frequent words of the sentences leave the average.
    counts = token_frequencies(encoder, sorted(SENTENCES))
    vocab = encoder.tokenizer.get_vocabulary()
    specials = {encoder.start_token_id, encoder.end_token_id, encoder.pad_token_id}
    top = [t for t in np.argsort(-counts, kind="stable") if t not in specials][:2]
    assert result["points"][1]["removed"] == [vocab[t] for t in top]
    inputs = encoder.preprocess(sorted(SENTENCES))
    states = np.asarray(encoder.hidden_states(inputs)[-1])
    keep = inputs["padding_mask"].numpy().astype(bool) & ~np.isin(inputs["token_ids"].numpy(), top)
    manual = (states * keep[:, :, None]).sum(1) / keep.sum(1, keepdims=True)
    cos = cosine_scores(manual[[index[p[0]] for p in SCORED]], manual[[index[p[1]] for p in SCORED]])
    assert result["points"][1]["spearman"] == pytest.approx(100 * spearmanr(cos, [p[2] for p in SCORED])[0],
                                                            abs=1e-4)


def test_frequent_token_removal_ranks_cls_and_sep_as_the_paper_counts_them():
    encoder = make_tiny_encoder()
    sentences = sorted(SENTENCES)
    counts = token_frequencies(encoder, sentences)
    assert counts.max() < len(sentences)  # every word is rarer than [CLS] / [SEP] here
    result = frequent_token_removal(encoder, SCORED, top_k=(0, 1, 2, 3))
    vocab = encoder.tokenizer.get_vocabulary()
    cls, sep = vocab[encoder.start_token_id], vocab[encoder.end_token_id]
    assert result["count_special"] is True and "as the paper" in result["protocol"]
    assert result["points"][2]["removed"] == [cls, sep]  # once per sentence each: the top 2
    word = vocab[int(np.argmax(counts))]
    assert result["points"][3]["removed"] == [cls, sep, word]
    # k = 2 averages the word tokens only.
    inputs = encoder.preprocess(sentences)
    states = np.asarray(encoder.hidden_states(inputs)[-1])
    ids = inputs["token_ids"].numpy()
    keep = inputs["padding_mask"].numpy().astype(bool) & ~np.isin(
        ids, [encoder.start_token_id, encoder.end_token_id])
    manual = (states * keep[:, :, None]).sum(1) / keep.sum(1, keepdims=True)
    index = {s: i for i, s in enumerate(sentences)}
    cos = cosine_scores(manual[[index[p[0]] for p in SCORED]], manual[[index[p[1]] for p in SCORED]])
    expected = 100 * spearmanr(cos, [p[2] for p in SCORED])[0]
    assert result["points"][2]["spearman"] == pytest.approx(expected, abs=1e-4)


def test_pca_and_tsne_separate_clusters():
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 10, (3, 20))
    x = np.concatenate([c + rng.normal(0, 1, (30, 20)) for c in centers])
    labels = np.repeat([0, 1, 2], 30)
    for coords in (pca(x), tsne(x, perplexity=10)):
        d = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
        np.fill_diagonal(d, np.inf)
        nearest = labels[np.argmin(d, axis=1)]
        assert np.mean(nearest == labels) > 0.95
    np.testing.assert_allclose(np.abs(pca([[0.0, 0.0], [2.0, 0.0], [4.0, 0.1]], 1)[:, 0]), [2, 0, 2], atol=0.01)
    with pytest.raises(ValueError, match="at least 4"):
        tsne(x[:3])


def test_embedding_map_sts_and_task(tmp_path):
    from tests.helpers.files import write_downstream

    encoder = make_tiny_encoder()
    sts = embedding_map(encoder, SCORED, method="pca", path=tmp_path / "sts.png")
    assert sts["num_points"] == 2 * len(SCORED) and len(sts["label_names"]) == 5
    assert (tmp_path / "sts.png").read_bytes()[:4] == b"\x89PNG"
    root = write_downstream(tmp_path / "downstream", n=20)
    trec = embedding_map(encoder, root, "test", task="TREC", max_points=15, path=tmp_path / "trec.png")
    assert trec["num_points"] == 15 and trec["label_names"][0] == "ABBR"
    json.dumps(trec)
    with pytest.raises(ValueError, match="pair task"):
        embedding_map(encoder, root, "test", task="MRPC")


def test_cli_analyze_writes_png_json_csv(tmp_path, capsys):
    tiny = tmp_path / "tiny"
    make_tiny_encoder().save(tiny)
    other = tmp_path / "other"
    make_tiny_encoder(num_layers=3).save(other)
    sts = tmp_path / "STSBenchmark"
    write_stsb(sts, {"dev": SCORED, "test": SCORED})
    for analysis, extra in (("alignment-uniformity", ["--compare", str(other)]),
                            ("token-removal", ["--top-k", "0,1,3"]),
                            ("layers", ["--poolings", "cls,mean"]),
                            ("map", ["--method", "pca"])):
        out = tmp_path / analysis
        assert cli.main(["analyze", analysis, "--model", str(tiny), "--data", str(sts),
                         "--output", str(out)] + extra) == 0, capsys.readouterr().err
        printed = json.loads(capsys.readouterr().out)
        stem = analysis.replace("-", "_")
        assert printed["png"].endswith(f"{stem}.png") and (out / f"{stem}.png").exists()
        saved = json.loads((out / f"{stem}.json").read_text())
        assert saved["analysis"] == analysis
        assert (out / f"{stem}.csv").read_text().count("\n") > 1
    saved = json.loads((tmp_path / "alignment-uniformity" / "alignment_uniformity.json").read_text())
    assert set(saved["results"]) == {"tiny", "other"}
    assert cli.main(["analyze", "map", "--model", str(tiny), "--compare", str(other),
                     "--output", str(tmp_path / "x")]) == 2
