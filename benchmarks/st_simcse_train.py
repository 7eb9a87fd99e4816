"""sentence-transformers side of the SimCSE side-by-side: unsupervised SimCSE, saved checkpoints.

Run with a Python that has torch + sentence-transformers (never dependencies of keras_sentemb):

    python benchmarks/st_simcse_train.py --start runs/untuned-minilm \\
        --steps 250 --lr 3e-5 --output-dir runs/st-simcse

One step is what `SentenceTransformerTrainer` does with its default
optimization arguments: `MultipleNegativesRankingLoss(model, scale=20)` on
(s, s) pairs (anchors and positives encoded in two passes, each with its own
dropout), `torch.optim.AdamW` (epsilon 1e-8, weight decay `--weight-decay`,
default 0 as the trainer's, never on biases and LayerNorm weights), a linear
decay from `--lr` to 0 over `--schedule-steps` (default `--steps`) without
warm-up, and the gradient norm clipped at `--max-grad-norm` (default 1.0 as
the trainer's; 0 turns it off). Batches are consecutive slices of the corpus
shuffled with `--seed`. The model is saved (a sentence-transformers folder)
at every step in `--save-at` (default: the last). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import read_lines  # noqa: E402  (standard library only: runs in any venv)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--start", required=True, help="a sentence-transformers model folder")
    p.add_argument("--corpus", required=True)
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--schedule-steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-at", default=None, help="comma-separated steps (default: the last)")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)

    import torch
    import sentence_transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    sentences = read_lines(args.corpus, float("inf"))
    random.Random(args.seed).shuffle(sentences)
    needed = args.steps * args.batch_size
    sentences = (sentences * (needed // len(sentences) + 1))[:needed]

    model = SentenceTransformer(args.start, device=args.device)
    model.float()  # a folder stored in float16 loads as float16 otherwise; train in float32
    model.max_seq_length = args.max_length
    loss_fn = MultipleNegativesRankingLoss(model, scale=20.0)
    decay = [p_ for n, p_ in loss_fn.named_parameters()
             if p_.requires_grad and not (n.endswith("bias") or "LayerNorm" in n)]
    no_decay = [p_ for n, p_ in loss_fn.named_parameters()
                if p_.requires_grad and (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, eps=1e-8)
    horizon = args.schedule_steps or args.steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda t: max(0.0, (horizon - t) / horizon))
    save_at = ({int(s) for s in args.save_at.split(",")} if args.save_at else {args.steps})

    loss_fn.train()
    began, losses, saved = time.perf_counter(), [], []
    for step in range(1, args.steps + 1):
        batch = sentences[(step - 1) * args.batch_size: step * args.batch_size]
        features = [model.preprocess(batch), model.preprocess(batch)]
        features = [{k: v.to(args.device) if hasattr(v, "to") else v for k, v in f.items()}
                    for f in features]
        loss = loss_fn(features, None)
        loss.backward()
        if args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(loss_fn.parameters(), args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if step in save_at:
            folder = os.path.join(args.output_dir, f"step-{step}")
            model.save(folder)
            saved.append(folder)

    print(json.dumps({
        "impl": "sentence-transformers", "method": "simcse", "steps": args.steps,
        "schedule_steps": horizon, "batch_size": args.batch_size, "max_length": args.max_length,
        "lr": args.lr, "weight_decay": args.weight_decay, "max_grad_norm": args.max_grad_norm,
        "seed": args.seed, "saved": saved, "last_loss": round(losses[-1], 5),
        "seconds": round(time.perf_counter() - began, 1), "device": args.device,
        "torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__,
    }))


if __name__ == "__main__":
    main()
