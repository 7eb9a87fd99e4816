"""Vocabulary extension: which units, exact old outputs, new rows, save/load/export."""

import numpy as np
import pytest
import tensorflow as tf

import keras_sentemb
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.vocabulary import add_vocabulary
from keras_sentemb.models.vocabulary import alignment_probabilities
from keras_sentemb.models.vocabulary import can_extend
from keras_sentemb.models.vocabulary import extend_vocabulary
from keras_sentemb.models.vocabulary import new_vocabulary_units
from keras_sentemb.models.vocabulary import unknown_token_share
from keras_sentemb.models.vocabulary import unknown_words
from tests.conftest import TINY_VOCAB
from tests.conftest import make_tiny_encoder
from tests.helpers.models import make_tiny_roberta
from tests.numeric import assert_close_vectors

# 猫 x3, 狗 x2, "。" x1 (unknown single characters); αβγ x2, αβδ x1 (an
# alphabet the tiny vocabulary lacks); 中文 / the / man are known.
CORPUS = ["中文 猫 猫", "猫 狗 。", "ΑΒΓ αβδ αβγ", "the man 狗"]
OLD_TEXT = ["a man is playing a guitar .", "中文 hello", "Résumé café, NAÏVE!", "x y z", ""]


def ids(encoder, sentences):
    return encoder.tokenize(sentences).to_list()


def token_table(encoder):
    return encoder.adapter.token_embedding.embeddings.numpy()


def test_unknown_words_are_the_words_wordpiece_cannot_spell():
    counts = unknown_words(make_tiny_encoder(), CORPUS)
    # The tiny tokenizer lower-cases: "ΑΒΓ" is counted as "αβγ".
    assert counts == {"猫": 3, "狗": 2, "。": 1, "αβγ": 2, "αβδ": 1}


def test_single_characters_whole_and_pieces_for_longer_words():
    encoder = make_tiny_encoder()
    units = new_vocabulary_units(encoder, CORPUS, min_count=1)
    tokens = [t for t, _ in units]
    counts = [c for _, c in units]
    assert counts == sorted(counts, reverse=True)
    assert ("猫", 3) in units and ("狗", 2) in units and ("。", 1) in units
    pieces = [t for t in tokens if t not in ("猫", "狗", "。")]
    assert pieces and all(set(t.replace("##", "")) <= set("αβγδ") for t in pieces)
    grown = add_vocabulary(encoder, tokens)
    unk = grown.tokenizer.token_to_id("[UNK]")
    assert all(unk not in row for row in ids(grown, CORPUS))  # the corpus is covered
    # min_count and max_new_tokens
    assert "。" not in [t for t, _ in new_vocabulary_units(encoder, CORPUS, min_count=2)]
    assert new_vocabulary_units(encoder, CORPUS, max_new_tokens=1, min_count=1) == [("猫", 3)]


def test_old_text_keeps_its_ids_and_exact_outputs():
    encoder = make_tiny_encoder(pooling="mean")
    grown = extend_vocabulary(encoder, CORPUS, min_count=1)
    n_old = len(TINY_VOCAB)
    assert grown.tokenizer.vocabulary_size() > n_old
    assert grown.tokenizer.get_vocabulary()[:n_old] == TINY_VOCAB
    assert ids(grown, OLD_TEXT) == ids(encoder, OLD_TEXT)
    np.testing.assert_array_equal(grown.encode(OLD_TEXT), encoder.encode(OLD_TEXT))
    for pooling in ("cls", "max", "first_last"):
        np.testing.assert_array_equal(
            grown.encode(OLD_TEXT, pooling=pooling), encoder.encode(OLD_TEXT, pooling=pooling)
        )
    # New text gets new ids (it was [UNK] before) and other outputs.
    (old_row,), (new_row,) = ids(encoder, ["猫 狗"]), ids(grown, ["猫 狗"])
    assert old_row == [1, 1] and new_row == [grown.tokenizer.token_to_id(t) for t in ("猫", "狗")]
    assert min(new_row) >= n_old
    assert not np.allclose(grown.encode(["猫 狗"]), encoder.encode(["猫 狗"]), atol=1e-4)
    # The given encoder is untouched; settings are carried over.
    assert encoder.tokenizer.vocabulary_size() == n_old
    assert grown.declared_pooling == "mean" and grown.max_length == encoder.max_length


