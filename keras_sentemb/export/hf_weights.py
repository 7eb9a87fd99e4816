"""A keras-hub BERT / RoBERTa backbone as a Hugging Face `config.json` and state dict.

The inverse of keras-hub's converters (`keras_hub.src.utils.transformers.
convert_bert` / `convert_roberta`): Dense kernels `[in, out]` become PyTorch
`Linear` weights `[out, in]`, the attention kernels `[hidden, heads,
head_dim]` are flattened first, and RoBERTa's two reserved position rows
(keras-hub drops them on load) are put back in front as zeros, since
Hugging Face numbers real positions from `padding_idx + 1 = 2`. BERT's
pooler is written (keras-hub BERT backbones always have one); RoBERTa
backbones have none, as most RoBERTa checkpoints.
"""

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from keras_sentemb import compat
from keras_sentemb.models.backbone_adapter import BackboneAdapter
from keras_sentemb.kernels.fused_gelu import gelu_form

# RoBERTa's reserved position rows (`padding_idx + 1`).
ROBERTA_POSITION_OFFSET = 2
# `--dtype` -> numpy dtype of the written weights. bfloat16 uses ml_dtypes
# (a TensorFlow dependency), which safetensors writes as BF16.
WEIGHT_DTYPES = ("float32", "float16", "bfloat16")


def _np_dtype(dtype):
    if dtype not in WEIGHT_DTYPES:
        raise ValueError(f"`dtype` must be one of {WEIGHT_DTYPES}. Received: dtype={dtype!r}.")
    if dtype == "bfloat16":

        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def _value(variable):
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable, np.float32)


def _linear(kernel, bias):
    """A Keras Dense (or attention) kernel/bias as a PyTorch Linear's weight/bias."""
    kernel, bias = _value(kernel), _value(bias)
    if kernel.ndim == 3 and bias.ndim == 2:  # query/key/value: [hidden, heads, head_dim]
        kernel = kernel.reshape(kernel.shape[0], -1)
    elif kernel.ndim == 3:  # attention output: [heads, head_dim, hidden]
        kernel = kernel.reshape(-1, kernel.shape[-1])
    return np.ascontiguousarray(kernel.T), bias.reshape(-1)


def hidden_act(backbone):
    """The Hugging Face `hidden_act` of the backbone's feed-forward GELU.

    keras-hub builds BERT with GELU's tanh approximation (Hugging Face's
    `gelu_new`) and RoBERTa with the exact GELU (`gelu`); an encoder loaded
    from a Hugging Face folder computes the form its `hidden_act` declares
    (`SentenceEncoder(feedforward_gelu=...)`). The folder states what the
    encoder computes, so that it reproduces `encode()`.
    """
    form = gelu_form(backbone.transformer_layers)
    if form is None:
        activation = compat.feedforward_intermediate(backbone.transformer_layers[0]).activation
        raise ValueError(
            f"The backbone's feed-forward activation ({activation!r}) has no Hugging Face "
            "equivalent here; only GELU (exact or tanh approximation, the same in every "
            "layer) is exported."
        )
    return {"tanh": "gelu_new", "exact": "gelu"}[form]


