"""Writers of data folders in the layouts users have: STS, SICK, SentEval, multitask, Hugging Face."""

import json

import numpy as np

from tests.helpers.corpora import MULTITASK_SENTENCES, SICK_TEST, SICK_TRIAL


def write_stsb(folder, splits):
    """STS-B's SentEval files (`sts-{split}.csv`) in `folder`, one per `{split: pairs}`."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, pairs in splits.items():
        lines = [
            f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score:.3f}\t{s1}\t{s2}"
            for i, (s1, s2, score) in enumerate(pairs)
        ]
        (folder / f"sts-{split}.csv").write_text(
            "\n".join(lines) + "\n", encoding="utf-8"
        )


def write_sts_year(folder, subsets, prefix="STS"):
    """An STS12-16 year folder: input and gold-standard files per `{name: pairs}` subset."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "00-readme.txt").write_text("readme\n", encoding="utf-8")
    for name, pairs in subsets.items():
        inputs = "".join(f"{s1}\t{s2}\n" for s1, s2, _ in pairs)
        golds = "".join("\n" if g is None else f"{g}\n" for _, _, g in pairs)
        (folder / f"{prefix}.input.{name}.txt").write_text(inputs, encoding="utf-8")
        (folder / f"{prefix}.gs.{name}.txt").write_text(golds, encoding="utf-8")


def write_sick(folder):
    """SICK's three files (test, trial, train) from `SICK_TEST` and `SICK_TRIAL`."""
    folder.mkdir(parents=True, exist_ok=True)
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    for name, pairs in (
        ("SICK_test_annotated.txt", SICK_TEST),
        ("SICK_trial.txt", SICK_TRIAL),
        ("SICK_train.txt", SICK_TRIAL[:2] + SICK_TEST[:2]),
    ):
        body = "".join(
            f"{i + 1}\t{a}\t{b}\t{s}\tNEUTRAL\n" for i, (a, b, s) in enumerate(pairs)
        )
        (folder / name).write_text(header + body, encoding="utf-8")


TRANSFER_WORDS = "good bad fine awful great poor nice dull warm cold happy sad bright dark".split()


def transfer_sentence(i, polarity):
    """A deterministic sentence whose words lean to one polarity."""
    rng = np.random.default_rng(i)
    pool = TRANSFER_WORDS[0::2] if polarity else TRANSFER_WORDS[1::2]
    words = ([pool[j] for j in rng.integers(0, len(pool), 3)]
             + [TRANSFER_WORDS[j] for j in rng.integers(0, len(TRANSFER_WORDS), 2)])
    return " ".join(words) + f" {i}"


def write_downstream(root, n=40):
    """All seven tasks in SentEval's layout, with its quirks: Latin-1 bytes, empty lines, a BOM."""
    from keras_sentemb.evaluation import transfer_readers as readers

    for task, (folder, pos, neg) in readers.BINARY_TASKS.items():
        (root / folder).mkdir(parents=True)
        lines = [transfer_sentence(i, 1) for i in range(n)]
        body = "\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n"
        (root / folder / pos).write_bytes(body.encode("latin-1") + b"caf\xe9  cr\xe8me\n")
        negatives = (transfer_sentence(i, 0) for i in range(n, 2 * n))
        (root / folder / neg).write_text("\r\n".join(negatives) + "\r\n")
    sst = root / "SST" / "binary"
    sst.mkdir(parents=True)
    for k, split in enumerate(("train", "dev", "test")):
        rows = [f"{transfer_sentence(1000 * k + i, i % 2)} \t{i % 2}" for i in range(n)]
        (sst / f"sentiment-{split}").write_text("\n".join(rows) + "\n\n")
    trec = root / "TREC"
    trec.mkdir()
    for split, count in (("train_5500", 3 * n), ("TREC_10", n)):
        rows = [f"{readers.TREC_CLASSES[i % 3 * 2]}:x {transfer_sentence(i, i % 2)} "
                f"{'what who where'.split()[i % 3]} ?" for i in range(count)]
        (trec / f"{split}.label").write_bytes("\n".join(rows).encode() + b"\nHUM:ind Who met his sister\xf0city ?\n")
    mrpc = root / "MRPC"
    mrpc.mkdir()
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    for split in ("train", "test"):
        rows = [f"{i % 2}\t{i}\t{i + 1}\t{transfer_sentence(i, 1)}\t"
                f"{transfer_sentence(i + (0 if i % 2 else 7), 1)}" for i in range(n)]
        (mrpc / f"msr_paraphrase_{split}.txt").write_text(header + "\n".join(rows) + "\n", encoding="utf-8")
    return root