def test_other_weights_unchanged_and_mean_rows():
    encoder = make_tiny_encoder()
    grown = add_vocabulary(encoder, ["猫", "狗"], init="mean")
    old, new = token_table(encoder), token_table(grown)
    assert new.shape == (old.shape[0] + 2, old.shape[1])
    np.testing.assert_array_equal(new[: len(old)], old)
    mean = old.astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(new[len(old):], np.tile(mean, (2, 1)), rtol=1e-6, atol=1e-8)
    table = encoder.adapter.token_embedding.embeddings.path
    for a, b in zip(encoder.backbone.weights, grown.backbone.weights):
        assert a.path == b.path
        if a.path != table:
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert grown.adapter.token_embedding.embeddings.trainable
    assert grown.backbone.get_config()["vocabulary_size"] == len(old) + 2


def test_pieces_rows_average_what_the_old_tokenizer_made():
    encoder = make_tiny_encoder()
    old = token_table(encoder)
    t = encoder.tokenizer.token_to_id
    grown = add_vocabulary(encoder, ["dogs", "##mat", "猫"], init="pieces")
    rows = token_table(grown)[len(old):]
    np.testing.assert_allclose(rows[0], (old[t("dog")] + old[t("##s")]) / 2, atol=1e-7)
    np.testing.assert_allclose(rows[1], old[t("mat")], atol=1e-7)  # "##mat" spelled "mat"
    np.testing.assert_allclose(rows[2], old[t("[UNK]")], atol=1e-7)  # an unknown character


def test_normal_rows_are_distinct_seeded_and_scaled_like_the_table():
    encoder = make_tiny_encoder()
    tokens = [f"tok{i}" for i in range(400)]
    a = token_table(add_vocabulary(encoder, tokens, init="normal", seed=3))
    b = token_table(add_vocabulary(encoder, tokens, init="normal", seed=3))
    c = token_table(add_vocabulary(encoder, tokens, init="normal", seed=4))
    old = token_table(encoder)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a[len(old):], c[len(old):])
    new = a[len(old):]
    assert np.allclose(new.std(axis=0), old.std(axis=0), rtol=0.25)
    assert np.allclose(new.mean(axis=0), old.mean(axis=0), atol=4 * old.std(axis=0).max() / 20)


def test_gradients_reach_the_new_rows():
    grown = add_vocabulary(make_tiny_encoder(), ["猫", "狗"])
    inputs = grown.preprocess(tf.constant(["猫 man"]))
    table = grown.adapter.token_embedding.embeddings
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(grown.sentence_vectors(inputs) ** 2)
    grad = tf.convert_to_tensor(tape.gradient(loss, table)).numpy()
    cat, dog = (grown.tokenizer.token_to_id(x) for x in ("猫", "狗"))
    assert np.abs(grad[cat]).sum() > 0 and np.abs(grad[dog]).sum() == 0


def test_save_load_and_export_use_the_new_vocabulary(tmp_path):
    from keras_sentemb.export.saved_model import export_saved_model

    encoder = make_tiny_encoder(pooling="mean")
    grown = extend_vocabulary(encoder, CORPUS, min_count=1, init="normal")
    sentences = ["猫 狗 。", "αβγ the man", "中文 hello"]
    grown.save(tmp_path / "grown")
    loaded = SentenceEncoder.from_preset(str(tmp_path / "grown"))
    assert loaded.tokenizer.get_vocabulary() == grown.tokenizer.get_vocabulary()
    assert ids(loaded, sentences) == ids(grown, sentences)
    assert_close_vectors(loaded.encode(sentences, precision="float32"),
                         grown.encode(sentences, precision="float32"), rtol=1e-5)
    path = export_saved_model(grown, tmp_path / "served", probe_sentences=sentences)  # verified
    served = tf.saved_model.load(path).signatures["serving_default"](
        sentences=tf.constant(sentences))["embeddings"].numpy()
    assert_close_vectors(served, grown.encode(sentences, precision="float32"), rtol=1e-5)
    assert not np.allclose(served[0], encoder.encode(sentences)[0], atol=1e-3)


