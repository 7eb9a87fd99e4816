"""Contrastive pre-training, then three task heads on one encoder: `fit_multitask`."""

import logging
import os
from pathlib import Path

import keras
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb.data.labeled_streams import check_rows
from keras_sentemb.data.multitask import STSB_TEST_LEAKAGE_WARNING
from keras_sentemb.data.multitask import TASKS
from keras_sentemb.data.multitask import TASK_COLUMNS
from keras_sentemb.data.multitask import check_procedure
from keras_sentemb.data.multitask import load_multitask_data
from keras_sentemb.data.multitask import multitask_batches
from keras_sentemb.data.multitask import pretraining_examples
from keras_sentemb.data.multitask import schedule_sizes
from keras_sentemb.data.multitask import tokenize_multitask
from keras_sentemb.data.multitask_streams import STREAM_PRETRAIN
from keras_sentemb.data.multitask_streams import TaskSentences
from keras_sentemb.data.multitask_streams import streamed_multitask_batches
from keras_sentemb.data.multitask_streams import task_labels
from keras_sentemb.data.multitask_streams import task_streams
from keras_sentemb.data.nli import read_nli_triplets
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.data.stream_batches import streamed
from keras_sentemb.data.stream_batches import worker_shard
from keras_sentemb.evaluation.multitask import evaluate_multitask
from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.pipelines.backup import TrainingBackup
from keras_sentemb.pipelines.callbacks import DevSelection
from keras_sentemb.methods.multitask.three_given import THREE_GIVEN
from keras_sentemb.methods.multitask.three_given import pretrain_three_given
from keras_sentemb.trainers.training_head import resolve_training_mlp
from keras_sentemb.pipelines.schedules import adamw_linear_decay
from keras_sentemb.trainers import optimizers
from keras_sentemb.methods.multitask.config import MULTITASK_DEV
from keras_sentemb.methods.multitask.config import MultitaskConfig
from keras_sentemb.methods.multitask.config import PAPER_POOLING
from keras_sentemb.methods.multitask.config import PRESETS
from keras_sentemb.methods.multitask.config import WEIGHT_DECAY
from keras_sentemb.methods.multitask.trainer import MultitaskModel
from keras_sentemb.methods.simcse.trainer import SimCSE

logger = logging.getLogger(__name__)

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


def _pretrain(run, plan, encoder, mode, train, steps, learning_rate, temperature, nli_file,
              data_dir, backup):
    """Contrastive pre-training of `encoder` with the `SimCSE` trainer (a stage of the run)."""
    # No stage here restores the multitask stage's backup into the pre-trainer.
    others = [cb for cb in run.callbacks if cb is not backup]
    if mode == THREE_GIVEN:  # many short stages: no backup of their own (restarts if interrupted)
        return pretrain_three_given(run, plan, encoder, train, steps, learning_rate, temperature,
                                    callbacks=others)
    simcse_mode = "unsup" if mode == "unsup" else "sup"
    if data_dir is None:  # streamed task data (`train` holds the task streams)
        stream = TaskSentences(train) if mode == "unsup" else as_stream(nli_file)
        if stream is None:  # a small NLI file: streamed from memory all the same
            stream = streamed(tf.data.Dataset.from_tensor_slices(
                tuple(map(list, zip(*read_nli_triplets(nli_file))))))
        names = ("sentence",) if mode == "unsup" else ("sent0", "sent1", "hard_neg")
        make_dataset = run.stream_batches(encoder, stream, names, plan, no_duplicates=True)
        size = "streamed"
    else:
        triplets = None
        if mode == "nli":
            nli_file = nli_file or (Path(os.fspath(data_dir)).parent / "nli"
                                    / "snli_devtest_triplets.csv")
            triplets = read_nli_triplets(nli_file)
        columns = pretraining_examples(mode, train, triplets, run.seed or 0)
        make_dataset = run.batches(encoder, columns, plan)
        size = len(next(iter(columns.values())))
    logger.info("multitask: SimCSE pre-training (%s, %s, %s examples, %d steps)",
                mode, simcse_mode, size, steps)
    with run.scope():
        pretrainer = SimCSE(
            encoder, mode=simcse_mode, temperature=temperature, pooling=plan.pooling,
            mlp=resolve_training_mlp("auto", plan.pooling),
        )
    run.compile(pretrainer, adamw_linear_decay(learning_rate, steps))
    # The pre-training stage keeps its own backup (a sub-folder), so a run
    # interrupted here resumes here.
    if backup is not None:
        others.append(TrainingBackup(os.path.join(os.fspath(backup.backup_dir), "pretrain")))
    run.fit(pretrainer, make_dataset, plan, steps=steps, dev_pairs=None,
            stage="pretrain", keep_best=False, run_callbacks=others, dev_retrieval=False)


@register_method("multitask")
class MultitaskMethod(Method):
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

    config_class = MultitaskConfig
    paper_pooling = PAPER_POOLING
    in_batch = True
    custom_dev = (MULTITASK_DEV,)
    optional = (("precision", "max_grad_norm", "matryoshka_dims", "matryoshka_weights") + DEV_RETRIEVAL
                + STREAMED)
    run_defaults = {"steps": 300, "batch_size": 16, "learning_rate": 2e-5, "max_length": 128,
                    "dev": MULTITASK_DEV}
    run_docs = {
        "steps": "Optimizer steps of the multitask stage.",
        "batch_size": "Examples per task batch (and per pre-training batch).",
        "learning_rate": "Encoder learning rate (AdamW, weight decay 0.01, constant).",
        "dev": "`\"multitask\"` (the task dev sets: sentiment accuracy, paraphrase accuracy, "
               "similarity Pearson, selection by their mean), `\"stsb\"` / an STS-B path / a "
               "list of (s1, s2, score) (selection by STS Spearman), or None (the last "
               "weights).",
        "output": "Folder to save the encoder (loadable with `SentenceEncoder.from_preset`) "
                  "and the heads (`MultitaskModel.load_from_folder`).",
    }
    data_doc = ("str. The multitask folder; or a dict task -> data streaming each task's "
                "rows (a glob of files, `keras_sentemb.streamed(...)`, a `tf.data.Dataset`, a "
                "list of rows; see `keras_sentemb.data.multitask_streams`).")

    returns_doc = ("The trained `MultitaskModel` (its `.encoder` is the kept `SentenceEncoder`, "
                   "pooling set); `.dev_metrics` holds the kept model's dev metrics, "
                   "`.training_report` the encoder's report.")

    presets = PRESETS

    def train(self, run, data, config):
        if run.config.steps is None:
            raise ValueError("fit_multitask needs `steps` (a positive int). Received: None.")
        check_procedure(config.procedure, config.single_task)
        streams = task_streams(data, config.procedure, config.single_task)
        if streams is not None:
            return self._train_streamed(run, config, streams)
        tasks_data = load_multitask_data(data, config.quora_dev_fraction, verbose=True)
        train, dev_sets = tasks_data["train"], tasks_data["dev"]
        logger.warning(STSB_TEST_LEAKAGE_WARNING)
        batch, epoch_size, per_epoch = schedule_sizes(train, config.procedure, run.batch_size,
                                                      config.single_task)
        run.record_data(
            train={t: len(train[t]) for t in TASKS}, dev={t: len(dev_sets[t]) for t in TASKS},
            skipped=tasks_data["skipped"], epoch_size=epoch_size, steps_per_task_epoch=per_epoch,
        )
        encoder, plan, extras, pretraining = self._start(run, config, train, data)
        trainer, selection = self._multitask_stage(run, plan, config, encoder, train, dev_sets,
                                                   pretrained=isinstance(pretraining, dict))
        dev_metrics = None
        # (With `dev_select="retrieval"` the kept step is nDCG@10's, not this selection's.)
        if (isinstance(selection, MultitaskDevEvaluation) and selection.restore_best
                and selection.best_step is not None):
            dev_metrics = selection.metrics_at(selection.best_step)
        if dev_metrics is None:
            dev_metrics = evaluate_multitask(trainer, dev_sets, limit=config.dev_limit)
        logger.info("multitask dev (kept model): %s",
                    {k: round(v, 4) for k, v in dev_metrics.items()})
        extras["dev_metrics"] = dev_metrics
        if config.dev_limit:
            extras["dev_limit"] = config.dev_limit
        run.finish(trainer.encoder, plan, extras=extras)
        if run.output is not None:
            trainer.save_heads(run.output)
        trainer.dev_metrics = dev_metrics
        trainer.skipped_rows = tasks_data["skipped"]
        return trainer

    def _start(self, run, config, train, data):
        """The encoder, its plan, the report's extras and the pre-training stage's result."""
        with run.scope():
            encoder = run.load_encoder()
        plan = run.plan(encoder)
        extras = {"procedure": config.procedure}
        pretraining = self._pretraining(run, plan, config, encoder, train, data)
        if pretraining is not None:
            extras["pretraining"] = pretraining
        return encoder, plan, extras, pretraining

    def _train_streamed(self, run, config, streams):
        """`train` on a dict of task streams (see `keras_sentemb.data.multitask_streams`)."""
        if run.dev == MULTITASK_DEV:
            raise ValueError("dev='multitask' reads the dev files of a multitask folder; with "
                             "streamed task data pass dev='stsb', an STS-B path, pairs or None.")
        if config.pretrain not in STREAM_PRETRAIN:
            raise ValueError(f"pretrain={config.pretrain!r} needs the whole task data in memory; "
                             f"streamed task data pre-trains with {list(STREAM_PRETRAIN)}.")
        if config.pretrain == "nli" and config.nli_file is None:
            raise ValueError("pretrain='nli' with streamed task data needs `nli_file` (there is "
                             "no multitask folder to find it next to).")
        for task, stream in streams.items():
            check_rows(stream, TASK_COLUMNS[task], {"label": task_labels(task)})
        run.record_data(train={t: s.size for t, s in streams.items()},
                        streamed={t: repr(s) for t, s in streams.items()})
        encoder, plan, extras, pretraining = self._start(run, config, streams, None)
        workers = worker_shard(run.config.strategy)
        fusion = ("similarity",) if config.fusion else ()

        def make_dataset(start_step):
            ds = streamed_multitask_batches(
                streams, config.procedure, run.batch_size, seed=run.seed or 0,
                start_step=start_step, single_task=config.single_task, workers=workers,
                no_duplicates=fusion)
            return tokenize_multitask(encoder, ds, plan.max_length)

        trainer, _ = self._multitask_stage(run, plan, config, encoder, None, None,
                                           pretrained=isinstance(pretraining, dict),
                                           make_dataset=make_dataset)
        run.finish(trainer.encoder, plan, extras=extras)
        if run.output is not None:
            trainer.save_heads(run.output)
        trainer.dev_metrics = None
        trainer.skipped_rows = {}
        return trainer

    @staticmethod
    def _pretraining(run, plan, config, encoder, train, data):
        """Runs the pre-training stage; returns what the report says of it (None: none)."""
        pretrain_steps = config.pretrain_steps
        if pretrain_steps is None and config.pretrain != THREE_GIVEN:
            pretrain_steps = plan.steps  # the "3 Given" schedule counts in epochs
        if config.pretrain == "none" or pretrain_steps == 0:
            return None
        backup = _find_backup(run.callbacks)
        if backup is not None and compat.backup_start_epoch(backup) > 0:
            # The multitask stage resumes: its backup holds every weight.
            logger.info("multitask: resuming the multitask stage; pre-training is not repeated")
            return "done before the interruption (weights restored from the backup)"
        done = _pretrain(run, plan, encoder, config.pretrain, train, pretrain_steps,
                         config.pretrain_learning_rate, config.pretrain_temperature,
                         config.nli_file, data, backup)
        return {"mode": config.pretrain, "steps": pretrain_steps, **(done or {})}

    @staticmethod
    def _multitask_stage(run, plan, config, encoder, train, dev_sets, pretrained,
                         make_dataset=None):
        """Trains the heads (and the encoder) for `steps`; returns `(trainer, selection)`.

        `make_dataset` (streamed tasks) replaces the batches of `train`.
        """
        with run.scope():
            trainer = MultitaskModel(encoder, config, pooling=plan.pooling,
                                     pcgrad=config.procedure == "pcgrad", seed=run.seed or 0)
            run.compile(
                trainer,
                optimizers.AdamW(plan.learning_rate, weight_decay=WEIGHT_DECAY,
                                 name="encoder_adamw"),
                head_optimizer=optimizers.AdamW(config.head_learning_rate,
                                                weight_decay=WEIGHT_DECAY),
                fusion_optimizer=optimizers.AdamW(plan.learning_rate, weight_decay=WEIGHT_DECAY),
            )

        def from_memory(start_step):
            ds = multitask_batches(
                train, config.procedure, run.batch_size, seed=run.seed or 0,
                start_step=start_step, single_task=config.single_task,
            )
            return tokenize_multitask(encoder, ds, plan.max_length)

        selection = None
        if run.dev == MULTITASK_DEV:
            selection = MultitaskDevEvaluation(dev_sets, limit=config.dev_limit)
        run.fit(trainer, make_dataset or from_memory, plan, selection=selection,
                stage="multitask" if pretrained else None)
        return trainer, selection


# The `fit_*` function: its signature and docstring are the method's.
fit_multitask = fit_function("multitask", "fit_multitask")
