"""A Keras callback recording alignment and uniformity on STS-B pairs during training."""

import logging

from keras_sentemb import validation
from keras_sentemb.evaluation.alignment_uniformity import AlignmentUniformityTracker
from keras_sentemb.evaluation.alignment_uniformity import sts_alignment_uniformity
from keras_sentemb.evaluation.readers import load_stsb_pairs

logger = logging.getLogger(__name__)


class STSAlignmentUniformityTracker(AlignmentUniformityTracker):
    """Alignment and uniformity of the trainer's encoder on STS-B pairs, every `every` steps.

    Works with any trainer exposing `.encoder` (every `fit_*` trainer): pass
    it in `callbacks=[...]`. Measured before training, every `every`
    optimizer steps and at the end (SimCSE's Figure 2 trajectories); the
    values also go to the Keras logs as `alignment` / `uniformity`. The
    schedule is `AlignmentUniformityTracker`'s (the parallel-pairs view);
    only what is measured differs (`sts_alignment_uniformity`).

    Args:
        data: `"stsb"`, a path or a list of `(s1, s2, score)`. Defaults to
            `"stsb"`.
        split: str. Defaults to `"dev"`.
        every: int. Steps between measurements. Defaults to `100`.
        threshold: float. Gold score of the positive pairs. Defaults to `4.0`.
        pooling: str or None. Defaults to the encoder's own.

    Examples:

    ```python
    tracker = STSAlignmentUniformityTracker(every=50)
    keras_sentemb.fit_simcse("corpus.txt", steps=500, callbacks=[tracker])
    tracker.history  # [{"step": 0, "alignment": .., "uniformity": ..}, ...]
    tracker.plot("trajectory.png")
    ```

    References:
        - [Gao et al., 2021](https://arxiv.org/abs/2104.08821): SimCSE, Figure 2.
    """
    def __init__(self, data="stsb", split="dev", every=100, threshold=4.0, pooling=None):
        super().__init__(load_stsb_pairs(data, split), validation.positive_int(every, "every"),
                         target_pooling=pooling)
        self.threshold = float(threshold)

    def measure(self):
        step = int(self.model.optimizer.iterations.numpy()) if self.model.optimizer else 0
        if self.history and self.history[-1]["step"] == step:
            return self.history[-1]
        result = sts_alignment_uniformity(self.model.encoder, self.pairs, threshold=self.threshold,
                                          pooling=self.target_pooling)
        point = {"step": step, "alignment": result["alignment"], "uniformity": result["uniformity"]}
        self.history.append(point)
        logger.info("step %d: alignment %.4f uniformity %.4f", step, point["alignment"], point["uniformity"])
        return point
