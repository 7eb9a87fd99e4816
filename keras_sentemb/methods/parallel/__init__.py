"""A frozen teacher teaching a student on translation pairs: `fit_parallel`."""

import dataclasses
import logging
import os
import typing

from keras_sentemb.data.parallel import load_parallel_pairs
from keras_sentemb.data.parallel import split_pairs
from keras_sentemb.data.labeled_streams import check_rows
from keras_sentemb.data.stream_batches import Mixture
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.data.stream_batches import head_rows
from keras_sentemb.data.streams import TextFiles
from keras_sentemb.evaluation.alignment_uniformity import AlignmentUniformityTracker
from keras_sentemb.evaluation.retrieval import evaluate_bitext_retrieval
from keras_sentemb.methods.method import ALL_OPTIONAL
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.models.projection_head import with_projection_head
from keras_sentemb.models.sentence_encoder import SentenceEncoder
from keras_sentemb.models.vocabulary import can_extend
from keras_sentemb.models.vocabulary import extend_vocabulary as grow_vocabulary
from keras_sentemb.models.vocabulary import unknown_token_share
from keras_sentemb.pipelines.callbacks import DevSelection
from keras_sentemb.pipelines.plan import RunPlan
from keras_sentemb.pipelines.schedules import warmup_cosine_decay
from keras_sentemb.methods.parallel.config import PAPER_POOLING
from keras_sentemb.methods.parallel.config import PRESETS
from keras_sentemb.methods.parallel.config import ParallelConfig
from keras_sentemb.methods.parallel.trainer import ParallelContrastive
from keras_sentemb.methods.parallel.trainer import set_trainable
from keras_sentemb.trainers.torch_adamw import TorchAdamW

logger = logging.getLogger(__name__)

RETRIEVAL_DEV = "retrieval"
PAIR_COLUMNS = ("source", "target")
# Streamed pairs: the held-out pairs and the vocabulary sample come from this many first rows.
STREAM_SAMPLE = 20_000


class RetrievalDevEvaluation(DevSelection):
    """`DevSelection` by bitext retrieval accuracy on held-out dev pairs.

    Each candidate student is scored by the mean of source-to-target and
    target-to-source top-1 accuracy (x100) against the trainer's teacher.

    Args:
        pairs: list of (source, target). The dev pairs (never trained on).
        pooling: str or None. The student's pooling.
        max_length: int or None. Token limit.
        **kwargs: see `DevSelection`.
    """
    def __init__(self, pairs, pooling=None, max_length=None, **kwargs):
        if len(pairs) < 2:
            raise ValueError(f"Retrieval dev selection needs >= 2 pairs, received {len(pairs)}.")
        self.pairs = list(pairs)

        def evaluate(name, student):
            return evaluate_bitext_retrieval(
                self.model.teacher, student, self.pairs, max_length=max_length,
                target_pooling=pooling,
            )["mean"]

        kwargs.setdefault("monitor", "dev_retrieval")
        super().__init__(evaluate, **kwargs)


@dataclasses.dataclass(frozen=True)
class _Split:
    """The training pairs and the two held-out sets."""

    train: list
    dev: list
    test: list
    stream: object = None  # streamed training pairs (then `train` is a sample of them)


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What the training step and the evaluations need, built in the run's scope."""

    trainer: ParallelContrastive
    plan: RunPlan
    source_init: SentenceEncoder  # the untrained source side (dual-mode reference)
    vocabulary: dict
    kept_head: typing.Optional[int]


@register_method("parallel")
class ParallelMethod(Method):
    """Train a target-language student from a frozen source-language teacher.

    Contrastive learning on translation pairs (see `ParallelContrastive`):
    the teacher embeds the source sentence, the student the target sentence;
    the positive is the translation, the negatives are the other teacher
    embeddings of the batch plus a memory queue of earlier ones. Two
    deterministic held-out splits are kept out of training (`split_pairs`):
    `eval_size` test pairs, whose bitext retrieval accuracy (both
    directions) is measured before and after training, and `dev_size` dev
    pairs, on which the student is scored every `eval_every` steps with the
    best checkpoint kept (`dev="retrieval"`; `dev="stsb"` selects on English
    STS-B dev instead, for an English student; None: the last weights).
    With `track_alignment`, alignment and uniformity of the student on the
    test pairs are logged during training and plotted to `plot` (default
    `output/alignment_uniformity.png` when `output` is given).

    Pooling of the student: its own when it declares one, else the paper's
    [CLS] with a training-only MLP head (`mlp="auto"`). A frozen teacher
    whose vectors have another size than the student's (a trained
    384-d English encoder teaching a 768-d multilingual BERT) gives the
    student a kept tanh head to the teacher's size instead
    (`with_projection_head`, identity start), so that it is trained,
    evaluated against the teacher and saved with it
    (`training_report.extras["kept_head"]`).

    A student whose vocabulary lacks the target script (an English model
    and Chinese targets: most characters are `[UNK]`) cannot learn it, so
    first up to `extend_vocabulary` text units of the training targets that
    its tokenizer maps to `[UNK]` are added to its vocabulary
    (`keras_sentemb.extend_vocabulary`: characters whole, WordPiece pieces
    for longer unknown words) with new trainable embedding rows, by default
    initialised from the rows of the source tokens they align with in the
    training pairs (`vocabulary_init="aligned"`, IBM Model 1). A vocabulary
    that already covers the targets gains nothing, and byte-level BPE
    (RoBERTa), which has no unknown token, is left as it is. Only the
    student's vocabulary grows; the teacher keeps its own and tokenizes the
    source side.

    The trained student's `training_report.extras` hold the held-out
    retrieval before and after training, the alignment/uniformity history
    and the `[UNK]` share of the targets (and the vocabulary extension, if
    any).

    Examples:

    ```python
    student = fit_parallel("cmn-eng.tsv", steps=300, batch_size=32,
                           max_length=48, output="zh_student")
    print(student.training_report.extras["vocabulary"])  # {'added': ...}
    ```

    References:
        - [Learning Monolingual Sentence Embeddings with Large-scale Parallel
          Translation Datasets (ACL ARR 2022)](https://openreview.net/forum?id=_vXqKfxoJfN)
    """

    config_class = ParallelConfig
    paper_pooling = PAPER_POOLING
    in_batch = True
    custom_dev = (RETRIEVAL_DEV,)
    optional = ALL_OPTIONAL
    run_defaults = {"steps": 1000, "batch_size": 64, "learning_rate": 3e-5, "max_length": 64,
                    "dev": RETRIEVAL_DEV, "eval_every": 250}
    run_docs = {
        "model": "Initialises both the teacher and the student unless `teacher` / `student` "
                 "say otherwise (see the shared `model`).",
        "pooling": "The student's pooling, `\"auto\"` or a name.",
        "dev": "`\"retrieval\"`, `\"stsb\"`, an STS-B path, pairs or None.",
    }
    data_doc = ("TSV path (`source<TAB>target[<TAB>...]`), list of (source, target), or "
                "`tf.data.Dataset` of pairs; a glob of files, `keras_sentemb.streamed(...)` or a "
                "`Mixture` is streamed (held-out pairs from its first 20,000 rows).")

    presets = PRESETS

    def train(self, run, data, config):
        split = self._split_pairs(run, data, config)
        with run.scope():
            setup = self._setup(run, config, split)
        plan = setup.plan
        run.compile(setup.trainer, self._optimizer(run, plan, config))
        trainer, pooling, heldout = setup.trainer, plan.pooling, split.test

        def retrieval(student_encoder, teacher_encoder=None):
            return evaluate_bitext_retrieval(
                teacher_encoder or trainer.teacher, student_encoder, heldout,
                max_length=plan.max_length, target_pooling=pooling,
            )

        extras = {"mode": config.mode, "vocabulary": setup.vocabulary}
        if setup.kept_head:
            extras["kept_head"] = setup.kept_head
        if heldout:
            extras["retrieval_before"] = retrieval(trainer.student)
            logger.info("held-out retrieval before: %s", extras["retrieval_before"])
        selection, tracker = self._callbacks(run, plan, config, split)
        if split.stream is None:
            make_dataset = run.batches(
                trainer.student,
                {"source": [a for a, _ in split.train], "target": [b for _, b in split.train]},
                plan, encoders={"source": trainer.teacher},
            )
        else:  # the whole stream but the held-out (test and dev) pairs' sentences
            held = split.test + split.dev
            make_dataset = run.stream_batches(
                trainer.student, split.stream, PAIR_COLUMNS, plan, no_duplicates=True,
                encoders={"source": trainer.teacher},
                exclude={"source": [a for a, _ in held], "target": [b for _, b in held]},
            )
        run.fit(trainer, make_dataset, plan, selection=selection,
                dev_pairs=None if run.dev == RETRIEVAL_DEV else "run",
                callbacks=[tracker] if tracker else ())
        encoder = trainer.student
        if heldout:
            extras["retrieval_after"] = retrieval(encoder)
            if config.mode == "dual":
                extras["retrieval_after_initial_teacher"] = retrieval(encoder, setup.source_init)
            logger.info("held-out retrieval after: %s", extras["retrieval_after"])
        extras["final_temperature"] = float(1.0 / trainer.logit_scale().numpy())
        return self._finish(run, plan, config, encoder, extras, tracker)

    # ------------------------------------------------------------------ data
    @staticmethod
    def _split_pairs(run, data, config):
        """The training pairs, the dev pairs (`dev="retrieval"`) and the test pairs.

        Streamed pairs (a glob, `streamed(...)`, a `Mixture`): the held-out
        pairs come from the first `STREAM_SAMPLE` rows (file order); the
        training stream leaves out every row sharing a sentence with them.
        """
        stream = as_stream(data) if isinstance(data, (str, os.PathLike, TextFiles, Mixture, dict)) \
            else None
        if stream is not None:
            check_rows(stream, PAIR_COLUMNS)  # names a missing column, an unreadable file
            all_pairs = head_rows(stream, PAIR_COLUMNS, STREAM_SAMPLE)
        else:
            all_pairs = load_parallel_pairs(data)
        source = os.fspath(data) if isinstance(data, (str, os.PathLike)) else "the pairs given"
        eval_size, dev_size = config.eval_size, config.dev_size
        try:
            train_pairs, heldout = split_pairs(all_pairs, eval_size=eval_size, seed=run.seed)
            dev_pairs = []
            if run.dev == RETRIEVAL_DEV and dev_size:
                train_pairs, dev_pairs = split_pairs(train_pairs, eval_size=dev_size,
                                                     seed=run.seed + 1)
        except ValueError as e:
            raise ValueError(
                f"{source}: {len(all_pairs)} pairs are too few to hold out eval_size={eval_size} "
                f"test pairs and dev_size={dev_size} dev pairs ({e}); pass a smaller `eval_size` "
                "/ `dev_size` (--eval-size / --dev-size on the command line) or more pairs."
            ) from None
        if stream is not None:
            run.record_data(train_pairs=None, test_pairs=len(heldout), dev_pairs=len(dev_pairs),
                            streamed=repr(stream))
            logger.info("parallel: streamed training pairs, %d dev, %d test (from the first %d)",
                        len(dev_pairs), len(heldout), len(all_pairs))
            return _Split(train=train_pairs, dev=dev_pairs, test=heldout, stream=stream)
        run.record_data(train_pairs=len(train_pairs), test_pairs=len(heldout),
                        dev_pairs=len(dev_pairs))
        logger.info("parallel: %d training pairs, %d dev, %d test",
                    len(train_pairs), len(dev_pairs), len(heldout))
        return _Split(train=train_pairs, dev=dev_pairs, test=heldout)

    # -------------------------------------------------------------- encoders
    def _setup(self, run, config, split):
        """The teacher, the student (a fresh copy, vocabulary grown) and their trainer."""
        mode = config.mode
        start, teacher = self._starting_encoders(run, config)
        source_init = teacher
        # The student is always a fresh copy (the caller's encoder is never
        # trained in place); so is a dual-mode teacher, which is trained too.
        student, vocabulary = self._grow_vocabulary(run, config, start,
                                                    start.clone(name="student"), split)
        set_trainable(student, True)  # a clone of a frozen encoder inherits the flag
        if mode == "shared":
            teacher = None
        elif mode == "dual":
            teacher = teacher.clone(name="teacher")
            set_trainable(teacher, True)
        plan = run.plan(start, examples=None if split.stream is not None else len(split.train),
                           mlp=config.mlp)
        kept_head = None
        if (mode == "frozen_teacher" and student.projection is None
                and student.output_dim != teacher.output_dim):
            # Without a kept head the student could not be compared with its teacher.
            logger.info("parallel: the student (%d-d) keeps a tanh head to the teacher's %d-d "
                        "space", student.output_dim, teacher.output_dim)
            student = with_projection_head(student, units=teacher.output_dim,
                                           initializer="identity")
            plan = dataclasses.replace(plan, mlp="none")
            run.report.resolved["mlp"] = plan.mlp
            kept_head = teacher.output_dim
        trainer = ParallelContrastive(
            student, teacher, mode=mode, queue_size=config.queue_size,
            temperature=config.temperature, init_temperature=config.init_temperature,
            max_logit_scale=config.max_logit_scale, pooling=plan.pooling, mlp=plan.mlp,
            mini_batch_size=run.mini_batch_size,
        )
        return _Setup(trainer=trainer, plan=plan, source_init=source_init,
                      vocabulary=vocabulary, kept_head=kept_head)

    @staticmethod
    def _starting_encoders(run, config):
        """`(student's start, teacher)`, warning when a frozen teacher is the student's start."""
        teacher, student = config.teacher, config.student
        base = run.load_encoder()
        teacher_encoder = base if teacher is None else run.load_encoder(teacher)
        start = base if student is None else run.load_encoder(student)
        start_spec = run.model if student is None else student
        if config.mode == "frozen_teacher" and (
                teacher_encoder is start or teacher is start_spec
                or (isinstance(teacher, str) and teacher == start_spec)):
            logger.warning(
                "parallel: the frozen teacher is the student's own starting model; the paper's "
                "teacher is a trained sentence encoder (SimCSE-RoBERTa-large). Pass "
                "`teacher=` a trained encoder unless the starting model is one."
            )
        return start, teacher_encoder

    @staticmethod
    def _grow_vocabulary(run, config, start, student, split):
        """The student with the target tokens it lacks added, and the vocabulary report."""
        targets = [b for _, b in split.train]
        vocabulary = {"unk_share_train_targets_before": unknown_token_share(student, targets)}
        if config.extend_vocabulary and not can_extend(student):
            logger.info("parallel: the student's %s has no unknown token; its vocabulary is kept",
                        type(student.tokenizer).__name__)
        elif config.extend_vocabulary:
            student = grow_vocabulary(
                student, targets, max_new_tokens=config.extend_vocabulary,
                min_count=config.vocabulary_min_count, init=config.vocabulary_init,
                seed=run.seed or 0, translations=[a for a, _ in split.train],
            )
            added = student.tokenizer.vocabulary_size() - start.tokenizer.vocabulary_size()
            vocabulary.update(added=added, init=config.vocabulary_init,
                              min_count=config.vocabulary_min_count,
                              unk_share_train_targets_after=unknown_token_share(student, targets))
        elif vocabulary["unk_share_train_targets_before"] > 0.05:
            logger.warning(
                "parallel: %.0f%% of the student's target tokens are the unknown token; "
                "it cannot learn them. extend_vocabulary > 0 adds them to its vocabulary.",
                100 * vocabulary["unk_share_train_targets_before"],
            )
        if split.test:
            vocabulary["unk_share_test_targets"] = unknown_token_share(
                student, [b for _, b in split.test])
        return student, vocabulary

    # -------------------------------------------------------------- training
    @staticmethod
    def _optimizer(run, plan, config):
        """AdamW (no decay of biases and LayerNorm) on a warmup-cosine schedule."""
        with run.scope():
            optimizer = TorchAdamW(
                learning_rate=warmup_cosine_decay(plan.learning_rate, plan.steps,
                                                  config.warmup_ratio),
                weight_decay=config.weight_decay,
            )
            optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
        return optimizer

    @staticmethod
    def _callbacks(run, plan, config, split):
        """`(selection, tracker)`: retrieval dev selection and alignment tracking, or None."""
        selection = None
        if split.dev:
            selection = RetrievalDevEvaluation(
                split.dev, pooling=plan.pooling, max_length=plan.max_length,
                restore_best=config.mode != "dual",
            )
        tracker = None
        if config.track_alignment and split.test:
            tracker = AlignmentUniformityTracker(
                split.test[:500], every=config.track_every or max(1, plan.steps // 10),
                target_pooling=plan.pooling, max_length=plan.max_length,
            )
        return selection, tracker

    @staticmethod
    def _finish(run, plan, config, encoder, extras, tracker):
        """Saves the student (and its report), then draws the alignment/uniformity plot."""
        if tracker is not None:
            extras["alignment_uniformity"] = tracker.history
        plot = config.plot or (os.path.join(run.output, "alignment_uniformity.png")
                               if run.output else None)
        if tracker is not None and plot:
            extras["plot"] = plot  # before `finish`, so the saved report names it too
        encoder = run.finish(encoder, plan, extras=extras)
        if tracker is not None and plot:  # after the save, which writes a new folder
            os.makedirs(os.path.dirname(os.path.abspath(plot)), exist_ok=True)
            tracker.plot(plot)
        return encoder


# The literal signature, for editors: `fit_function` checks it against the method's
# config and run defaults, and makes the function (its docstring is the method's).
def fit_parallel(data, model="default", steps=1000, batch_size=64, learning_rate=3e-5,
                 max_length=64, pooling="auto", dev="retrieval", eval_every=250, output=None,
                 strategy=None, callbacks=None, seed=0, verbose="auto", teacher=None,
                 student=None, mode="frozen_teacher", queue_size=10000, temperature="learnable",
                 init_temperature=0.07, max_logit_scale=100.0, mlp="auto", weight_decay=0.01,
                 warmup_ratio=0.1, eval_size=1000, dev_size=500, track_alignment=True,
                 track_every=0, plot=None, extend_vocabulary=10000, vocabulary_min_count=2,
                 vocabulary_init="aligned", precision="auto", mini_batch_size=None,
                 matryoshka_dims=None, max_grad_norm=None, matryoshka_weights=None,
                 dev_retrieval=None, dev_select="auto", max_skipped=0.01, preset=None):
    ...


fit_parallel = fit_function("parallel", fit_parallel)
