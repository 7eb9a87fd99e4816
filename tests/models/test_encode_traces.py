"""A long-lived encoder's traced graphs stay bounded, whatever sizes its calls have.

`encode` traces one forward pass per variant (pooling, normalization,
post-processing, int8) with an input signature of any shape, and one
tokenizer graph; requests of every size reuse them. Where a forward pass
calls an XLA-compiled kernel it compiles once per batch shape, so the
shapes `encode` feeds it are bounded too: at most `batch_size` rows, and a
width from the bucket list or `max_length`.
"""

import random

import pytest

from keras_sentemb.models.encoding_engine import ENCODE_BUCKETS
from keras_sentemb.models.encoding_engine import EXACT_BUCKETS
from tests.conftest import TINY_VOCAB

WORDS = TINY_VOCAB[5:]


def _requests(count, seed=0):
    rng = random.Random(seed)
    for _ in range(count):
        yield [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 80)))
               for _ in range(rng.randint(1, 40))]


def _traces(encoder):
    """Traces of the forward passes and tokenizer graphs of `encoder` and its precision twins."""
    models = [encoder, *encoder._precision_twins.values()]
    count = 0
    for model in models:
        count += sum(fn.experimental_get_tracing_count() for fn in model._encode_fns.values())
        if model._tokenize_graph is not None:
            count += model._tokenize_graph.experimental_get_tracing_count()
    return count


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_traced_functions_stay_at_their_bound_over_varied_sizes(tiny_encoder, precision):
    calls = list(_requests(12))
    tiny_encoder.encode(calls[0], precision=precision)
    after_first = _traces(tiny_encoder)
    # The forward pass of this variant (in the precision's twin, or the encoder itself) and
    # the tokenizer graph: nothing else.
    assert after_first <= 3
    for sentences in calls[1:]:
        tiny_encoder.encode(sentences, precision=precision)
    assert _traces(tiny_encoder) == after_first
    tiny_encoder.encode(calls[1], precision=precision, normalize=True)  # a second variant
    assert _traces(tiny_encoder) == after_first + 1


@pytest.mark.parametrize("buckets", [ENCODE_BUCKETS, EXACT_BUCKETS], ids=["per_shape", "exact"])
def test_batch_shapes_are_bounded(tiny_encoder, buckets):
    batch_size, max_length = 8, 48
    shapes = set()
    for sentences in _requests(30, seed=1):
        for _, ids, mask in tiny_encoder.packed_batches(sentences, batch_size, max_length,
                                                        buckets=buckets):
            assert ids.shape == mask.shape
            shapes.add(ids.shape)
    widths = {w for w in buckets if w < max_length} | {max_length}
    assert all(1 <= rows <= batch_size and width in widths for rows, width in shapes), shapes
    assert len(shapes) <= batch_size * len(widths)
