"""The report's "3 Given" contrastive pre-training and its fine-tuning, as a `fit_multitask` preset.

"Contrastive Learning for Generalizable Sentence Embeddings" (Stanford
CS224N report) gets its best supervised results (Table 2, "3 Given") from
contrastive pre-training on the three given datasets before the task heads:

- section 4.1: "sentence pairs come from the Quora dataset where pairs that
  are paraphrases (with label 1) are taken as positive pairs. Sentence pairs
  that are not paraphrases (with label 0) are taken as negative pairs ... In
  each epoch, this is followed by unsupervised training on the other 2
  datasets sequentially";
- section 5.3: "contrastive pre-training is performed on the 3 datasets for 5
  epochs"; default temperature 0.05, batch size 16; Table 10: pre-training
  learning rate 2e-5 (the bold row);
- section 5.3: "Task-specific training is conducted for 10 epochs. The MLP
  heads have a hidden dimension of 768 and dropout probability of 0.3 at
  each linear layer", learning rate 1e-5 ("All reported models are trained
  with a default learning rate of 1e-05"); section 6 / Table 6: the
  multi-task average loss; Table 3: the first layer shared between the
  paraphrase and similarity heads.

`three_given_stages` is the pre-training schedule (per epoch: supervised
Quora with its non-paraphrases as negatives, then unsupervised SST, then
unsupervised STS); `pretrain_three_given` runs it on an encoder (one SimCSE
trainer per stage); the multitask method's `three_given` preset
(`fit_multitask(..., preset="three_given")`, in `config.py`) is the whole setting.

References:
    - Contrastive Learning for Generalizable Sentence Embeddings (Stanford
      CS224N default-project report), sections 4.1, 4.2, 5.3 and Table 2.
    - [Gao et al., 2021. SimCSE](https://arxiv.org/abs/2104.08821)
"""

import logging
import math

from keras_sentemb import validation
from keras_sentemb.data.multitask import pretraining_examples
from keras_sentemb.trainers.training_head import resolve_training_mlp
from keras_sentemb.trainers import optimizers
from keras_sentemb.methods.simcse.trainer import SimCSE

logger = logging.getLogger(__name__)

THREE_GIVEN = "three_given"
THREE_GIVEN_EPOCHS = 5
THREE_GIVEN_ORDER = ("quora", "sst", "sts")


def _distinct(sentences):
    return list(dict.fromkeys(sentences))


def three_given_stages(train, epochs=THREE_GIVEN_EPOCHS, seed=0):
    """The "3 Given" pre-training schedule: `epochs` x (Quora, SST, STS), in that order.

    Args:
        train: dict `{task: examples}` (`load_multitask_data(...)["train"]`).
        epochs: int. Passes over the three stages. Defaults to `5` (the
            report's section 5.3).
        seed: int. Seed of the hard negatives of the Quora stage. Defaults
            to `0`.

    Returns:
        A list of `(epoch, stage, simcse_mode, columns)`: stage `"quora"` is
        supervised SimCSE (`{"sent0", "sent1", "hard_neg"}`: paraphrases as
        positives, a non-paraphrase partner as the negative), `"sst"` and
        `"sts"` are unsupervised SimCSE on the distinct sentences of the
        sentiment and similarity train sets (`{"sentence"}`).
    """
    epochs = validation.positive_int(epochs, "epochs")
    data = {
        "quora": ("sup", pretraining_examples("paraphrase", train, seed=seed)),
        "sst": ("unsup", {"sentence": _distinct(s for s, _ in train["sentiment"])}),
        "sts": ("unsup", {"sentence": _distinct(
            s for a, b, _ in train["similarity"] for s in (a, b))}),
    }
    return [
        (epoch, stage, data[stage][0], data[stage][1])
        for epoch in range(epochs)
        for stage in THREE_GIVEN_ORDER
    ]