def test_alignment_probabilities_find_the_translation():
    encoder = add_vocabulary(make_tiny_encoder(), ["猫", "狗"])
    corpus = ["猫", "狗", "猫 狗", "猫 。", "狗"]
    translations = ["cat", "dog", "cat and dog", "the cat", "a dog"]
    target, source, t = alignment_probabilities(encoder, corpus, translations)
    tid, tok = encoder.tokenizer.token_to_id, encoder.tokenizer.id_to_token
    for f in set(target.tolist()):
        assert np.sum(t[target == f]) == pytest.approx(1.0)
    cat = dict(zip((tok(int(e)) for e in source[target == tid("猫")]), t[target == tid("猫")]))
    dog = dict(zip((tok(int(e)) for e in source[target == tid("狗")]), t[target == tid("狗")]))
    assert max(cat, key=cat.get) == "cat" and cat["cat"] > 0.5 > cat["dog"]
    assert max(dog, key=dog.get) == "dog" and dog["dog"] > 0.5 > dog["cat"]
    # "aligned" rows: the t-weighted mean of the source rows, so 猫 starts near "cat".
    old = token_table(encoder)[: len(TINY_VOCAB)]
    grown = add_vocabulary(make_tiny_encoder(), ["猫", "狗"], init="aligned", corpus=corpus,
                           translations=translations)
    row = token_table(grown)[tid("猫")]
    expected = sum(p * old[tid(e)] for e, p in cat.items() if tid(e) < len(TINY_VOCAB))
    np.testing.assert_allclose(row, expected / sum(p for e, p in cat.items()
                                                   if tid(e) < len(TINY_VOCAB)), atol=1e-6)
    distance = lambda w: np.linalg.norm(row - old[tid(w)])  # noqa: E731
    assert distance("cat") < distance("dog")
    with pytest.raises(ValueError, match="translations"):
        extend_vocabulary(make_tiny_encoder(), corpus, init="aligned")
    with pytest.raises(ValueError, match="align with"):
        alignment_probabilities(encoder, corpus, translations[:2])


def test_unknown_token_share():
    encoder = make_tiny_encoder()
    assert unknown_token_share(encoder, ["猫 man"]) == pytest.approx(0.5)
    assert unknown_token_share(extend_vocabulary(encoder, ["猫 猫"]), ["猫 man"]) == 0.0


def test_nothing_unknown_gives_an_equal_copy():
    encoder = make_tiny_encoder()
    same = extend_vocabulary(encoder, ["the man is playing"])
    assert same is not encoder and same.tokenizer.vocabulary_size() == len(TINY_VOCAB)
    np.testing.assert_array_equal(same.encode(OLD_TEXT), encoder.encode(OLD_TEXT))


def test_errors():
    encoder = make_tiny_encoder()
    with pytest.raises(ValueError, match="init"):
        extend_vocabulary(encoder, CORPUS, init="zeros")
    with pytest.raises(ValueError, match="max_new_tokens"):
        extend_vocabulary(encoder, CORPUS, max_new_tokens=0)
    with pytest.raises(ValueError, match="min_count"):
        extend_vocabulary(encoder, CORPUS, min_count=0)
    with pytest.raises(ValueError, match="single str"):
        extend_vocabulary(encoder, "猫 狗")
    with pytest.raises(ValueError, match="empty"):
        extend_vocabulary(encoder, [])
    with pytest.raises(ValueError, match="already in the vocabulary"):
        add_vocabulary(encoder, ["man"])
    with pytest.raises(ValueError, match="given twice|already"):
        add_vocabulary(encoder, ["猫", "猫"])
    with pytest.raises(ValueError, match="white space"):
        add_vocabulary(encoder, ["a b"])
    # Byte-level BPE has no unknown token (fit_parallel keeps its vocabulary).
    assert can_extend(encoder) and not can_extend(make_tiny_roberta())
    with pytest.raises(ValueError, match="WordPiece"):
        extend_vocabulary(make_tiny_roberta(), CORPUS)


