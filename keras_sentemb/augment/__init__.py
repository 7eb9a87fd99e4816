"""View-making Keras layers (ConSERT / SimCSE augmentations).

See `keras_sentemb.augment.views` for the view protocol (`stage`,
`updates_mask`, `requires_gradients`) and the `make_view` registry.
"""

from keras_sentemb.augment.adversarial_perturbation import (
    AdversarialPerturbation,
)
from keras_sentemb.augment.adversarial_perturbation import (
    adversarial_perturbation,
)
from keras_sentemb.augment.embedding_dropout import EmbeddingDropout
from keras_sentemb.augment.feature_cutoff import FeatureCutoff
from keras_sentemb.augment.identity_view import IdentityView
from keras_sentemb.augment.span_cutoff import SpanCutoff
from keras_sentemb.augment.token_cutoff import TokenCutoff
from keras_sentemb.augment.token_shuffle import TokenShuffle
from keras_sentemb.augment.views import VIEW_NAMES
from keras_sentemb.augment.views import VIEW_REGISTRY
from keras_sentemb.augment.views import apply_embedding_view
from keras_sentemb.augment.views import apply_position_view
from keras_sentemb.augment.views import make_view

__all__ = [
    "AdversarialPerturbation",
    "EmbeddingDropout",
    "FeatureCutoff",
    "IdentityView",
    "SpanCutoff",
    "TokenCutoff",
    "TokenShuffle",
    "VIEW_NAMES",
    "VIEW_REGISTRY",
    "adversarial_perturbation",
    "apply_embedding_view",
    "apply_position_view",
    "make_view",
]
