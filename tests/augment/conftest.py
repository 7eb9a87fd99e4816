"""Fixtures for the view-layer tests: right-padded random batches."""

import numpy as np
import pytest

# Row lengths cover a single token, full rows and lengths whose cut counts
# differ between rates (e.g. int(0.15 * 7) = 1, int(0.15 * 20) = 3).
LENGTHS = (20, 7, 1, 13, 2, 20, 10, 5)
SEQ_LEN = 20
HIDDEN = 16


def make_batch(lengths=LENGTHS, seq_len=SEQ_LEN, hidden=HIDDEN, seed=0):
    """Embeddings with no zero entry, an int32 right-padded mask, lengths."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths)
    embeddings = rng.uniform(0.5, 1.5, size=(len(lengths), seq_len, hidden))
    embeddings *= rng.choice([-1.0, 1.0], size=embeddings.shape)
    mask = (np.arange(seq_len)[None, :] < lengths[:, None]).astype("int32")
    return embeddings.astype("float32"), mask, lengths


@pytest.fixture
def batch():
    return make_batch()


@pytest.fixture
def batch_factory():
    return make_batch
