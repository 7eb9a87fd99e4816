"""`SentenceEncoder`: a keras-hub backbone, its tokenizer and a pooling."""

import keras
import numpy as np
import tensorflow as tf

from keras_sentemb.compat import require_tensorflow_backend
from keras_sentemb.models.backbone_adapter import BackboneAdapter
from keras_sentemb.models.encoder_forward import EncoderForward
from keras_sentemb.models.encoder_persistence import EncoderPersistence
from keras_sentemb.models.encoding_engine import EncodingEngine
from keras_sentemb.kernels.fused_gelu import check_gelu_form
from keras_sentemb.models.int8_encoder import check_calibration
from keras_sentemb.kernels.fused_gelu import set_gelu_form
from keras_sentemb.kernels.install import install_kernels
from keras_sentemb.kernels.policy import KernelPolicy
from keras_sentemb.models.loading import register_serializable_classes
from keras_sentemb.models.pooling import MASK_POOLING
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.models.post_processing import PostProcessing
from keras_sentemb.models.prompt import MASK
from keras_sentemb.models.prompt import check_template
from keras_sentemb.models.prompt import parse_prompt
from keras_sentemb.models.text_normalization import check_mode

require_tensorflow_backend()


@keras.saving.register_keras_serializable(package="keras_sentemb")
class SentenceEncoder(EncoderPersistence, EncodingEngine, EncoderForward, keras.Model):
    """Turns sentences into vectors: keras-hub backbone, tokenizer, pooling.

    The encoder runs the backbone's own layers (token, position and segment
    embeddings, the embedding LayerNorm and dropout, every Transformer layer)
    so that it can expose the hook points the training methods need: all
    hidden states (for layer-wise pooling and self-guided views), custom
    position ids (token shuffling) and a transform of the embedding output
    (cutoff, dropout and adversarial views). Weights are the backbone's;
    nothing is copied.

    Call it on packed token inputs (`token_ids`, `padding_mask`, optional
    `segment_ids` and `position_ids`) to get float32 sentence vectors, or use
    `encode()` on raw strings.

    Args:
        backbone: `keras_hub.models.BertBackbone` or
            `keras_hub.models.RobertaBackbone` (or a subclass).
        tokenizer: the matching keras-hub tokenizer.
        pooling: str or None. `"cls"`, `"mean"`, `"max"`, `"mean_last2"`,
            `"first_last"` or `"layer:K"`. `None` means the model declares
            no pooling of its own: it encodes with `"mean"`, and the training
            methods use their paper's pooling (`pooling="auto"` in every
            `fit_*`). Defaults to `None`.
        normalize: bool. L2-normalise the output vectors. Defaults to `False`.
        max_length: int. Maximum tokens per sentence, special tokens included;
            longer inputs are truncated. Defaults to `256`.
        projection_dim: int or None. Adds a dense head of this size after
            pooling. Defaults to `None` (no head).
        projection_activation: str or None. Activation of the head. Defaults
            to `None`.
        text_normalization: str or None. `"bert_uncased"` / `"bert_cased"`
            apply Hugging Face BERT's text cleaning (and lower-casing plus
            accent stripping for uncased) before the keras-hub tokenizer, whose
            own lowercasing and accent stripping are then turned off; `None`
            leaves the tokenizer as it is. Encoders loaded from Hugging Face
            BERT folders use it, for token-for-token parity with the
            reference tokenizer. Defaults to `None`.
        postprocess: a `keras_sentemb.models.PostProcessing` layer (e.g.
            `Whitening`, `GlowFlow`), its serialized config, or None. Runs
            on the sentence vectors after pooling, the projection head and
            the L2 normalisation (see `postprocess`). Defaults to `None`.
        kernels: a `keras_sentemb.KernelPolicy`, `"auto"`, `"fused"`,
            `"plain"` or a dict op -> choice. Which fused kernels of this
            package the backbone runs (GELU, layer norm, dropout, the fused
            Transformer layer) instead of the plain TensorFlow ops; `"auto"`
            picks per op from the kernels measured faster on this CPU's
            instruction set (`keras_sentemb.kernel_report()` shows the
            choice). Saved in the config. Defaults to `"auto"`.
        feedforward_gelu: str or None. The GELU form of the Transformer layers'
            feed-forward: `"exact"` (the erf form) or `"tanh"` (the tanh
            approximation). keras-hub builds BERT with the tanh approximation
            and RoBERTa with the exact form, whatever a checkpoint was trained
            with; encoders loaded from Hugging Face folders set it from their
            `config.json`'s `hidden_act` (`"gelu"` is exact, as Hugging Face
            computes it). Saved in the config. Defaults to `None` (the
            backbone's own).
        prompt: str or None. A template that frames every sentence, `[X]`
            marking the sentence and `[MASK]` the tokenizer's mask token,
            e.g. `'This sentence : "[X]" means [MASK] .'` (PromptBERT);
            `pooling="mask"` then reads the last layer at `[MASK]`. The
            sentence keeps up to `max_length - 2` tokens and the template's
            come on top. `encode`, training batches and the SavedModel
            frame sentences alike; saved in the folder. Formats that
            tokenize outside the model (Hugging Face, LiteRT, a keras-hub
            `TextEmbedder`) cannot carry it. Defaults to `None`.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    vectors = encoder.encode(["A man is playing a guitar.", "Hello!"])
    encoder.save("my_encoder")
    encoder = SentenceEncoder.from_preset("my_encoder")
    ```

    References:
        - [Reimers & Gurevych, 2019](https://arxiv.org/abs/1908.10084)
    """
    def __init__(
        self,
        backbone,
        tokenizer,
        pooling=None,
        normalize=False,
        max_length=256,
        projection_dim=None,
        projection_activation=None,
        text_normalization=None,
        postprocess=None,
        kernels=None,
        feedforward_gelu=None,
        prompt=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.adapter = BackboneAdapter(backbone)
        self.feedforward_gelu = check_gelu_form(feedforward_gelu)
        if feedforward_gelu is not None:
            set_gelu_form(self.adapter.transformer_layers, feedforward_gelu)
        # Which fused kernels the backbone may run, bound to its layers (see kernels/policy.py).
        self._kernels = KernelPolicy.of(kernels)
        install_kernels(backbone, self.adapter.transformer_layers, self._kernels)
        self.text_normalization = check_mode(text_normalization)
        if text_normalization is not None:
            tokenizer.lowercase = False
            tokenizer.strip_accents = False
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.num_layers = len(backbone.transformer_layers)
        self._declared_pooling = None
        object.__setattr__(self, "_prompt_template", None)
        object.__setattr__(self, "_prompt", None)
        if prompt is not None:
            self._set_prompt(prompt)
        if pooling is not None:
            self.pooling = pooling
        self.normalize = bool(normalize)
        limit = int(backbone.max_sequence_length)
        if not isinstance(max_length, (int, np.integer)) or not (
            3 <= max_length <= limit
        ):
            raise ValueError(
                f"`max_length` must be an int in [3, {limit}] for this "
                f"backbone, received {max_length!r}."
            )
        self.max_length = int(max_length)
        self.projection_dim = projection_dim
        self.projection_activation = projection_activation
        self.projection = None
        if projection_dim is not None:
            self.projection = keras.layers.Dense(
                int(projection_dim),
                activation=projection_activation,
                dtype=backbone.dtype_policy,
                name="projection",
            )
            self.projection.build((None, backbone.hidden_dim))
        # BERT's pooler ([CLS] -> dense -> tanh) is not part of any sentence
        # pooling here; freezing it keeps optimizers from tracking weights
        # that never receive gradients.
        if self.adapter.pooler is not None:
            self.adapter.pooler.trainable = False
        self._encode_fns = {}
        self._warm_encode_fns = {}  # id(fn) -> (fn, the widths its batches are padded to)
        self._tokenize_graph = None
        # Not tracked: the twins are other encoders sharing these weights; tracked,
        # their layers would count as this encoder's (twice in its weights).
        object.__setattr__(self, "_precision_twins", {})
        object.__setattr__(self, "_int8_calibration", None)
        # At most one layer; a tracked list so that replacing it untracks the old one.
        self._postprocess_layers = []
        if postprocess is not None:
            self.postprocess = postprocess
            if pooling is not None:
                self.pooling = pooling  # must agree with the layer's
        self._training_report = None
        self.model_card = None
        # The backbone (and head) are built, so the encoder is too.
        self.built = True

    # --------------------------------------------------------------- pooling
    @property
    def pooling(self):
        """The pooling `encode` and `call` use (`"mean"` when none is declared)."""
        return self._declared_pooling or "mean"

    def __setattr__(self, name, value):
        # `encoder.pooling = p` declares the pooling. Not a property setter:
        # TensorFlow's AutoTrackable skips `setattr` when the new value *is*
        # the current one, and an undeclared encoder already reads "mean".
        if name == "pooling":
            pooling = parse_pooling(value, self.num_layers)
            self._check_postprocess_pooling(pooling)
            self._check_mask_pooling(pooling, self.prompt_template)
            super().__setattr__("_declared_pooling", pooling)
            return
        if name == "prompt":
            self._set_prompt(value)
            return
        if name == "postprocess":
            self._set_postprocess(value)
            return
        super().__setattr__(name, value)

    # ---------------------------------------------------------------- prompt
    @property
    def prompt(self):
        """The `Prompt` that frames every sentence (see the `prompt` argument), or None.

        Assign a template string (or None) to change it; `encode` then
        frames with the new one. Tokenized on first use: an encoder
        restored from its config has no vocabulary until its assets load.
        """
        template = self.__dict__.get("_prompt_template")
        if template is None:
            return None
        prompt = self.__dict__.get("_prompt")
        if prompt is None:
            prompt = self.make_prompt(template)
            object.__setattr__(self, "_prompt", prompt)
        return prompt

    @property
    def prompt_template(self):
        """The template string of `prompt`, or None."""
        return self.__dict__.get("_prompt_template")

    def make_prompt(self, template):
        """The `Prompt` of `template` for this encoder's tokenizer (see the `prompt` argument).

        What `pack` and `preprocess` take to frame sentences in a template
        other than the encoder's own (e.g. a training method's second view).
        """
        def tokenize(text):
            with tf.init_scope():  # eager, even when first needed while a graph traces
                return self._tokenize(tf.constant([text])).flat_values.numpy()

        prompt = parse_prompt(template, tokenize, getattr(self.tokenizer, "mask_token_id", None))
        limit = int(self.backbone.max_sequence_length)
        if prompt.extra + 3 > limit:
            raise ValueError(f"`prompt` takes {prompt.extra} tokens; this backbone reads "
                             f"{limit} at most.")
        return prompt

    def _set_prompt(self, template):
        if template is not None:
            check_template(template)
        self._check_mask_pooling(self._declared_pooling, template)
        parsed = None
        if template is not None and getattr(self.tokenizer, "vocabulary", None) is not None:
            parsed = self.make_prompt(template)  # errors now, where the vocabulary is known
        object.__setattr__(self, "_prompt_template", template)
        object.__setattr__(self, "_prompt", parsed)
        for cache in ("_encode_fns", "_warm_encode_fns", "_precision_twins"):
            self.__dict__.get(cache, {}).clear()  # traced or built with the old framing

    @staticmethod
    def _check_mask_pooling(pooling, template):
        if pooling == MASK_POOLING and (template is None or MASK not in template):
            raise ValueError(
                "`pooling='mask'` reads the last layer at the [MASK] of the encoder's prompt; "
                "this encoder has no prompt with [MASK] (set `prompt`, e.g. "
                "'This sentence : \"[X]\" means [MASK] .').")

    # ----------------------------------------------------------- postprocess
    @property
    def postprocess(self):
        """The post-processing layer (`Whitening`, `GlowFlow`, ...) or None.

        It maps the encoder's vectors (after pooling, the projection head and
        the encoder's L2 normalisation) to its own, in `encode`, in `call`
        (hence evaluation and the exported SavedModel) and in `save`.
        Assigning a layer fitted on a pooling makes that pooling the
        encoder's; encoding with another pooling is then refused. Assign
        None to remove it.
        """
        layers = self.__dict__.get("_postprocess_layers")
        return layers[0] if layers else None

    def _set_postprocess(self, layer):
        if isinstance(layer, dict):
            register_serializable_classes()
            layer = keras.saving.deserialize_keras_object(layer)
        if layer is not None and not isinstance(layer, PostProcessing):
            raise TypeError(
                "`postprocess` must be a keras_sentemb PostProcessing layer (Whitening, "
                f"GlowFlow) or None; received {type(layer).__name__}."
            )
        if layer is not None:
            if layer.input_dim != self.base_output_dim:
                raise ValueError(
                    f"The post-processing layer takes {layer.input_dim}-dimensional vectors; "
                    f"this encoder outputs {self.base_output_dim}."
                )
            if not layer.built:
                layer.build((None, layer.input_dim))
        self._postprocess_layers.clear()
        self._encode_fns.clear()
        self._warm_encode_fns.clear()
        self.__dict__.get("_precision_twins", {}).clear()  # copies made with the old layer
        if layer is not None:
            self._postprocess_layers.append(layer)
            if layer.pooling is not None:
                self._declared_pooling = parse_pooling(layer.pooling, self.num_layers)

    def _check_postprocess_pooling(self, pooling):
        layer = self.postprocess
        if layer is not None and layer.pooling is not None and pooling != layer.pooling:
            raise ValueError(
                f"This encoder's {type(layer).__name__} was fitted on {layer.pooling} "
                f"pooling; it cannot post-process {pooling} pooling. Encode with "
                f"pooling={layer.pooling!r}, or remove it (encoder.postprocess = None)."
            )

    @property
    def kernels(self):
        """The encoder's `KernelPolicy` (which fused kernels its backbone may run)."""
        return self._kernels

    @property
    def declared_pooling(self):
        """The pooling the model declares, or None.

        Set by a sentence-transformers pooling config or a keras_sentemb
        folder when loading, by the `pooling` constructor argument, or by
        assigning `encoder.pooling`. A raw backbone (a keras-hub preset, a
        plain Hugging Face BERT folder) declares none; the `fit_*` functions
        then use their paper's pooling.
        """
        return self._declared_pooling

    @property
    def training_report(self):
        """How this encoder was trained (a `TrainingReport`), or None.

        Set by the `fit_*` functions on the encoder they return: method,
        hyperparameters, data, steps, pooling and why, the dev history and
        the selection.
        """
        return self._training_report

    @training_report.setter
    def training_report(self, report):
        self._training_report = report

    @property
    def int8_calibration(self):
        """The sentences `encode(precision="int8")` calibrates its ranges on, or None.

        None (the default) calibrates on the first 128 sentences of the
        bundled Wikipedia sample; assign a few hundred sentences like those
        you encode (a list of str) to calibrate on them instead
        (`keras_sentemb.models.int8_encoder`). Not saved with the encoder.
        """
        return self._int8_calibration

    @int8_calibration.setter
    def int8_calibration(self, sentences):
        if sentences is not None:
            sentences = check_calibration(sentences)
        object.__setattr__(self, "_int8_calibration", sentences)

    @property
    def model_card(self):
        """The model card (a dict) the encoder was loaded with, or None.

        `save` writes a new card (`keras_sentemb.model_card`) built from the
        `training_report` and this one.
        """
        return self._model_card

    @model_card.setter
    def model_card(self, card):
        # Not tracked: a tracked dict would become a node of the SavedModel's
        # object graph (and a wrapped dict, not the dict that was read).
        object.__setattr__(self, "_model_card", card)

    # Special token ids are read lazily: when a `.keras` archive is loaded the
    # tokenizer's vocabulary asset arrives after the constructor has run.
    @property
    def start_token_id(self):
        return int(self.tokenizer.start_token_id)

    @property
    def end_token_id(self):
        return int(self.tokenizer.end_token_id)

    @property
    def pad_token_id(self):
        return int(self.tokenizer.pad_token_id)

    # ------------------------------------------------------------------ graph
    @property
    def hidden_dim(self):
        return int(self.backbone.hidden_dim)

    @property
    def base_output_dim(self):
        """Size of the sentence vectors before the post-processing layer."""
        return int(self.projection_dim or self.backbone.hidden_dim)

    @property
    def output_dim(self):
        """Size of the sentence vectors."""
        if self.postprocess is not None:
            return int(self.postprocess.output_dim)
        return self.base_output_dim

    def call(self, inputs, training=False, pooling=None):
        self._check_postprocess_pooling(self._resolve_pooling(pooling))
        states = self.hidden_states(inputs, training=training)
        return self.head(self.pool(states, inputs["padding_mask"], pooling))
