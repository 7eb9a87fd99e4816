"""`fit_parallel`: a frozen teacher teaching a student on translation pairs."""

import logging
import os

from keras_sentemb import validation
from keras_sentemb.data.parallel import load_parallel_pairs
from keras_sentemb.data.parallel import split_pairs
from keras_sentemb.evaluation.alignment_uniformity import AlignmentUniformityTracker
from keras_sentemb.evaluation.retrieval import evaluate_bitext_retrieval
from keras_sentemb.models.projection_head import with_projection_head
from keras_sentemb.models.vocabulary import INITS
from keras_sentemb.models.vocabulary import can_extend
from keras_sentemb.models.vocabulary import extend_vocabulary as grow_vocabulary
from keras_sentemb.models.vocabulary import unknown_token_share
from keras_sentemb.pipelines.callbacks import DevSelection
from keras_sentemb.pipelines.arguments import fit_function
from keras_sentemb.pipelines.schedules import warmup_cosine_decay
from keras_sentemb.trainers.parallel import MODES
from keras_sentemb.trainers.parallel import ParallelContrastive
from keras_sentemb.trainers.parallel import resolve_temperature
from keras_sentemb.trainers.parallel import set_trainable
from keras_sentemb.trainers.torch_adamw import TorchAdamW

logger = logging.getLogger(__name__)

RETRIEVAL_DEV = "retrieval"


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


