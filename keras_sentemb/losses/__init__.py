"""Contrastive losses: pure functions of embeddings, computed in float32.

Every in-batch loss gathers its candidates across replicas under a
`tf.distribute` strategy; see `keras_sentemb.losses.distributed` for the
convention trainers follow (per-replica loss / num_replicas_in_sync,
gradients summed by the optimizer).
"""

from keras_sentemb.losses.contrastive_tension import (
    contrastive_tension_in_batch_loss,
)
from keras_sentemb.losses.contrastive_tension import (
    contrastive_tension_loss,
)
from keras_sentemb.losses.distributed import gather_across_replicas
from keras_sentemb.losses.distributed import num_replicas_in_sync
from keras_sentemb.losses.distributed import replica_offset
from keras_sentemb.losses.distributed import scale_loss_for_replicas
from keras_sentemb.losses.classification import binary_classification_loss
from keras_sentemb.losses.classification import pair_features
from keras_sentemb.losses.classification import softmax_classification_loss
from keras_sentemb.losses.flow import flow_nll_loss
from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.keras_losses import ContrastiveTensionInBatchLoss
from keras_sentemb.losses.keras_losses import ContrastiveTensionLoss
from keras_sentemb.losses.keras_losses import CosineMSELoss
from keras_sentemb.losses.keras_losses import InfoNCELoss
from keras_sentemb.losses.keras_losses import NTXentLoss
from keras_sentemb.losses.masked_language_model import masked_token_loss
from keras_sentemb.losses.nt_xent import nt_xent_loss
from keras_sentemb.losses.paraphrase import paraphrase_loss
from keras_sentemb.losses.regression import cosine_mse_loss
from keras_sentemb.losses.self_guided import self_guided_loss
from keras_sentemb.losses.self_guided import weight_distance_regularizer
from keras_sentemb.losses.similarity import cosine_similarity_matrix
from keras_sentemb.losses.similarity import dot_similarity_matrix
from keras_sentemb.losses.similarity import l2_normalize

__all__ = [
    "ContrastiveTensionInBatchLoss",
    "ContrastiveTensionLoss",
    "CosineMSELoss",
    "InfoNCELoss",
    "NTXentLoss",
    "binary_classification_loss",
    "contrastive_tension_in_batch_loss",
    "contrastive_tension_loss",
    "cosine_mse_loss",
    "cosine_similarity_matrix",
    "dot_similarity_matrix",
    "flow_nll_loss",
    "gather_across_replicas",
    "info_nce_loss",
    "l2_normalize",
    "masked_token_loss",
    "nt_xent_loss",
    "pair_features",
    "paraphrase_loss",
    "num_replicas_in_sync",
    "replica_offset",
    "scale_loss_for_replicas",
    "self_guided_loss",
    "softmax_classification_loss",
    "weight_distance_regularizer",
]
