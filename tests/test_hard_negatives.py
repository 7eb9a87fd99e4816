"""mine_hard_negatives on fixed vectors (known rankings) and with a tiny encoder."""

import numpy as np
import pytest

from keras_sentemb.hard_negatives import mine_hard_negatives
from keras_sentemb.hard_negatives import write_triplets_csv
from keras_sentemb.data.nli import load_supervised
from tests.conftest import make_tiny_encoder

# Angles on a circle: cosine(anchor, text) = cos(angle difference).
ANGLES = {"a": 0, "p": 10, "n1": 5, "n2": 20, "n3": 40, "n4": 80, "b": 180, "q": 175}


def table(texts):
    radians = np.deg2rad([ANGLES[t] for t in texts])
    return np.stack([np.cos(radians), np.sin(radians)], axis=1).astype(np.float32)


PAIRS = [("a", "p"), ("b", "q")]
CORPUS = ["n1", "n2", "n3", "n4"]


def test_ranks_exclusions_and_order():
    rows, stats = mine_hard_negatives(table, PAIRS, num_negatives=2, corpus=CORPUS,
                                      return_stats=True)
    # For "a": ranked n1 (5), [p excluded], n2 (20), n3 (40), n4 (80), q, [b is not a candidate].
    assert rows[:2] == [("a", "p", "n1"), ("a", "p", "n2")]
    # For "b": q is its positive; p, a... -> the nearest are n4 (100 deg away) and n3 (140).
    assert rows[2:] == [("b", "q", "n4"), ("b", "q", "n3")]
    assert stats["negatives"] == 4 and stats["candidates"] == 6


def test_range_margin_and_max_score():
    # range_min=1 skips n1 for "a".
    rows = mine_hard_negatives(table, PAIRS[:1], corpus=CORPUS, range_min=1, range_max=3)
    assert rows == [("a", "p", "n2")]
    # margin 0: n1 (cos 5 deg) is closer than the positive (cos 10 deg): dropped.
    rows, stats = mine_hard_negatives(table, PAIRS[:1], corpus=CORPUS, margin=0.0,
                                      return_stats=True)
    assert rows == [("a", "p", "n2")] and stats["filtered_by_margin"] == 1
    # max_score below cos(20 deg) leaves n3 first.
    rows = mine_hard_negatives(table, PAIRS[:1], corpus=CORPUS, max_score=0.9)
    assert rows == [("a", "p", "n3")]


def test_n_tuple_rows_and_random_sampling():
    rows = mine_hard_negatives(table, PAIRS[:1], corpus=CORPUS, num_negatives=3,
                               output_format="n-tuple")
    assert rows == [("a", "p", "n1", "n2", "n3")]
    # Not enough negatives within the range: the n-tuple row is left out.
    assert mine_hard_negatives(table, PAIRS[:1], num_negatives=1, range_min=5, range_max=6,
                               output_format="n-tuple", corpus=CORPUS) == []
    picks = {mine_hard_negatives(table, PAIRS[:1], corpus=CORPUS, range_max=4, sampling="random",
                                 seed=s)[0][2] for s in range(12)}
    assert picks <= {"n1", "n2", "n3", "n4", "q"} and len(picks) > 1
    same = [mine_hard_negatives(table, PAIRS[:1], corpus=CORPUS, sampling="random", seed=3)
            for _ in range(2)]
    assert same[0] == same[1]


def test_an_anchor_with_several_positives_never_gets_them_as_negatives():
    rows = mine_hard_negatives(table, [("a", "p"), ("a", "n1")], corpus=CORPUS)
    assert [r[2] for r in rows] == ["n2", "n2"]


def test_triplets_feed_supervised_simcse_data(tmp_path):
    encoder = make_tiny_encoder()
    pairs = [("a man is playing a guitar", "the man plays guitar"),
             ("the cat sits on the mat", "a cat is on the mat"),
             ("a dog runs in the park", "the dog runs")]
    rows = mine_hard_negatives(encoder, pairs, corpus=["the woman plays the piano"])
    assert len(rows) == 3 and all(len(r) == 3 and r[2] != r[1] for r in rows)
    path = write_triplets_csv(rows, tmp_path / "mined.csv")
    kind, loaded = load_supervised(path)
    assert kind == "triplets" and loaded == rows


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"pairs": []}, "non-empty list"),
        ({"pairs": [("a", "")]}, "row 0 must be two non-empty str"),
        ({"num_negatives": 0}, "num_negatives"),
        ({"range_min": 3, "range_max": 3}, "range_max"),
        ({"num_negatives": 3, "range_max": 2}, "smaller than `num_negatives`"),
        ({"sampling": "best"}, "sampling"),
        ({"output_format": "csv"}, "output_format"),
        ({"margin": "0.1"}, "margin"),
    ],
)
def test_bad_arguments(kwargs, message):
    kwargs = {"pairs": PAIRS, **kwargs}
    with pytest.raises(ValueError, match=message):
        mine_hard_negatives(table, **kwargs)