def write_multitask_folder(root):
    """A tiny multitask folder with malformed rows in every file type."""
    root.mkdir(parents=True, exist_ok=True)
    sst = ["\tid\tsentence\tsentiment"]
    for i in range(24):
        sst.append(f"{i}\ts{i}\t {MULTITASK_SENTENCES[i % 8]} .\t{i % 5}")
    sst_train = sst + ["99\tbad\t the cat .\t", "100\tbad2\tonly three fields"]
    (root / "ids-sst-train.csv").write_text("\n".join(sst_train) + "\n")
    (root / "ids-sst-dev.csv").write_text("\n".join(sst[:13]) + "\n")
    pairs = ["\tid\tsentence1\tsentence2\tsimilarity"]
    for i in range(24):
        a, b = MULTITASK_SENTENCES[i % 8], MULTITASK_SENTENCES[(i + 1) % 8]
        pairs.append(f"{i}\tp{i}\t{a}\t{b}\t{(i % 6) * 1.0}")
    (root / "sts-train.csv").write_text("\n".join(pairs + ["7\tx\ta\tb\tnot-a-number"]) + "\n")
    (root / "sts-dev.csv").write_text("\n".join(pairs[:13]) + "\n")
    quora = ["\tid\tsentence1\tsentence2\tis_duplicate"]
    for i in range(60):
        a, b = MULTITASK_SENTENCES[i % 8], MULTITASK_SENTENCES[(i * 3) % 8]
        quora.append(f"{i}\tq{i}\t{a} ?\t{b} ?\t{float(i % 2)}")
    quora.append('61\tq61\t"a man ?\t""the dog ?"\t')  # quotes as upstream, no label
    quora.append("62\tq62\tthe cat\thello\t")
    (root / "quora-dev.csv").write_text("\n".join(quora) + "\n")
    return root


def hf_weights(backbone, ln=("weight", "bias")):
    """The backbone's weights under Hugging Face BERT names, HF layouts."""
    w, b = ln
    out = {
        "embeddings.word_embeddings.weight": backbone.get_layer("token_embedding").embeddings,
        "embeddings.position_embeddings.weight":
            backbone.get_layer("position_embedding").position_embeddings,
        "embeddings.token_type_embeddings.weight": backbone.get_layer("segment_embedding").embeddings,
        f"embeddings.LayerNorm.{w}": backbone.get_layer("embeddings_layer_norm").gamma,
        f"embeddings.LayerNorm.{b}": backbone.get_layer("embeddings_layer_norm").beta,
        "pooler.dense.weight": np.transpose(backbone.get_layer("pooled_dense").kernel),
        "pooler.dense.bias": backbone.get_layer("pooled_dense").bias,
    }
    for i in range(backbone.num_layers):
        block = backbone.get_layer(f"transformer_layer_{i}")
        attn, p = block._self_attention_layer, f"encoder.layer.{i}."
        for name, dense in (("self.query", attn.query_dense), ("self.key", attn.key_dense),
                            ("self.value", attn.value_dense), ("output.dense", attn.output_dense)):
            kernel = np.asarray(dense.kernel)
            rows = kernel.shape[0] * (kernel.shape[1] if name == "output.dense" else 1)
            out[f"{p}attention.{name}.weight"] = np.transpose(np.reshape(kernel, (rows, -1)))
            out[f"{p}attention.{name}.bias"] = np.reshape(np.asarray(dense.bias), (-1,))
        out[f"{p}attention.output.LayerNorm.{w}"] = block._self_attention_layer_norm.gamma
        out[f"{p}attention.output.LayerNorm.{b}"] = block._self_attention_layer_norm.beta
        out[f"{p}intermediate.dense.weight"] = np.transpose(block._feedforward_intermediate_dense.kernel)
        out[f"{p}intermediate.dense.bias"] = block._feedforward_intermediate_dense.bias
        out[f"{p}output.dense.weight"] = np.transpose(block._feedforward_output_dense.kernel)
        out[f"{p}output.dense.bias"] = block._feedforward_output_dense.bias
        out[f"{p}output.LayerNorm.{w}"] = block._feedforward_layer_norm.gamma
        out[f"{p}output.LayerNorm.{b}"] = block._feedforward_layer_norm.beta
    return {k: np.ascontiguousarray(np.asarray(v)) for k, v in out.items()}


