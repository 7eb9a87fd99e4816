"""`fit_multitask`: contrastive pre-training, then three task heads on one encoder."""

import logging
import os
from pathlib import Path

import keras

from keras_sentemb import compat
from keras_sentemb import validation
from keras_sentemb.data.multitask import PRETRAIN_MODES
from keras_sentemb.data.multitask import STSB_TEST_LEAKAGE_WARNING
from keras_sentemb.data.multitask import TASKS
from keras_sentemb.data.multitask import check_procedure
from keras_sentemb.data.multitask import load_multitask_data
from keras_sentemb.data.multitask import multitask_batches
from keras_sentemb.data.multitask import pretraining_examples
from keras_sentemb.data.multitask import schedule_sizes
from keras_sentemb.data.multitask import tokenize_multitask
from keras_sentemb.data.nli import read_nli_triplets
from keras_sentemb.evaluation.multitask import evaluate_multitask
from keras_sentemb.pipelines.callbacks import DevSelection
from keras_sentemb.pipelines.arguments import fit_function
from keras_sentemb.pipelines.backup import TrainingBackup
from keras_sentemb.pipelines.multitask_presets import THREE_GIVEN
from keras_sentemb.pipelines.multitask_presets import pretrain_three_given
from keras_sentemb.pipelines.schedules import adamw_linear_decay
from keras_sentemb.trainers import optimizers
from keras_sentemb.trainers.multitask import HEAD_SHARING
from keras_sentemb.trainers.multitask import MultitaskModel
from keras_sentemb.trainers.simcse import SimCSE

logger = logging.getLogger(__name__)

MULTITASK_DEV = "multitask"
WEIGHT_DECAY = 0.01
class MultitaskDevEvaluation(DevSelection):
    """`DevSelection` by the overall dev mean of `evaluate_multitask`.

    The candidate is the whole `MultitaskModel` (encoder and heads), so the
    kept checkpoint restores the heads too. Every evaluation's full metrics
    are kept in `metrics_history` (`[(step, metrics)]`).

    Args:
        dev: dict `{task: examples}`. The task dev sets.
        limit: int or None. See `evaluate_multitask`.
        **kwargs: see `DevSelection`.
    """
    def __init__(self, dev, limit=None, **kwargs):
        self.dev = dev
        self.limit = limit
        self.metrics_history = []

        def evaluate(name, model):
            metrics = evaluate_multitask(model, self.dev, limit=self.limit)
            step = int(self.model.optimizer.iterations.numpy())
            self.metrics_history.append((step, metrics))
            logger.info("multitask dev at step %d: %s", step,
                        {k: round(v, 4) for k, v in metrics.items()})
            return metrics["overall"]

        kwargs.setdefault("monitor", "dev_overall")
        super().__init__(evaluate, **kwargs)

    def metrics_at(self, step):
        """The metrics of the last evaluation at `step`, or None."""
        for s, metrics in reversed(self.metrics_history):
            if s == step:
                return metrics
        return None


def _find_backup(callbacks):
    for cb in callbacks:
        if isinstance(cb, keras.callbacks.BackupAndRestore):
            return cb
    return None


