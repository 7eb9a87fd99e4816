"""The PyTorch side of TSDAE's reference check (run by the test suite's PyTorch worker).

Never imported by the package: the test suite loads this file in a process
of its own, beside sentence-transformers, with no TensorFlow. `tsdae_loss`
builds sentence-transformers' `DenoisingAutoEncoderLoss` (tied decoder)
over an exported encoder folder, gives its decoder's own weights (the
cross-attention and the LM head's transform) the values of ours, and
computes the loss on the token ids it is given, dropout off.
"""


def tsdae_loss(request):
    """`{"loss": float}`: sentence-transformers' TSDAE loss on the request's batch."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss

    arrays = dict(np.load(request["inputs"]))
    model = SentenceTransformer(request["folder"], device="cpu")
    loss = DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True)

    def put(linear_or_norm, weight, bias):
        with torch.no_grad():
            linear_or_norm.weight.copy_(torch.from_numpy(weight))
            linear_or_norm.bias.copy_(torch.from_numpy(bias))

    decoder = loss.decoder
    for i, layer in enumerate(decoder.base_model.encoder.layer):
        cross = layer.crossattention
        put(cross.self.value, arrays[f"cross{i}_value_kernel"].T, arrays[f"cross{i}_value_bias"])
        put(cross.output.dense, arrays[f"cross{i}_output_kernel"].T,
            arrays[f"cross{i}_output_bias"])
        put(cross.output.LayerNorm, arrays[f"cross{i}_gamma"], arrays[f"cross{i}_beta"])
    head = decoder.cls.predictions
    put(head.transform.dense, arrays["head_kernel"].T, arrays["head_bias"])
    put(head.transform.LayerNorm, arrays["head_gamma"], arrays["head_beta"])
    with torch.no_grad():
        head.bias.copy_(torch.from_numpy(arrays["head_output_bias"]))
    model.eval()
    loss.eval()

    def features(prefix):
        ids = torch.from_numpy(arrays[f"{prefix}_ids"].astype("int64"))
        return {"input_ids": ids,
                "attention_mask": torch.from_numpy(arrays[f"{prefix}_mask"].astype("int64")),
                "token_type_ids": torch.zeros_like(ids)}

    with torch.no_grad():
        value = loss([features("noisy"), features("target")], labels=None)
    return {"loss": float(value)}