def hf_config(backbone, dtype="float32"):
    """`config.json` of a `BertModel` / `RobertaModel` with the backbone's sizes.

    Args:
        backbone: a keras-hub BERT or RoBERTa backbone.
        dtype: str. The dtype the weights are written in (`torch_dtype`).
            Defaults to `"float32"`.

    Returns:
        dict.
    """
    family = BackboneAdapter(backbone).family
    layer = backbone.transformer_layers[0]
    config = {
        "architectures": ["BertModel" if family == "bert" else "RobertaModel"],
        "model_type": family,
        "vocab_size": int(backbone.vocabulary_size),
        "hidden_size": int(backbone.hidden_dim),
        "num_hidden_layers": int(backbone.num_layers),
        "num_attention_heads": int(backbone.num_heads),
        "intermediate_size": int(backbone.intermediate_dim),
        "hidden_act": hidden_act(backbone),
        "hidden_dropout_prob": float(backbone.dropout),
        "attention_probs_dropout_prob": float(backbone.dropout),
        "layer_norm_eps": float(layer.layer_norm_epsilon),
        "initializer_range": 0.02,
        "position_embedding_type": "absolute",
        "torch_dtype": dtype,
    }
    if family == "bert":
        config.update({
            "max_position_embeddings": int(backbone.max_sequence_length),
            "type_vocab_size": int(backbone.num_segments),
            "pad_token_id": 0,
        })
    else:
        config.update({
            "max_position_embeddings": int(backbone.max_sequence_length)
            + ROBERTA_POSITION_OFFSET,
            "type_vocab_size": 1,
            "pad_token_id": 1,
            "bos_token_id": 0,
            "eos_token_id": 2,
        })
    return config


def hf_state_dict(backbone, dtype="float32"):
    """The backbone's weights under Hugging Face names and layouts.

    Args:
        backbone: a keras-hub BERT or RoBERTa backbone (any dtype policy:
            the variables are read as float32 first).
        dtype: str. `"float32"`, `"float16"` or `"bfloat16"`. Defaults to
            `"float32"`.

    Returns:
        dict of contiguous numpy arrays, keys as `BertModel` /
        `RobertaModel.state_dict()` names them (no model prefix).
    """
    target = _np_dtype(dtype)
    adapter = BackboneAdapter(backbone)
    hidden = int(backbone.hidden_dim)
    out = {"embeddings.word_embeddings.weight": _value(adapter.token_embedding.embeddings)}
    positions = _value(adapter.position_embedding.position_embeddings)
    if adapter.family == "roberta":
        pad = np.zeros((ROBERTA_POSITION_OFFSET, hidden), np.float32)
        positions = np.concatenate([pad, positions])
        out["embeddings.token_type_embeddings.weight"] = np.zeros((1, hidden), np.float32)
    else:
        out["embeddings.token_type_embeddings.weight"] = _value(
            adapter.segment_embedding.embeddings
        )
    out["embeddings.position_embeddings.weight"] = positions
    out["embeddings.LayerNorm.weight"] = _value(adapter.layer_norm.gamma)
    out["embeddings.LayerNorm.bias"] = _value(adapter.layer_norm.beta)
    for i, block in enumerate(adapter.transformer_layers):
        parts = compat.transformer_parts(block)
        attn, p = parts.attention, f"encoder.layer.{i}."
        for name, dense in (
            ("attention.self.query", attn.query_dense),
            ("attention.self.key", attn.key_dense),
            ("attention.self.value", attn.value_dense),
            ("attention.output.dense", attn.output_dense),
            ("intermediate.dense", parts.intermediate),
            ("output.dense", parts.output),
        ):
            out[p + name + ".weight"], out[p + name + ".bias"] = _linear(dense.kernel, dense.bias)
        for name, norm in (
            ("attention.output.LayerNorm", parts.attention_norm),
            ("output.LayerNorm", parts.output_norm),
        ):
            out[p + name + ".weight"] = _value(norm.gamma)
            out[p + name + ".bias"] = _value(norm.beta)
    if adapter.pooler is not None:
        out["pooler.dense.weight"], out["pooler.dense.bias"] = _linear(
            adapter.pooler.kernel, adapter.pooler.bias
        )
    return {k: np.ascontiguousarray(v.astype(target)) for k, v in out.items()}


def save_safetensors(tensors, path):
    """Write `tensors` (name -> numpy array) as a safetensors file with `format: pt`.

    The metadata marks the file as PyTorch's layout, as `save_pretrained`
    writes it (transformers refuses files without it).
    """
    save_file(tensors, str(path), metadata={"format": "pt"})
