"""The weights signature: the precision copies copy again when, and only when, the weights moved.

`encode` in bfloat16 or int8 on a float32 encoder runs a copy; copying every weight at every
call cost more than a short request's forward pass. The copy now takes the weights again only
when `weights_signature` says they changed: these tests pin what it sees (every variable's
ends and evenly spaced samples, the set of variables), that an unchanged encoder copies
nothing and does not recalibrate int8, and that a changed one does.
"""

import numpy as np

from keras_sentemb.kernels import int8_transformer
from keras_sentemb.models import weights_signature as signatures
from keras_sentemb.models.weights_signature import forget_copies
from keras_sentemb.models.weights_signature import sample_positions
from keras_sentemb.models.weights_signature import weights_signature
from tests.conftest import make_tiny_encoder
from tests.conftest import spy_calls
from tests.numeric import cosines

SENTENCES = ["a man plays the guitar", "the cat sits on the mat", "hello world", ""]


def test_sample_positions_are_evenly_spaced_with_both_ends():
    assert sample_positions(5).tolist() == [0, 1, 2, 3, 4]
    positions = sample_positions(1000)
    assert len(positions) == signatures.SAMPLES
    assert positions[0] == 0 and positions[-1] == 999
    gaps = np.diff(positions)
    assert gaps.min() >= 66 and gaps.max() <= 67
    assert sample_positions(0).tolist() == []


def test_the_signature_changes_with_any_weights_moved_and_only_then():
    encoder = make_tiny_encoder()
    first = weights_signature(encoder)
    assert weights_signature(encoder) == first  # reading changes nothing
    encoder.encode(SENTENCES)
    assert weights_signature(encoder) == first

    weights = encoder.get_weights()
    encoder.set_weights([w + 1e-3 for w in weights])  # as an optimizer step moves them
    moved = weights_signature(encoder)
    assert moved != first
    encoder.set_weights(weights)
    assert weights_signature(encoder) == first  # the same values, the same signature

    gamma = encoder.backbone.weights[-1]  # one variable, the last element only
    values = gamma.numpy()
    values.reshape(-1)[-1] += 0.5
    gamma.assign(values)
    assert weights_signature(encoder) != first


def test_an_unchanged_encoder_copies_nothing_and_a_changed_one_copies_again(monkeypatch):
    encoder = make_tiny_encoder()
    encoder.encode(SENTENCES, precision="bfloat16")  # the twin is made
    twin = encoder.precision_twin("bfloat16")
    copies = spy_calls(monkeypatch, twin, "set_weights")
    for _ in range(3):
        encoder.encode(SENTENCES, precision="bfloat16")
    assert copies == []

    encoder.set_weights([w * 0.5 for w in encoder.get_weights()])
    halved = encoder.encode(SENTENCES, precision="bfloat16")
    assert len(copies) == 1
    assert cosines(halved, encoder.encode(SENTENCES, precision="float32")).min() > 0.99
    encoder.encode(SENTENCES, precision="bfloat16")
    assert len(copies) == 1


def test_int8_is_calibrated_once_for_unchanged_weights_and_again_after_a_change(monkeypatch):
    encoder = make_tiny_encoder()
    calibrations = spy_calls(monkeypatch, int8_transformer, "calibration_ranges")
    before = encoder.encode(SENTENCES, precision="int8")
    encoder.encode(SENTENCES, precision="int8")
    encoder.encode(SENTENCES[:1], precision="int8")
    assert len(calibrations) == 1

    encoder.set_weights([w * 1.5 if w.ndim == 2 else w for w in encoder.get_weights()])
    scaled = encoder.encode(SENTENCES, precision="int8")
    assert len(calibrations) == 2
    assert cosines(scaled, encoder.encode(SENTENCES, precision="float32")).min() > 0.99
    assert not np.allclose(scaled, before)


def test_forget_copies_follows_an_edit_the_samples_do_not_see():
    encoder = make_tiny_encoder()
    sentence = "the cat sits on the mat"
    encoder.encode([sentence], precision="bfloat16")
    table = encoder.backbone.token_embedding.embeddings
    values = table.numpy()
    width = values.shape[1]
    seen = set(sample_positions(values.size).tolist())
    # A row of a token of the sentence, none of whose entries is sampled, set far from its values.
    row = next(int(i) for i in np.asarray(encoder.tokenizer(sentence))
               if not seen & set(range(int(i) * width, (int(i) + 1) * width)))
    before = weights_signature(encoder)
    stale = encoder.encode([sentence], precision="bfloat16")
    values[row] = 5.0
    table.assign(values)
    assert weights_signature(encoder) == before  # what the samples cannot see
    assert np.array_equal(encoder.encode([sentence], precision="bfloat16"), stale)
    forget_copies(encoder)
    followed = encoder.encode([sentence], precision="bfloat16")
    assert cosines(followed, encoder.encode([sentence], precision="float32")).min() > 0.99
    assert not np.allclose(followed, stale)


def test_forget_copies_remakes_the_int8_weights_of_a_bfloat16_encoder():
    """A bfloat16 encoder computes int8 through a float32 copy; an edit the samples miss
    reaches the int8 weights through that copy after `forget_copies`."""
    half = make_tiny_encoder().clone(dtype="bfloat16")
    sentence = "the cat sits on the mat"
    stale = half.encode([sentence], precision="int8")
    table = half.backbone.token_embedding.embeddings
    values = table.numpy().astype(np.float32)
    width = values.shape[1]
    seen = set(sample_positions(values.size).tolist())
    row = next(int(i) for i in np.asarray(half.tokenizer(sentence))
               if not seen & set(range(int(i) * width, (int(i) + 1) * width)))
    values[row] = 5.0
    table.assign(values)
    assert np.array_equal(half.encode([sentence], precision="int8"), stale)
    forget_copies(half)
    followed = half.encode([sentence], precision="int8")
    assert not np.allclose(followed, stale)
    assert cosines(followed, half.encode([sentence], precision="float32")).min() > 0.98
