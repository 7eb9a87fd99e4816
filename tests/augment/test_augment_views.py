import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.augment import AdversarialPerturbation
from keras_sentemb.augment import EmbeddingDropout
from keras_sentemb.augment import FeatureCutoff
from keras_sentemb.augment import IdentityView
from keras_sentemb.augment import SpanCutoff
from keras_sentemb.augment import TokenCutoff
from keras_sentemb.augment import TokenShuffle
from keras_sentemb.augment import VIEW_NAMES
from keras_sentemb.augment import apply_embedding_view
from keras_sentemb.augment import apply_position_view
from keras_sentemb.augment import make_view


def test_registry_names_classes_and_defaults():
    assert VIEW_NAMES == (
        "none",
        "shuffle",
        "token_cutoff",
        "feature_cutoff",
        "span_cutoff",
        "dropout",
        "dropout_exact",
    )
    expected = {
        "none": (IdentityView, {}),
        "shuffle": (TokenShuffle, {"keep_special": False}),
        "token_cutoff": (TokenCutoff, {"rate": 0.15}),
        "feature_cutoff": (FeatureCutoff, {"rate": 0.2}),
        "span_cutoff": (SpanCutoff, {"rate": 0.1, "mode": "keep"}),
        "dropout": (EmbeddingDropout, {"rate": 0.2, "mode": "bernoulli"}),
        "dropout_exact": (EmbeddingDropout, {"rate": 0.2, "mode": "exact"}),
    }
    for name, (cls, defaults) in expected.items():
        view = make_view(name)
        assert type(view) is cls
        config = view.get_config()
        for key, value in defaults.items():
            assert config[key] == value
        assert view.stage == ("positions" if name == "shuffle" else "embeddings")
        assert view.updates_mask == (name == "span_cutoff")
        assert view.requires_gradients is False


def test_make_view_overrides_and_ignores_none():
    view = make_view("token_cutoff", rate=0.3, seed=5, name="v1")
    assert (view.rate, view.seed, view.name) == (0.3, 5, "v1")
    assert make_view("feature_cutoff", rate=None).rate == 0.2
    assert isinstance(make_view("none", seed=3), IdentityView)
    assert make_view("span_cutoff", mode="cut").mode == "cut"


def test_make_view_rejects_unknown_name_listing_valid_ones():
    with pytest.raises(ValueError) as info:
        make_view("cutoff")
    message = str(info.value)
    assert "'cutoff'" in message
    for name in VIEW_NAMES:
        assert repr(name) in message


def test_make_view_rejects_arguments_the_view_does_not_take():
    with pytest.raises(ValueError, match="rate"):
        make_view("shuffle", rate=0.1)
    with pytest.raises(ValueError, match="rate"):
        make_view("none", rate=0.1)
    with pytest.raises(ValueError, match="1.5"):
        make_view("token_cutoff", rate=1.5)


def test_adversarial_is_not_registered():
    assert "adversarial" not in VIEW_NAMES
    assert AdversarialPerturbation.requires_gradients is True


@pytest.mark.parametrize("name", VIEW_NAMES)
def test_apply_helpers_route_by_stage(batch, name):
    embeddings, mask, lengths = batch
    position_ids = np.tile(np.arange(mask.shape[1], dtype="int32"), (len(mask), 1))
    view = make_view(name, seed=0)
    new_ids = np.asarray(
        apply_position_view(view, position_ids, mask, training=True)
    )
    new_embeddings, new_mask = apply_embedding_view(
        view, embeddings, mask, training=True
    )
    new_embeddings = np.asarray(new_embeddings)
    if name == "shuffle":
        np.testing.assert_array_equal(new_embeddings, embeddings)
        assert not np.array_equal(new_ids, position_ids)
    else:
        np.testing.assert_array_equal(new_ids, position_ids)
    if name == "span_cutoff":
        assert np.asarray(new_mask).sum() < mask.sum()
    else:
        assert new_mask is mask
    if name in ("none", "shuffle"):
        np.testing.assert_array_equal(new_embeddings, embeddings)
    else:
        assert not np.array_equal(new_embeddings, embeddings)


def test_apply_helpers_accept_none_and_reject_adversarial(batch):
    embeddings, mask, _ = batch
    out, out_mask = apply_embedding_view(None, embeddings, mask, training=True)
    assert out is embeddings and out_mask is mask
    assert apply_position_view(None, mask, mask) is mask
    with pytest.raises(ValueError, match="gradient"):
        apply_embedding_view(
            AdversarialPerturbation(), tf.constant(embeddings), mask, training=True
        )
    with pytest.raises(ValueError, match="stage"):
        apply_embedding_view(object(), embeddings, mask)
