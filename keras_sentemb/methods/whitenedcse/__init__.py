"""WhitenedCSE, unsupervised: shuffled group whitening of dropout views, several positives."""

from keras_sentemb.methods.esimcse.repetition import with_word_repetition
from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import STREAMED_DATA_DOC
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.methods.whitenedcse.config import PAPER_POOLING
from keras_sentemb.methods.whitenedcse.config import PRESETS
from keras_sentemb.methods.whitenedcse.config import WhitenedCSEConfig
from keras_sentemb.methods.whitenedcse.trainer import WhitenedCSE as WhitenedCSETrainer
from keras_sentemb.pipelines.schedules import adamw_linear_decay


@register_method("whitenedcse")
class WhitenedCSEMethod(Method):
    """Trains a sentence encoder with WhitenedCSE (shuffled group whitening) and returns it.

    Unsupervised SimCSE on the sentences of `data` (e.g. Wikipedia) with
    three dropout views of each sentence instead of two (`positives=2`). In
    training each view's vectors are whitened over the batch: the channels
    are shuffled (a new permutation per view and step), cut into groups of
    6 (`group_size`; 128 groups of BERT-base's 768 channels) and each group
    is ZCA-whitened, which spreads the vectors evenly over the space
    (uniformity) while the views of one sentence must still match
    (alignment). The loss sums InfoNCE of the first view against each
    positive, temperature 0.05; batch 64, learning rate 3e-5 (linear
    decay), max length 32, one epoch. Pooling: the model's own when it
    declares one, else the paper's [CLS] with the MLP head (after the
    whitening) in training only. The kept encoder has neither the whitening
    nor the head. With `dev` (STS-B dev by default) the best checkpoint, the
    starting weights included, is kept. The batch must be larger than
    `group_size`, which must divide the vector's width. `dup_rate` > 0 takes
    the positives from ESimCSE's word-repetition copy of each sentence.

    Deliberate differences from the official code: its whitening module
    splits the stacked batch into thirds, and the stack interleaves each
    sentence's three views, so one whitening often covers all the views of
    a sentence; here each view is whitened on its own, as the paper
    describes. The official code adds nothing to the eigenvalues before
    their inverse square root; here `epsilon` (1e-5) does, so that a group
    of a small or repetitive batch stays finite.

    Examples:

    ```python
    encoder = fit_whitenedcse("wiki100k.txt", steps=300)
    encoder = fit_whitenedcse("wiki100k.txt", preset="unsup-bert-base")
    ```

    References:
        - [Zhuo et al., 2023. WhitenedCSE: Whitening-based Contrastive
          Learning of Sentence Embeddings](https://arxiv.org/abs/2305.17746).
        - [Gao et al., 2021. SimCSE: Simple Contrastive Learning of Sentence
          Embeddings](https://arxiv.org/abs/2104.08821).
    """

    config_class = WhitenedCSEConfig
    paper_pooling = PAPER_POOLING
    in_batch = True
    optional = ("precision", "max_grad_norm") + DEV_RETRIEVAL + STREAMED
    run_defaults = {"batch_size": 64, "learning_rate": 3e-5, "max_length": 32,
                    "eval_every": 125, "seed": 42, "max_grad_norm": 1.0}
    data_doc = STREAMED_DATA_DOC

    presets = PRESETS

    def train(self, run, data, config):
        if run.batch_size <= config.group_size:
            raise ValueError(
                f"WhitenedCSE whitens groups of {config.group_size} channels over the batch: "
                f"batch_size must be larger than group_size; received batch_size="
                f"{run.batch_size}.")
        sentences, stream, n = run.read_sentences(data)
        with run.scope():
            encoder, plan = run.start(examples=n, mlp=config.mlp)
            if encoder.output_dim % config.group_size:
                raise ValueError(
                    f"WhitenedCSE's group_size ({config.group_size}) must divide the sentence "
                    f"vector's width ({encoder.output_dim}).")
            trainer = WhitenedCSETrainer(encoder, config, pooling=plan.pooling, seed=run.seed)
        optimizer = adamw_linear_decay(plan.learning_rate, plan.steps)
        make_dataset = run.sentence_batches(encoder, sentences, stream, plan, no_duplicates=True)
        if config.dup_rate > 0:
            make_dataset = with_word_repetition(make_dataset, encoder, run.seed or 0,
                                                config.dup_rate, plan.max_length)
        return run.train(trainer, optimizer, make_dataset, plan)


# The `fit_*` function: its signature and docstring are the method's.
fit_whitenedcse = fit_function("whitenedcse", "fit_whitenedcse")