@fit_function(
    "multitask", paper_pooling="cls", in_batch=True, custom_dev=(MULTITASK_DEV,), steps=300,
    optional=("max_grad_norm", "matryoshka_dims", "matryoshka_weights"),
    batch_size=16, learning_rate=2e-5, max_length=128, dev=MULTITASK_DEV,
    docs={
        "steps": "int. Optimizer steps of the multitask stage. Defaults to `300`.",
        "batch_size": (
            "int. Examples per task batch (and per pre-training batch). "
            "Defaults to `16`."
        ),
        "learning_rate": (
            "float. Encoder learning rate (AdamW, weight decay 0.01, constant)."
            " Defaults to `2e-5`."
        ),
        "dev": (
            '`"multitask"` (the task dev sets: sentiment accuracy, paraphrase '
            'accuracy, similarity Pearson, selection by their mean), `"stsb"` /'
            " an STS-B path / a list of (s1, s2, score) (selection by STS "
            'Spearman), or None (the last weights). Defaults to `"multitask"`.'
        ),
        "output": (
            "str or None. Folder to save the encoder (loadable with "
            "`SentenceEncoder.from_preset`) and the heads "
            "(`MultitaskModel.load_from_folder`). Defaults to `None`."
        ),
    },
)
def fit_multitask(
    run,
    data,
    procedure="average",
    head_sharing="first_layer",
    single_task="similarity",
    fusion=False,
    pretrain="unsup",
    pretrain_steps=None,
    pretrain_learning_rate=3e-5,
    pretrain_temperature=0.05,
    nli_file=None,
    head_learning_rate=1e-3,
    hidden_dim=None,
    dropout=0.1,
    quora_dev_fraction=0.1,
    dev_limit=None,
    evaluate_stsb_test=False,
    head_style="residual",
):
    """Contrastive pre-training, then the three task heads on one encoder.

    Reads a folder laid out like the CS224N minBERT project's `data/` (Quora's dev file is
    split into train/dev by a hash of the pair id, see
    `keras_sentemb.data.multitask`), optionally pre-trains the encoder with
    SimCSE (`pretrain`: the `SimCSE` trainer, unsupervised or supervised),
    then trains a `MultitaskModel` with `procedure` for exactly `steps`
    optimizer steps, keeps the checkpoint with the best overall dev mean
    (`dev="multitask"`, the starting weights included), and saves the
    encoder plus heads to `output`.

    One step is one optimizer update. `"average"` and `"pcgrad"` take one
    batch of every task per step; the round-robin procedures and `"single"`
    one batch of one task (so give them 3x the steps for the same number of
    examples). Each task's data are down-sampled to the smallest trained
    set: every task epoch is a fresh random subset of that size. Batches are
    step-indexed, so `keras.callbacks.BackupAndRestore(save_freq="epoch")`
    resumes an interrupted run exactly (pre-training included: a run that
    resumes its multitask stage does not pre-train again).

    `multitask/sts-train.csv` contains STS-B *test* pairs: a model trained
    here must never be reported on STS-B test. `evaluate_stsb_test=True`
    raises `ValueError`.

    Args:
        data: str. The multitask folder.
        procedure: str. `"average"` (one batch per task per step, mean loss;
            the default), `"batch_round_robin"`, `"epoch_round_robin"`,
            `"pcgrad"` or `"single"`.
        head_sharing: str. `"first_layer"` (default, the report's best),
            `"none"` or `"full"`.
        single_task: str. The task of `procedure="single"`. Defaults to
            `"similarity"`.
        fusion: bool. Fusion training (each similarity batch also gets an
            unsupervised SimCSE update, with its own optimizer). Defaults to
            `False`.
        pretrain: str. `"unsup"` (SimCSE on the sentences of all three train
            sets; default), `"paraphrase"` (supervised SimCSE: Quora
            paraphrases as positives, non-paraphrases as hard negatives),
            `"nli"` (supervised SimCSE on `nli_file` triplets),
            `"three_given"` (the report's "3 Given" schedule: 5 epochs of
            supervised Quora with negatives, then unsupervised SST, then
            unsupervised STS; see `multitask_presets`) or `"none"`.
        pretrain_steps: int or None. Pre-training steps; `None` = `steps`
            (`"three_given"`: 5 full epochs of its three stages; an int is
            their total, shared in proportion to the stages' sizes).
        pretrain_learning_rate: float. AdamW with linear decay. Defaults to
            `3e-5`.
        pretrain_temperature: float. InfoNCE temperature. Defaults to `0.05`.
        nli_file: str or None. `sent0,sent1,hard_neg` CSV for
            `pretrain="nli"`; defaults to `nli/snli_devtest_triplets.csv`
            next to the multitask folder.
        head_learning_rate: float. Learning rate of the heads (AdamW, weight
            decay 0.01). Defaults to `1e-3`.
        hidden_dim: int or None. Head width; defaults to the embedding size.
        dropout: float. Head dropout. Defaults to `0.1`.
        quora_dev_fraction: float. Share of quora-dev.csv held out as dev.
            Defaults to `0.1`.
        dev_limit: int or None. Evaluate on the first `dev_limit` dev
            examples of each task only. Defaults to `None` (all).
        evaluate_stsb_test: bool. Refused (raises): see the leakage note.
            Defaults to `False`.
        head_style: str. `"residual"` (zero-initialised residual pair
            transforms) or `"plain"` (the report's plain 2-layer MLP heads
            with dropout at each linear layer). Defaults to `"residual"`.
            `multitask_presets.MULTITASK_PRESETS["three_given"]` holds the
            report's whole setting.

    Returns:
        The trained `MultitaskModel` (its `.encoder` is the kept
        `SentenceEncoder`, pooling set); `.dev_metrics` holds the kept
        model's dev metrics, `.training_report` the encoder's report.

    Examples:

    ```python
    model = fit_multitask("data/multitask", steps=300, output="mt_model")
    model.predict_similarity(["A man plays."], ["A man is playing."])
    ```

    References:
        - Contrastive Learning for Generalizable Sentence Embeddings
          (Stanford CS224N default-project report).
        - [Yu et al., 2020. Gradient Surgery for Multi-Task
          Learning](https://arxiv.org/abs/2001.06782)
        - [Gao et al., 2021. SimCSE](https://arxiv.org/abs/2104.08821)
    """
    if evaluate_stsb_test:
        raise ValueError("Refusing evaluate_stsb_test=True: " + STSB_TEST_LEAKAGE_WARNING)
    if run.steps is None:
        raise ValueError("fit_multitask needs `steps` (a positive int). Received: None.")
    check_procedure(procedure, single_task)
    validation.choice(head_sharing, "head_sharing", HEAD_SHARING)
    validation.choice(pretrain, "pretrain", PRETRAIN_MODES)
    head_learning_rate = validation.positive_float(head_learning_rate, "head_learning_rate")
    pretrain_learning_rate = validation.positive_float(pretrain_learning_rate, "pretrain_learning_rate")
    if pretrain_steps is not None:
        pretrain_steps = validation.non_negative_int(pretrain_steps, "pretrain_steps")
    elif pretrain != THREE_GIVEN:  # the "3 Given" schedule counts in epochs
        pretrain_steps = run.steps
    dev_limit = validation.optional_positive_int(dev_limit, "dev_limit")
    validation.fraction(dropout, "dropout")

    tasks_data = load_multitask_data(data, quora_dev_fraction, verbose=True)
    train, dev_sets = tasks_data["train"], tasks_data["dev"]
    logger.warning(STSB_TEST_LEAKAGE_WARNING)
    batch, epoch_size, per_epoch = schedule_sizes(train, procedure, run.batch_size, single_task)
    run.record_data(
        train={t: len(train[t]) for t in TASKS}, dev={t: len(dev_sets[t]) for t in TASKS},
        skipped=tasks_data["skipped"], epoch_size=epoch_size, steps_per_task_epoch=per_epoch,
    )
    with run.scope():
        encoder = run.load_encoder()
        pooling = run.pooling_for(encoder)

    extras = {"procedure": procedure}
    backup = _find_backup(run.callbacks)
    if pretrain != "none" and pretrain_steps != 0:
        if backup is not None and compat.backup_start_epoch(backup) > 0:
            # The multitask stage resumes: its backup holds every weight.
            logger.info("multitask: resuming the multitask stage; pre-training is not repeated")
            extras["pretraining"] = "done before the interruption (weights restored from the backup)"
        else:
            done = _pretrain(run, encoder, pretrain, train, pretrain_steps, pretrain_learning_rate,
                             pretrain_temperature, nli_file, data, backup)
            extras["pretraining"] = {"mode": pretrain, "steps": pretrain_steps, **(done or {})}

    with run.scope():
        trainer = MultitaskModel(
            encoder, head_sharing=head_sharing, hidden_dim=hidden_dim, dropout=dropout,
            pooling=pooling, pcgrad=procedure == "pcgrad", fusion=fusion, seed=run.seed or 0,
            head_style=head_style,
        )
        run.compile(
            trainer,
            optimizers.AdamW(run.learning_rate, weight_decay=WEIGHT_DECAY, name="encoder_adamw"),
            head_optimizer=optimizers.AdamW(head_learning_rate, weight_decay=WEIGHT_DECAY),
            fusion_optimizer=optimizers.AdamW(run.learning_rate, weight_decay=WEIGHT_DECAY),
        )

    def make_dataset(start_step):
        ds = multitask_batches(
            train, procedure, run.batch_size, seed=run.seed or 0, start_step=start_step,
            single_task=single_task,
        )
        return tokenize_multitask(encoder, ds, run.max_length)

    selection = None
    if run.dev == MULTITASK_DEV:
        selection = MultitaskDevEvaluation(dev_sets, limit=dev_limit)
    pretrained = isinstance(extras.get("pretraining"), dict)
    run.fit(trainer, make_dataset, selection=selection, stage="multitask" if pretrained else None)
    dev_metrics = None
    if isinstance(selection, MultitaskDevEvaluation) and selection.best_step is not None:
        dev_metrics = selection.metrics_at(selection.best_step)
    if dev_metrics is None:
        dev_metrics = evaluate_multitask(trainer, dev_sets, limit=dev_limit)
    logger.info("multitask dev (kept model): %s", {k: round(v, 4) for k, v in dev_metrics.items()})
    extras["dev_metrics"] = dev_metrics
    if dev_limit:
        extras["dev_limit"] = dev_limit
    run.finish(trainer.encoder, extras=extras)
    if run.output is not None:
        trainer.save_heads(run.output)
    trainer.dev_metrics = dev_metrics
    trainer.skipped_rows = tasks_data["skipped"]
    return trainer


