import numpy as np
import pytest

from keras_sentemb.models.pooling import SentencePooling, parse_pooling, pool_hidden_states

RNG = np.random.default_rng(0)
STATES = [RNG.normal(size=(3, 5, 4)).astype("float32") for _ in range(4)]  # emb + 3 layers
MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], "int32")


def np_mean(h):
    return np.stack([h[i, : MASK[i].sum()].mean(0) for i in range(3)])


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("cls", STATES[-1][:, 0]),
        ("mean", np_mean(STATES[-1])),
        ("max", np.stack([STATES[-1][i, : MASK[i].sum()].max(0) for i in range(3)])),
        ("mean_last2", 0.5 * (np_mean(STATES[-1]) + np_mean(STATES[-2]))),
        ("first_last", 0.5 * (np_mean(STATES[1]) + np_mean(STATES[-1]))),
        ("layer:0", np_mean(STATES[0])),
        ("layer:2", np_mean(STATES[2])),
    ],
)
def test_pooling_closed_forms(mode, expected):
    got = np.asarray(pool_hidden_states(STATES, MASK, parse_pooling(mode, 3)))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert got.dtype == np.float32


def test_padding_values_do_not_leak():
    states = [s.copy() for s in STATES]
    states[-1][0, 3:] = 1e6  # padding of row 0
    for mode in ("mean", "max"):
        got = np.asarray(pool_hidden_states(states, MASK, mode))
        ref = np.asarray(pool_hidden_states(STATES, MASK, mode))
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_all_padding_row_is_zero_not_nan():
    mask = np.zeros((1, 5), "int32")
    got = np.asarray(pool_hidden_states([STATES[-1][:1]], mask, "mean"))
    assert np.all(got == 0)


def test_parse_pooling_normalises_and_validates():
    assert parse_pooling(" MEAN ") == "mean"
    assert parse_pooling("layer:-1", num_layers=6) == "layer:6"
    with pytest.raises(ValueError, match="Unknown pooling 'avg'"):
        parse_pooling("avg")
    with pytest.raises(ValueError, match="out of range"):
        parse_pooling("layer:7", num_layers=6)
    with pytest.raises(ValueError, match="must be a string"):
        parse_pooling(3)


def test_layer_config_round_trip():
    layer = SentencePooling("mean_last2")
    assert SentencePooling.from_config(layer.get_config()).mode == "mean_last2"
