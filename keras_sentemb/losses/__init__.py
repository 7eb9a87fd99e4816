"""Contrastive losses: pure functions of embeddings, computed in float32.

Every in-batch loss gathers its candidates across replicas under a
`tf.distribute` strategy; see `keras_sentemb.losses.distributed` for the
convention trainers follow (per-replica loss / num_replicas_in_sync,
gradients summed by the optimizer).
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_sentemb.losses.contrastive_tension import (  # noqa: E402
    contrastive_tension_in_batch_loss,
)
from keras_sentemb.losses.contrastive_tension import (  # noqa: E402
    contrastive_tension_loss,
)
from keras_sentemb.losses.distributed import gather_across_replicas  # noqa: E402
from keras_sentemb.losses.distributed import num_replicas_in_sync  # noqa: E402
from keras_sentemb.losses.distributed import replica_offset  # noqa: E402
from keras_sentemb.losses.distributed import scale_loss_for_replicas  # noqa: E402
from keras_sentemb.losses.info_nce import info_nce_loss  # noqa: E402
from keras_sentemb.losses.nt_xent import nt_xent_loss  # noqa: E402
from keras_sentemb.losses.similarity import cosine_similarity_matrix  # noqa: E402
from keras_sentemb.losses.similarity import dot_similarity_matrix  # noqa: E402
from keras_sentemb.losses.similarity import l2_normalize  # noqa: E402

__all__ = [
    "contrastive_tension_in_batch_loss",
    "contrastive_tension_loss",
    "cosine_similarity_matrix",
    "dot_similarity_matrix",
    "gather_across_replicas",
    "info_nce_loss",
    "l2_normalize",
    "nt_xent_loss",
    "num_replicas_in_sync",
    "replica_offset",
    "scale_loss_for_replicas",
]
