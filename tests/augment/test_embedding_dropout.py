import numpy as np
import pytest

from keras_sentemb.augment import EmbeddingDropout


@pytest.mark.parametrize("rate", [0.1, 0.2, 0.5])
def test_bernoulli_rate_and_scaling(rate):
    embeddings = np.random.default_rng(0).uniform(0.5, 1.5, (32, 64, 64)).astype(
        "float32"
    )
    out = np.asarray(EmbeddingDropout(rate=rate, seed=0)(embeddings, training=True))
    dropped = out == 0
    # 131072 elements: the std of the dropped fraction is below 0.0015.
    assert abs(dropped.mean() - rate) < 0.01
    np.testing.assert_allclose(
        out[~dropped], embeddings[~dropped] / (1.0 - rate), rtol=1e-6
    )


def test_exact_mode_matches_consert(batch):
    embeddings, mask, lengths = batch
    hidden = embeddings.shape[-1]
    rate = 0.2
    out = np.asarray(
        EmbeddingDropout(rate=rate, mode="exact", seed=3)(
            embeddings, padding_mask=mask, training=True
        )
    )
    for row, n in enumerate(lengths):
        dropped = out[row] == 0
        assert dropped.sum() == int(rate * n * hidden)
        assert not dropped[n:].any()
        # No rescaling of the kept elements.
        np.testing.assert_array_equal(out[row][~dropped], embeddings[row][~dropped])


def test_invalid_mode():
    with pytest.raises(ValueError, match="'gaussian'"):
        EmbeddingDropout(mode="gaussian")
