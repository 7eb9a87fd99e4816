"""ESimCSE, unsupervised: word-repetition positives, momentum-queue negatives: `fit_esimcse`."""

from keras_sentemb.methods.esimcse.config import PAPER_POOLING
from keras_sentemb.methods.esimcse.config import PRESETS
from keras_sentemb.methods.esimcse.config import ESimCSEConfig
from keras_sentemb.methods.esimcse.repetition import with_word_repetition
from keras_sentemb.methods.esimcse.trainer import ESimCSE as ESimCSETrainer
from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import STREAMED_DATA_DOC
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.pipelines.schedules import adamw_linear_decay


@register_method("esimcse")
class ESimCSEMethod(Method):
    """Trains a sentence encoder with ESimCSE (word repetition and momentum contrast) and returns it.

    The sentences of `data` (e.g. Wikipedia), each paired with a copy in
    which a random number of its subword tokens are repeated in place
    (`dup_rate`, so that the two views differ in length), both encoded with
    dropout; the negatives are the batch's other views and a FIFO queue of
    views embedded by a momentum copy of the encoder (`momentum`, a queue of
    `queue_ratio` x batch rows; `queue_ratio=0`: repetition alone). InfoNCE
    at temperature 0.05, batch 64, learning rate 3e-5 (linear decay), max
    length 32, one epoch. Pooling: the model's own when it declares one,
    else the paper's [CLS] with an MLP head in training only
    (`mlp="auto"`). With `dev` (STS-B dev by default) the best checkpoint,
    the starting weights included, is kept.

    Examples:

    ```python
    encoder = fit_esimcse("wiki100k.txt", steps=300)
    encoder = fit_esimcse("wiki100k.txt", queue_ratio=0.0)   # word repetition alone
    ```

    References:
        - [Wu et al., 2022. ESimCSE: Enhanced Sample Building Method for
          Contrastive Learning of Unsupervised Sentence
          Embedding](https://arxiv.org/abs/2109.04380).
    """

    config_class = ESimCSEConfig
    paper_pooling = PAPER_POOLING
    in_batch = True
    parallel_passes = True
    optional = ("precision", "mini_batch_size", "max_grad_norm") + DEV_RETRIEVAL + STREAMED
    run_defaults = {"batch_size": 64, "learning_rate": 3e-5, "max_length": 32,
                    "eval_every": 125, "seed": 42, "max_grad_norm": 1.0}
    data_doc = STREAMED_DATA_DOC

    presets = PRESETS

    def train(self, run, data, config):
        sentences, stream, n = run.read_sentences(data)
        with run.scope():
            encoder, plan = run.start(examples=n, mlp=config.mlp)
            trainer = ESimCSETrainer(encoder, config, pooling=plan.pooling,
                                     batch_size=run.batch_size,
                                     mini_batch_size=run.mini_batch_size, seed=run.seed)
        optimizer = adamw_linear_decay(plan.learning_rate, plan.steps)
        make_dataset = run.sentence_batches(encoder, sentences, stream, plan, no_duplicates=True)
        make_dataset = with_word_repetition(make_dataset, encoder, run.seed or 0,
                                            config.dup_rate, plan.max_length)
        return run.train(trainer, optimizer, make_dataset, plan)


# The `fit_*` function: its signature and docstring are the method's.
fit_esimcse = fit_function("esimcse", "fit_esimcse")
