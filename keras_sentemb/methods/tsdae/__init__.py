"""TSDAE, a denoising auto-encoder for sentence vectors: `fit_tsdae`."""

from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import STREAMED_DATA_DOC
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.methods.tsdae.config import PAPER_POOLING
from keras_sentemb.methods.tsdae.config import PRESETS
from keras_sentemb.methods.tsdae.config import TSDAEConfig
from keras_sentemb.methods.tsdae.noise import deletion_view
from keras_sentemb.methods.tsdae.trainer import TSDAE as TSDAETrainer
from keras_sentemb.trainers.torch_adamw import TorchAdamW


@register_method("tsdae")
class TSDAEMethod(Method):
    """Trains a sentence encoder as a denoising auto-encoder (TSDAE) and returns it.

    Each sentence of `data` loses words (`deletion_rate`, 0.6: the paper's)
    and the encoder embeds what is left; a decoder that sees nothing but
    that one vector (a cross-attention to it in each of its layers) must
    reconstruct the whole original sentence, token by token. The decoder
    is the encoder's own layers run causally (`tie_decoder=True`, the
    paper's best), with a cross-attention and an LM head of its own,
    dropped afterwards. Unlabelled in-domain text is all it needs: the
    paper's use is adapting an encoder to a domain (it leads the other
    unsupervised methods on re-ranking and retrieval there, not on STS).
    AdamW at a constant 3e-5, batch 8, [CLS] pooling for a raw backbone
    (the model's own when it declares one), one epoch. With `dev` (STS-B
    dev by default) the best checkpoint, the starting weights included, is
    kept.

    Examples:

    ```python
    encoder = fit_tsdae("my_domain.txt", steps=2000)
    encoder = fit_tsdae("my_domain.txt", deletion_rate=0.3, tie_decoder=False)
    ```

    References:
        - [Wang, Reimers and Gurevych, 2021. TSDAE: Using Transformer-based
          Sequential Denoising Auto-Encoder for Unsupervised Sentence
          Embedding Learning](https://arxiv.org/abs/2104.06979).
    """

    config_class = TSDAEConfig
    paper_pooling = PAPER_POOLING
    optional = ("precision", "max_grad_norm") + DEV_RETRIEVAL + STREAMED
    run_defaults = {"batch_size": 8, "learning_rate": 3e-5, "max_grad_norm": 1.0}
    data_doc = STREAMED_DATA_DOC

    presets = PRESETS

    def train(self, run, data, config):
        sentences, stream, n = run.read_sentences(data)
        with run.scope():
            encoder, plan = run.start(examples=n)
            trainer = TSDAETrainer(encoder, config, pooling=plan.pooling, seed=run.seed or 0)
        # The reference's optimizer: AdamW at a constant rate.
        optimizer = TorchAdamW(learning_rate=plan.learning_rate,
                               weight_decay=config.weight_decay)
        views = {"noisy": ("sentence", deletion_view(config.deletion_rate))}
        make_dataset = run.sentence_batches(encoder, sentences, stream, plan, text_views=views)
        return run.train(trainer, optimizer, make_dataset, plan)


# The `fit_*` function: its signature and docstring are the method's.
fit_tsdae = fit_function("tsdae", "fit_tsdae")