def _pretrain(run, encoder, mode, train, steps, learning_rate, temperature, nli_file,
              data_dir, backup):
    """Contrastive pre-training of `encoder` with the `SimCSE` trainer (a stage of the run)."""

    if mode == THREE_GIVEN:  # many short stages: no backup of their own (restarts if interrupted)
        user_callbacks = run.callbacks
        run.callbacks = [cb for cb in user_callbacks if cb is not backup]
        try:
            return pretrain_three_given(run, encoder, train, steps, learning_rate, temperature)
        finally:
            run.callbacks = user_callbacks
    triplets = None
    if mode == "nli":
        nli_file = nli_file or (Path(os.fspath(data_dir)).parent / "nli" / "snli_devtest_triplets.csv")
        triplets = read_nli_triplets(nli_file)
    columns = pretraining_examples(mode, train, triplets, run.seed or 0)
    simcse_mode = "unsup" if mode == "unsup" else "sup"
    logger.info("multitask: SimCSE pre-training (%s, %s, %d examples, %d steps)",
                mode, simcse_mode, len(next(iter(columns.values()))), steps)
    with run.scope():
        pretrainer = SimCSE(
            encoder, mode=simcse_mode, temperature=temperature, pooling=run.pooling,
            mlp=run.training_mlp("auto"),
        )
    run.compile(pretrainer, adamw_linear_decay(learning_rate, steps))
    # The pre-training stage keeps its own backup (a sub-folder), so a run
    # interrupted here resumes here, and the multitask stage's backup is
    # never restored into the pre-trainer.
    user_callbacks = run.callbacks
    stage_callbacks = [cb for cb in user_callbacks if cb is not backup]
    if backup is not None:
        stage_callbacks.append(TrainingBackup(
            os.path.join(os.fspath(backup.backup_dir), "pretrain"),
        ))
    run.callbacks = stage_callbacks
    try:
        run.fit(pretrainer, run.batches(encoder, columns), steps=steps, dev_pairs=None,
                stage="pretrain", keep_best=False)
    finally:
        run.callbacks = user_callbacks
