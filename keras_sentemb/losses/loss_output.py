"""`LossOutput`: what a trainer's loss hooks return."""

import dataclasses
import typing


@dataclasses.dataclass(frozen=True)
class LossOutput:
    """The loss of a batch, with the metrics and auxiliary values computed with it.

    The one return type of a trainer's loss hooks (`compute_loss_terms` and
    `loss_from_embeddings`, see `keras_sentemb.trainers.base_trainer.BaseTrainer`).

    Args:
        loss: float32 scalar tensor. The loss of this replica's examples,
            averaged over them; the gradients are taken of it.
        metrics: dict of str to scalar tensor. Extra values to log; each one
            updates the trainer's metric of that name (`extra_metrics()`),
            others are ignored. Defaults to `{}`.
        aux: any nest of tensors, or None. Handed to the trainer's
            `after_update(aux, finite)` once the weights are updated (the
            parallel trainer's keys to enqueue). Defaults to `None`.

    Examples:

    >>> import tensorflow as tf
    >>> out = LossOutput(tf.constant(0.5), {"accuracy": tf.constant(1.0)})
    >>> float(out.loss), sorted(out.metrics)
    (0.5, ['accuracy'])
    """

    loss: typing.Any
    metrics: typing.Mapping[str, typing.Any] = dataclasses.field(default_factory=dict)
    aux: typing.Any = None

    def __post_init__(self):
        if self.loss is None or isinstance(self.loss, (tuple, list, dict, LossOutput)):
            raise TypeError(
                f"LossOutput.loss must be a scalar tensor; received {type(self.loss).__name__}."
            )
        if not isinstance(self.metrics, typing.Mapping) or not all(
            isinstance(k, str) for k in self.metrics
        ):
            raise TypeError(
                f"LossOutput.metrics must be a dict of str to scalar tensors; received "
                f"{self.metrics!r}."
            )

    @staticmethod
    def check(value, hook):
        """`value` if it is a `LossOutput`, else a one-line TypeError naming `hook`."""
        if not isinstance(value, LossOutput):
            raise TypeError(
                f"{hook} must return a LossOutput (keras_sentemb.losses.loss_output); "
                f"received {type(value).__name__}."
            )
        return value
