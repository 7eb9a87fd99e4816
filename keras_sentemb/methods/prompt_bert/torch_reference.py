"""The PyTorch side of PromptBERT's reference check (run by the test suite's PyTorch worker).

Never imported by the package: the test suite loads this file in a process
of its own, with transformers and no TensorFlow. `promptbert_loss` follows
the official unsupervised training step (kongds/Prompt-BERT
`prompt_bert/models.py`, `cl_forward`, and `train.py`'s `prepare_features`)
over transformers' BERT loaded from an exported folder: each sentence framed
as `bs + s + es` in the first template and `bs2 + s + es2` in the second,
the vectors at `input_ids == mask_token_id`, `get_delta`'s template-alone
states (positions after the prefix shifted by 0..49) subtracted at
`attention_mask.sum(-1) - template_len`, the tanh MLP, then the
cosine-similarity cross-entropy. Dropout is off (`eval()`), so the two
sides see the same network.
"""


def promptbert_loss(request):
    """`{"loss", "z1", "z2"}`: the official PromptBERT loss on the request's sentences, and the
    vectors of its two views (after the MLP)."""
    import numpy as np
    import torch
    from transformers import AutoModel

    arrays = dict(np.load(request["inputs"]))
    cls_id, sep_id, pad_id, mask_id = (int(x) for x in arrays["special"])
    bodies = [[int(t) for t in row if t >= 0] for row in arrays["bodies"]]
    bs, es = [cls_id, *arrays["prefix"].tolist()], [*arrays["suffix"].tolist(), sep_id]
    bs2, es2 = [cls_id, *arrays["prefix2"].tolist()], [*arrays["suffix2"].tolist(), sep_id]
    model = AutoModel.from_pretrained(request["folder"]).eval()

    def get_delta(template, prefix_length, length=50):
        d_input_ids = torch.tensor([template]).repeat(length, 1)
        d_position_ids = torch.arange(d_input_ids.shape[1]).unsqueeze(0).repeat(length, 1)
        d_position_ids[:, prefix_length + 1:] += torch.arange(length).unsqueeze(-1)
        last_hidden = model(input_ids=d_input_ids, position_ids=d_position_ids).last_hidden_state
        return last_hidden[d_input_ids == mask_id], d_input_ids.shape[1]

    with torch.no_grad():
        # `get_delta` shifts the positions after the first template's prefix (`len(cls.bs)`) in
        # both templates.
        delta, template_len = get_delta(bs + es, len(bs) - 1)
        delta1, template_len1 = get_delta(bs2 + es2, len(bs) - 1)
        rows = [bs + s + es for s in bodies] + [bs2 + s + es2 for s in bodies]
        ml = max(map(len, rows))
        input_ids = torch.tensor([r + [pad_id] * (ml - len(r)) for r in rows])
        attention_mask = torch.tensor([[1] * len(r) + [0] * (ml - len(r)) for r in rows])
        batch_size = len(bodies)
        # (sent0s, then sent1s) -> [batch, 2, len], as the official collator lays them out.
        input_ids = input_ids.view(2, batch_size, ml).transpose(0, 1).reshape(-1, ml)
        attention_mask = attention_mask.view(2, batch_size, ml).transpose(0, 1).reshape(-1, ml)
        last_hidden = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        pooler_output = last_hidden[input_ids == mask_id].view(batch_size, 2, -1)
        attention_mask = attention_mask.view(batch_size, 2, -1)
        blen = attention_mask.sum(-1) - template_len
        pooler_output[:, 0, :] -= delta[blen[:, 0]]
        blen = attention_mask.sum(-1) - template_len1
        pooler_output[:, 1, :] -= delta1[blen[:, 1]]
        dense = torch.nn.Linear(pooler_output.shape[-1], pooler_output.shape[-1])
        dense.weight.copy_(torch.from_numpy(arrays["mlp_kernel"].T))
        dense.bias.copy_(torch.from_numpy(arrays["mlp_bias"]))
        pooler_output = torch.tanh(dense(pooler_output))
        z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
        cos_sim = torch.nn.functional.cosine_similarity(z1.unsqueeze(1), z2.unsqueeze(0), dim=-1)
        cos_sim = cos_sim / float(request["temperature"])
        loss = torch.nn.functional.cross_entropy(cos_sim, torch.arange(batch_size))
    return {"loss": float(loss), "z1": z1.tolist(), "z2": z2.tolist()}