@fit_function(
    "parallel", paper_pooling="cls", in_batch=True, custom_dev=(RETRIEVAL_DEV,),
    optional=("precision", "mini_batch_size", "max_grad_norm", "matryoshka_dims",
              "matryoshka_weights"),
    steps=1000, batch_size=64, learning_rate=3e-5,
    max_length=64, dev=RETRIEVAL_DEV, eval_every=250,
    docs={
        "model": (
            "str or `SentenceEncoder`. Initialises both the teacher and the "
            "student unless `teacher` / `student` say otherwise. Defaults to "
            '`"default"`.'
        ),
        "pooling": 'str. The student\'s pooling, `"auto"` or a name.',
        "dev": (
            '`"retrieval"`, `"stsb"`, an STS-B path, pairs or None. Defaults to'
            ' `"retrieval"`.'
        ),
    },
)
def fit_parallel(
    run,
    data,
    teacher=None,
    student=None,
    mode="frozen_teacher",
    queue_size=10000,
    temperature="learnable",
    init_temperature=0.07,
    max_logit_scale=100.0,
    mlp="auto",
    weight_decay=0.01,
    warmup_ratio=0.1,
    eval_size=1000,
    dev_size=500,
    track_alignment=True,
    track_every=0,
    plot=None,
    extend_vocabulary=10000,
    vocabulary_min_count=2,
    vocabulary_init="aligned",
):
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

    Args:
        data: TSV path (`source<TAB>target[<TAB>...]`), list of
            (source, target), or `tf.data.Dataset` of pairs.
        teacher: str, `SentenceEncoder` or None. The source-side encoder:
            in the paper a trained sentence encoder (SimCSE-RoBERTa-large
            for step A). Defaults to `None` (= `model`, with a warning in
            `"frozen_teacher"` mode: the student would learn from its own
            starting point).
        student: str, `SentenceEncoder` or None. The student's
            initialisation. Defaults to `None` (a copy of `model`).
        mode: str. `"frozen_teacher"`, `"dual"` or `"shared"`.
        queue_size: int. Memory queue rows (0: in-batch only). Defaults to
            `10000`.
        temperature: `"learnable"` or float. Defaults to `"learnable"`.
        init_temperature: float. Defaults to `0.07`.
        max_logit_scale: float. Defaults to `100`.
        mlp: str. `"auto"`, `"train"` or `"none"`. Defaults to `"auto"`.
        weight_decay: float. AdamW weight decay. Defaults to `0.01`.
        warmup_ratio: float. Fraction of steps of linear warmup. Defaults to
            `0.1`.
        eval_size: int. Held-out test pairs. Defaults to `1000`.
        dev_size: int. Held-out dev pairs for `dev="retrieval"`. Defaults to
            `500`.
        track_alignment: bool. Log alignment/uniformity. Defaults to `True`.
        track_every: int. Steps between tracking points (`0`: steps // 10).
        plot: str or None. PNG path of the trajectory plot.
        extend_vocabulary: int. At most this many new tokens for the student,
            learned on the training targets (`0`: keep its vocabulary).
            Defaults to `10000`.
        vocabulary_min_count: int. Minimum occurrences of a new token in
            the training targets. Defaults to `2`.
        vocabulary_init: str. Initial embedding rows of new tokens:
            `"aligned"` (the rows of the source tokens each new token is
            aligned with in the training pairs, by IBM Model 1), `"mean"`,
            `"pieces"` or `"normal"` (see `add_vocabulary`). Defaults to
            `"aligned"`.

    Returns:
        The trained student `SentenceEncoder`. Its `training_report.extras`
        hold the held-out retrieval before and after training, the
        alignment/uniformity history and the `[UNK]` share of the targets
        (and the vocabulary extension, if any).

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
    validation.choice(mlp, "mlp", ("auto", "train", "none"))
    validation.choice(mode, "mode", MODES)
    resolve_temperature(temperature)
    eval_size = validation.non_negative_int(eval_size, "eval_size")
    dev_size = validation.non_negative_int(dev_size, "dev_size")
    extend_vocabulary = validation.non_negative_int(extend_vocabulary, "extend_vocabulary")
    vocabulary_min_count = validation.positive_int(vocabulary_min_count, "vocabulary_min_count")
    validation.choice(vocabulary_init, "vocabulary_init", INITS)
    all_pairs = load_parallel_pairs(data)
    source = os.fspath(data) if isinstance(data, (str, os.PathLike)) else "the pairs given"
    try:
        train_pairs, heldout = split_pairs(all_pairs, eval_size=eval_size, seed=run.seed)
        dev_pairs = []
        if run.dev == RETRIEVAL_DEV and dev_size:
            train_pairs, dev_pairs = split_pairs(train_pairs, eval_size=dev_size,
                                                 seed=run.seed + 1)
    except ValueError as e:
        raise ValueError(
            f"{source}: {len(all_pairs)} pairs are too few to hold out eval_size={eval_size} "
            f"test pairs and dev_size={dev_size} dev pairs ({e}); pass a smaller `eval_size` / "
            "`dev_size` (--eval-size / --dev-size on the command line) or more pairs."
        ) from None
    run.record_data(train_pairs=len(train_pairs), test_pairs=len(heldout), dev_pairs=len(dev_pairs))
    logger.info("parallel: %d training pairs, %d dev, %d test",
                len(train_pairs), len(dev_pairs), len(heldout))

    with run.scope():
        base = run.load_encoder()
        teacher_enc = base if teacher is None else run.load_encoder(teacher)
        source_init = teacher_enc  # the untrained source side (dual-mode reference)
        start = base if student is None else run.load_encoder(student)
        start_spec = run.model if student is None else student
        if mode == "frozen_teacher" and (teacher_enc is start or teacher is start_spec or (
                isinstance(teacher, str) and teacher == start_spec)):
            logger.warning(
                "parallel: the frozen teacher is the student's own starting model; the paper's "
                "teacher is a trained sentence encoder (SimCSE-RoBERTa-large). Pass "
                "`teacher=` a trained encoder unless the starting model is one."
            )
        # The student is always a fresh copy (the caller's encoder is never
        # trained in place); so is a dual-mode teacher, which is trained too.
        student_enc = start.clone(name="student")
        targets = [b for _, b in train_pairs]
        vocabulary = {"unk_share_train_targets_before": unknown_token_share(student_enc, targets)}
        if extend_vocabulary and not can_extend(student_enc):
            logger.info("parallel: the student's %s has no unknown token; its vocabulary is kept",
                        type(student_enc.tokenizer).__name__)
        elif extend_vocabulary:
            student_enc = grow_vocabulary(
                student_enc, targets, max_new_tokens=extend_vocabulary,
                min_count=vocabulary_min_count, init=vocabulary_init, seed=run.seed or 0,
                translations=[a for a, _ in train_pairs],
            )
            added = student_enc.tokenizer.vocabulary_size() - start.tokenizer.vocabulary_size()
            vocabulary.update(added=added, init=vocabulary_init, min_count=vocabulary_min_count,
                              unk_share_train_targets_after=unknown_token_share(student_enc, targets))
        elif vocabulary["unk_share_train_targets_before"] > 0.05:
            logger.warning(
                "parallel: %.0f%% of the student's target tokens are the unknown token; "
                "it cannot learn them. extend_vocabulary > 0 adds them to its vocabulary.",
                100 * vocabulary["unk_share_train_targets_before"],
            )
        if heldout:
            vocabulary["unk_share_test_targets"] = unknown_token_share(
                student_enc, [b for _, b in heldout])
        set_trainable(student_enc, True)  # a clone of a frozen encoder inherits the flag
        if mode == "shared":
            teacher_enc = None
        elif mode == "dual":
            teacher_enc = teacher_enc.clone(name="teacher")
            set_trainable(teacher_enc, True)
        pooling = run.pooling_for(start)
        kept_head = None
        training_mlp = run.training_mlp(mlp)
        if (mode == "frozen_teacher" and student_enc.projection is None
                and student_enc.output_dim != teacher_enc.output_dim):
            # Without a kept head the student could not be compared with its teacher.
            logger.info("parallel: the student (%d-d) keeps a tanh head to the teacher's %d-d "
                        "space", student_enc.output_dim, teacher_enc.output_dim)
            student_enc = with_projection_head(student_enc, units=teacher_enc.output_dim,
                                               initializer="identity")
            training_mlp = run.report.resolved["mlp"] = "none"
            kept_head = teacher_enc.output_dim
        trainer = ParallelContrastive(
            student_enc, teacher_enc, mode=mode, queue_size=queue_size,
            temperature=temperature, init_temperature=init_temperature,
            max_logit_scale=max_logit_scale, pooling=pooling, mlp=training_mlp,
            mini_batch_size=run.mini_batch_size,
        )
        optimizer = TorchAdamW(
            learning_rate=warmup_cosine_decay(run.learning_rate, run.steps, warmup_ratio),
            weight_decay=validation.non_negative_float(weight_decay, "weight_decay"),
        )
        optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    run.compile(trainer, optimizer)

    def retrieval(student_encoder, teacher_encoder=None):
        return evaluate_bitext_retrieval(
            teacher_encoder or trainer.teacher, student_encoder, heldout,
            max_length=run.max_length, target_pooling=pooling,
        )

    extras = {"mode": mode, "vocabulary": vocabulary}
    if kept_head:
        extras["kept_head"] = kept_head
    if heldout:
        extras["retrieval_before"] = retrieval(trainer.student)
        logger.info("held-out retrieval before: %s", extras["retrieval_before"])
    selection = None
    if dev_pairs:
        selection = RetrievalDevEvaluation(
            dev_pairs, pooling=pooling, max_length=run.max_length,
            restore_best=mode != "dual",
        )
    tracker = None
    if track_alignment and heldout:
        tracker = AlignmentUniformityTracker(
            heldout[:500], every=track_every or max(1, run.steps // 10),
            target_pooling=pooling, max_length=run.max_length,
        )
    make_dataset = run.batches(
        trainer.student, {"source": [a for a, _ in train_pairs], "target": [b for _, b in train_pairs]},
        encoders={"source": trainer.teacher},
    )
    run.fit(trainer, make_dataset, selection=selection,
            dev_pairs=None if run.dev == RETRIEVAL_DEV else "run",
            callbacks=[tracker] if tracker else ())
    encoder = trainer.student
    if heldout:
        extras["retrieval_after"] = retrieval(encoder)
        if mode == "dual":
            extras["retrieval_after_initial_teacher"] = retrieval(encoder, source_init)
        logger.info("held-out retrieval after: %s", extras["retrieval_after"])
    extras["final_temperature"] = float(1.0 / trainer.logit_scale().numpy())
    if tracker is not None:
        extras["alignment_uniformity"] = tracker.history
    plot = plot or (os.path.join(run.output, "alignment_uniformity.png") if run.output else None)
    if tracker is not None and plot:
        extras["plot"] = plot  # before `finish`, so the saved report names it too
    encoder = run.finish(encoder, extras=extras)
    if tracker is not None and plot:  # after the save, which writes a new folder
        os.makedirs(os.path.dirname(os.path.abspath(plot)), exist_ok=True)
        tracker.plot(plot)
    return encoder