def write_hf_bert(encoder, folder, prefix="", pooler=True, mlm_head=False, dtype="float32",
                  ln=("weight", "bias")):
    """A Hugging Face BERT folder (safetensors, config, vocab) of a tiny BERT encoder's weights."""
    from safetensors.numpy import save_file

    from keras_sentemb.export.hf_weights import hidden_act
    from tests.conftest import TINY_VOCAB

    folder.mkdir(parents=True)
    backbone = encoder.backbone
    weights = hf_weights(backbone, ln)
    if not pooler:
        weights = {k: v for k, v in weights.items() if not k.startswith("pooler.")}
    weights = {prefix + k: v.astype(dtype) for k, v in weights.items()}
    if mlm_head:
        hidden, vocab = backbone.hidden_dim, backbone.vocabulary_size
        weights.update({
            "cls.predictions.bias": np.zeros(vocab, dtype),
            "cls.predictions.transform.dense.weight": np.eye(hidden, dtype=dtype),
            "cls.predictions.transform.dense.bias": np.zeros(hidden, dtype),
            "cls.predictions.transform.LayerNorm.weight": np.ones(hidden, dtype),
            "cls.predictions.transform.LayerNorm.bias": np.zeros(hidden, dtype),
        })
    save_file(weights, str(folder / "model.safetensors"))
    config = {
        "model_type": "bert", "architectures": ["BertForMaskedLM" if mlm_head else "BertModel"],
        "vocab_size": backbone.vocabulary_size, "hidden_size": backbone.hidden_dim,
        "num_hidden_layers": backbone.num_layers, "num_attention_heads": backbone.num_heads,
        "intermediate_size": backbone.intermediate_dim,
        "max_position_embeddings": backbone.max_sequence_length, "type_vocab_size": 2,
        "hidden_act": hidden_act(backbone), "layer_norm_eps": 1e-12,
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return folder


def write_beir_from_pairs(folder, pairs, min_score=4.0):
    """A BEIR folder from STS pairs: each pair scoring `min_score` or more is a query
    (sentence 1) with one relevant document (its sentence 2); every sentence 2 is a document."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    documents, queries, qrels = {}, {}, []
    for i, (s1, s2, score) in enumerate(pairs):
        documents.setdefault(s2, f"d{i}")
        if float(score) >= min_score and s1 not in queries.values():
            queries[f"q{i}"] = s1
            qrels.append((f"q{i}", documents[s2]))
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": key, "title": "", "text": text}) + "\n"
                for text, key in documents.items()), encoding="utf-8")
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": key, "text": text}) + "\n" for key, text in queries.items()),
        encoding="utf-8")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t1" for q, d in qrels]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder
