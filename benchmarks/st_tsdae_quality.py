"""sentence-transformers' TSDAE from an un-tuned start: the reference row of the methods table.

Run in an interpreter with torch / sentence-transformers / nltk (never beside TensorFlow; they
are not dependencies of keras_sentemb):

    python benchmarks/st_tsdae_quality.py --model runs/untuned-minilm --corpus data/wiki.txt \
        --steps 250 --batch-size 64 --max-length 32 --lr 3e-5 --eval-every 50

What it trains, as sentence-transformers' TSDAE example does, at the table's budget:
`DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True)` on (noisy, original) pairs, the noise
`DenoisingAutoEncoderDataset.delete` (60 % of NLTK's words deleted, at least one kept; NLTK's
word tokenizer without its sentence splitter, which needs a download), `torch.optim.AdamW` at a
constant rate with weight decay 0, the gradient norm clipped at 1.0 (`fit`'s default), dropout
on, the start's own pooling, float32 (the start stores float16 weights, and a decoder loaded in
them diverges to NaN at the second step on a CPU). Batches are drawn without replacement from the shuffled corpus
(seeded). STS-B dev (Spearman of cosines, x 100) at step 0 and every `--eval-every` steps; the
best dev checkpoint (the start included) is kept and scored once on STS-B test. Prints one JSON
line.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import os
import random
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STSB = os.path.join(REPO, "keras_sentemb", "resources", "STS", "STSBenchmark")


def read_stsb(split):
    rows = []
    with open(os.path.join(STSB, f"sts-{split}.csv"), encoding="utf-8") as f:
        for parts in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            rows.append((parts[5], parts[6], float(parts[4])))
    return rows


def spearman(model, rows):
    import numpy as np
    from scipy.stats import spearmanr

    a = model.encode([r[0] for r in rows], batch_size=128, convert_to_numpy=True)
    b = model.encode([r[1] for r in rows], batch_size=128, convert_to_numpy=True)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return round(100 * spearmanr(cos, [r[2] for r in rows]).correlation, 2)


def delete(text, rng, tokenizer, detokenizer, ratio=0.6):
    """`DenoisingAutoEncoderDataset.delete` with NLTK's word tokenizer, drawn from `rng`."""
    import numpy as np

    words = tokenizer.tokenize(text)
    n = len(words)
    if n == 0:
        return text
    keep = rng.random(n) > ratio
    if keep.sum() == 0:
        keep[rng.integers(n)] = True
    return detokenizer.detokenize(list(np.array(words)[keep]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args(argv)

    import numpy as np
    import torch
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.treebank import TreebankWordDetokenizer
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import DenoisingAutoEncoderLoss

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    with open(args.corpus, encoding="utf-8") as f:
        corpus = [line.strip() for line in f if line.strip()]
    random.Random(args.seed).shuffle(corpus)
    dev, test = read_stsb("dev"), read_stsb("test")

    model = SentenceTransformer(args.model, device="cpu")
    model.max_seq_length = args.max_length
    # The start's weights are stored in float16, and its decoder loads in the stored dtype:
    # trained so on a CPU the loss is NaN from the second step. Train in float32.
    loss = DenoisingAutoEncoderLoss(model, tie_encoder_decoder=True).float()
    optimizer = torch.optim.AdamW(loss.parameters(), lr=args.lr, weight_decay=0.0)
    tokenizer, detokenizer = NLTKWordTokenizer(), TreebankWordDetokenizer()

    history = [(0, spearman(model, dev))]
    best = (history[0][1], 0, copy.deepcopy(model.state_dict()))
    t0 = time.time()
    for step in range(1, args.steps + 1):
        loss.train()
        rows = corpus[(step - 1) * args.batch_size: step * args.batch_size]
        noisy = [delete(s, rng, tokenizer, detokenizer) for s in rows]
        features = [model.preprocess(noisy), model.preprocess(rows)]
        value = loss(features, labels=None)
        optimizer.zero_grad()
        value.backward()
        torch.nn.utils.clip_grad_norm_(loss.parameters(), 1.0)
        optimizer.step()
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            score = spearman(model, dev)
            history.append((step, score))
            if score > best[0]:
                best = (score, step, copy.deepcopy(model.state_dict()))
    seconds = time.time() - t0
    model.load_state_dict(best[2])
    model.eval()
    print(json.dumps({
        "impl": "sentence-transformers", "method": "tsdae", "steps": args.steps,
        "batch_size": args.batch_size, "max_length": args.max_length, "learning_rate": args.lr,
        "kept_step": best[1], "dev": best[0], "test": spearman(model, test), "history": history,
        "train_seconds": round(seconds, 1), "threads": args.threads,
        "sentence_transformers": __import__("sentence_transformers").__version__}))


if __name__ == "__main__":
    main()
