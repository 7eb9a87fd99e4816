"""Self-guided contrastive losses (SG, SG-OPT and the paper's two ablations) against float64 loops."""

import numpy as np
import pytest

from keras_sentemb.losses.self_guided import sg_base_loss
from keras_sentemb.losses.self_guided import sg_opt1_loss
from keras_sentemb.losses.self_guided import sg_opt2_loss
from keras_sentemb.losses.self_guided import sg_opt3_loss
from tests.helpers.self_guided_reference import TAU, ref_base, ref_opt1, ref_opt2, ref_opt3

# Hand-made vectors: 3 sentences, 4 dims, 2 views each.
C = np.array([[1.0, 0.0, 0.0, 0.5], [0.0, 2.0, 0.0, 0.0], [1.0, 1.0, 1.0, -1.0]], np.float32)
H = np.array([[0.9, 0.1, 0.0, 0.4], [0.2, 1.0, -0.3, 0.0], [1.0, 0.5, 2.0, -1.0]], np.float32)
HV = np.stack([H, np.array([[1.0, 0.5, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0], [0.3, 0.3, 1.0, 0.0]], np.float32)], axis=1)


@pytest.mark.parametrize(
    "fn,ref", [(sg_base_loss, ref_base), (sg_opt1_loss, ref_opt1), (sg_opt2_loss, ref_opt2)]
)
def test_pair_losses_match_closed_form(fn, ref):
    got = float(fn(C, H, temperature=TAU))
    np.testing.assert_allclose(got, ref(C, H), rtol=1e-5)


def test_opt3_matches_closed_form():
    got = float(sg_opt3_loss(C, HV, temperature=TAU))
    np.testing.assert_allclose(got, ref_opt3(C, HV), rtol=1e-5)
    per_term = sg_opt3_loss(C, HV, temperature=TAU, reduction="none")
    assert per_term.shape == (3, 2)


def test_one_hot_closed_forms_at_paper_temperature():
    # c_i = h_i = e_i: positive cosine 1, every negative cosine 0.
    b, tau = 4, 0.01
    e = np.eye(b, dtype=np.float32)
    expected_opt2 = np.log1p((b - 1) * np.exp(-1 / tau))
    expected_opt1 = np.log1p(2 * (b - 1) * np.exp(-1 / tau))
    np.testing.assert_allclose(float(sg_opt2_loss(e, e, tau)), expected_opt2, atol=1e-7)
    np.testing.assert_allclose(float(sg_opt1_loss(e, e, tau)), expected_opt1, atol=1e-7)
    np.testing.assert_allclose(float(sg_base_loss(e, e, tau)), expected_opt1, atol=1e-7)
    # Two identical views per sentence: the other own view is not a negative.
    views = np.stack([e, e], axis=1)
    expected_opt3 = np.log1p(2 * (b - 1) * np.exp(-1 / tau))
    np.testing.assert_allclose(float(sg_opt3_loss(e, views, tau)), expected_opt3, atol=1e-7)
    # Positive orthogonal to c (cos 0), negatives cos 0 too: log(1 + (b-1)V).
    rolled = np.roll(e, 1, axis=0)
    np.testing.assert_allclose(
        float(sg_opt3_loss(e, np.stack([rolled] * 3, 1), 1.0)),
        # positive h_{i,k} = e_{i-1}: cos 0 except negatives m = i+1 -> cos 1
        np.log(1 + 3 * np.e + 3 * 2),
        rtol=1e-6,
    )


def test_opt3_with_one_view_equals_opt2():
    np.testing.assert_allclose(
        float(sg_opt3_loss(C, H[:, None, :], 1.0)), float(sg_opt2_loss(C, H, 1.0)), rtol=1e-5
    )


def test_loss_argument_errors():
    with pytest.raises(ValueError, match="3D"):
        sg_opt3_loss(C, H)
    with pytest.raises(ValueError, match="temperature"):
        sg_opt1_loss(C, H, temperature=0.0)
    with pytest.raises(ValueError, match="same shape"):
        sg_opt1_loss(C, H[:2])