def stage_steps(stages, batch_size, total_steps=None):
    """Optimizer steps of each stage: one pass over its data, or `total_steps` shared by size.

    Args:
        stages: the list of `three_given_stages`.
        batch_size: int.
        total_steps: int or None. None: every stage one full pass
            (`ceil(rows / batch_size)` steps). An int: that many steps in
            all, split over the stages in proportion to their sizes (at
            least one each).

    Returns:
        list of int, one per stage.
    """
    batch_size = validation.positive_int(batch_size, "batch_size")
    full = [math.ceil(len(next(iter(cols.values()))) / batch_size) for *_, cols in stages]
    if total_steps is None:
        return full
    total_steps = validation.positive_int(total_steps, "pretrain_steps")
    if total_steps < len(stages):
        raise ValueError(
            f"The '3 Given' pre-training has {len(stages)} stages; pretrain_steps must be at "
            f"least that. Received: {total_steps}."
        )
    weights = [f / sum(full) for f in full]
    steps = [max(1, int(w * total_steps)) for w in weights]
    i = 0
    while sum(steps) < total_steps:  # hand out the rounding remainder, largest stages first
        order = sorted(range(len(steps)), key=lambda j: -full[j])
        steps[order[i % len(order)]] += 1
        i += 1
    while sum(steps) > total_steps:
        j = max(range(len(steps)), key=lambda j: steps[j])
        steps[j] -= 1
    return steps


def pretrain_three_given(run, plan, encoder, train, steps, learning_rate, temperature,
                         epochs=None, callbacks=None):
    """Run the "3 Given" pre-training on `encoder` (stages of a `fit_multitask` run).

    Every stage trains a fresh SimCSE trainer (supervised for Quora,
    unsupervised for SST and STS) with AdamW at a constant `learning_rate`,
    [CLS] pooling with the training-only MLP (section 4.1: "a small (2-layer)
    MLP network is used on top of the CLS embeddings for contrastive
    training and thrown away"). No dev selection: every stage runs its steps.

    Args:
        run: the `FitScaffold` of the `fit_multitask` call.
        plan: its `RunPlan` (the pooling).
        encoder: `SentenceEncoder`. Trained in place.
        train: dict `{task: examples}`.
        steps: int or None. Total pre-training steps (see `stage_steps`);
            None: `epochs` full passes.
        learning_rate: float.
        temperature: float. InfoNCE temperature.
        epochs: int or None. Defaults to `THREE_GIVEN_EPOCHS` (5).
        callbacks: list or None. The caller's callbacks for these stages
            (defaults to the run's).

    Returns:
        dict: `schedule`, the `(epoch, stage, mode, examples, steps)` of
        every stage in order.
    """
    epochs = THREE_GIVEN_EPOCHS if epochs is None else epochs
    stages = three_given_stages(train, epochs, seed=run.seed or 0)
    counts = stage_steps(stages, run.batch_size, steps)
    schedule = []
    for (epoch, stage, mode, columns), n in zip(stages, counts):
        logger.info("multitask: 3 Given pre-training, epoch %d, %s (%s SimCSE, %d examples, "
                    "%d steps)", epoch + 1, stage, mode, len(next(iter(columns.values()))), n)
        with run.scope():
            trainer = SimCSE(encoder, mode=mode, temperature=temperature, pooling=plan.pooling,
                             mlp=resolve_training_mlp("auto", plan.pooling))
        run.compile(trainer, optimizers.AdamW(learning_rate, weight_decay=0.01))
        run.fit(trainer, run.batches(encoder, columns, plan), plan, steps=n, dev_pairs=None,
                stage=f"pretrain_e{epoch + 1}_{stage}", keep_best=False,
                run_callbacks=callbacks)
        schedule.append({"epoch": epoch + 1, "stage": stage, "mode": mode,
                         "examples": len(next(iter(columns.values()))), "steps": n})
    return {"schedule": schedule}