def test_public_extend_vocabulary_keeps_units_seen_twice_with_mean_rows():
    # The documented defaults: min_count=2 (猫 x3, 狗 x2 kept; 。 and 鸟 once
    # each stay unknown), most frequent first, init="mean".
    assert "extend_vocabulary" in keras_sentemb.__all__
    encoder = make_tiny_encoder()
    grown = keras_sentemb.extend_vocabulary(encoder, ["猫 猫 狗", "猫 狗 。", "the 鸟"])
    n_old = len(TINY_VOCAB)
    assert grown.tokenizer.get_vocabulary() == TINY_VOCAB + ["猫", "狗"]
    assert ids(grown, ["狗 猫 。 鸟 man"]) == [[n_old + 1, n_old, 1, 1, TINY_VOCAB.index("man")]]
    old, new = token_table(encoder), token_table(grown)
    np.testing.assert_array_equal(new[:n_old], old)
    mean = old.astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(new[n_old:], np.tile(mean, (2, 1)), rtol=1e-6, atol=0)


def test_default_model_learns_chinese_and_keeps_english_exactly(default_encoder):
    from keras_sentemb.data.resources import bundled_sts_dir
    from keras_sentemb.evaluation.readers import read_stsb

    # Simplified and traditional characters, full-width punctuation, and 豈
    # (U+8C48), whose compatibility form U+F900 the default model's
    # normalization (NFD) maps onto it.
    corpus = ["我喜欢猫。", "他們喜歡狗！", "汤姆在哪里？", "豈有此理％"] * 2
    assert unknown_token_share(default_encoder, corpus) > 0.4
    grown = extend_vocabulary(default_encoder, corpus)
    assert unknown_token_share(grown, corpus) == 0.0
    assert ids(grown, ["\uf900"]) == ids(grown, ["豈"]) == [[grown.tokenizer.token_to_id("豈")]]
    english = [s for a, b, _ in read_stsb(bundled_sts_dir(), "dev")[:100] for s in (a, b)]
    assert ids(grown, english) == ids(default_encoder, english)
    np.testing.assert_array_equal(grown.encode(english, precision="float32"),
                                  default_encoder.encode(english, precision="float32"))


def naive_model1(corpus_ids, translation_ids, iterations):
    """IBM Model 1 EM written out with dicts (Brown et al., 1993, eq. 2-4 with NULL)."""
    pairs = [(list(f) + [-1], list(e)) for f, e in zip(corpus_ids, translation_ids)]
    t = {(f, e): 1.0 for fs, es in pairs for f in fs for e in es}
    for _ in range(iterations):
        counts, totals = {}, {}
        for fs, es in pairs:
            for e in es:
                z = sum(t[(f, e)] for f in fs)
                for f in fs:
                    c = t[(f, e)] / z
                    counts[(f, e)] = counts.get((f, e), 0.0) + c
                    totals[f] = totals.get(f, 0.0) + c
        t = {(f, e): c / totals[f] for (f, e), c in counts.items()}
    return t


def test_alignment_probabilities_equal_a_naive_model1():
    iterations = 3
    encoder = add_vocabulary(make_tiny_encoder(), ["猫", "狗", "鸟"])
    corpus = ["猫 狗", "猫 猫 。", "狗", "鸟 猫", "the 狗 鸟"]
    translations = ["cat and dog", "the cat", "a dog", "bird , cat", "the dog and the bird"]
    target, source, t = alignment_probabilities(encoder, corpus, translations, iterations=iterations)
    expected = naive_model1(ids(encoder, corpus), ids(encoder, translations), iterations)
    got = {(int(f), int(e)): float(p) for f, e, p in zip(target, source, t)}
    assert got.keys() == expected.keys()
    for key, p in expected.items():
        assert got[key] == pytest.approx(p, rel=1e-9)
    # More pairs than `max_pairs`: evenly spaced pairs, the first and last kept.
    sub = alignment_probabilities(encoder, corpus, translations, iterations=iterations, max_pairs=3)
    keep = [0, 2, 4]
    expected = naive_model1(ids(encoder, [corpus[i] for i in keep]),
                            ids(encoder, [translations[i] for i in keep]), iterations)
    got = {(int(f), int(e)): float(p) for f, e, p in zip(*sub)}
    assert got == pytest.approx(expected, rel=1e-9)
    with pytest.raises(ValueError, match="max_pairs"):
        alignment_probabilities(encoder, corpus, translations, max_pairs=0)
