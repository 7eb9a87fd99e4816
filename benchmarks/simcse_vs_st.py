"""Unsupervised SimCSE, keras_sentemb and sentence-transformers side by side, same protocol.

    ST_PYTHON=$(which python) python benchmarks/simcse_vs_st.py --seeds 0 --max-grad-norms 1.0,0

From the same start (default: untuned-minilm) on the same corpus (wiki100k),
both toolkits train `--steps` steps at batch 64, max length 32, learning rate
3e-5 decaying linearly to 0 without warm-up, weight decay 0, mean pooling (the
start's own) and temperature 0.05 (ST: MNRL scale 20), dropout as the only
augmentation, for each gradient-clipping setting in `--max-grad-norms` (1.0:
what `SentenceTransformerTrainer` and `fit_simcse` do by default; 0: none)
and each seed.
No dev selection: the model after the last step is scored on STS-B dev and
test (Spearman x 100, cosine, our evaluation for both; ST's folder is read
with `SentenceEncoder.from_preset`). ST runs in `ST_PYTHON`
(benchmarks/st_simcse_train.py). One JSON line per run to `--out`, the
markdown table last.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _common import cpu_info, run_st  # noqa: E402
from methods_table import START, WIKI  # noqa: E402


def ours(args, seed, max_grad_norm):
    from keras_sentemb import fit_simcse

    return fit_simcse(args.corpus, model=args.start, steps=args.steps,
                      batch_size=args.batch_size, learning_rate=args.lr,
                      max_length=args.max_length, dev=None, seed=seed, verbose=0,
                      max_grad_norm=max_grad_norm if max_grad_norm > 0 else None)


def sentence_transformers(args, seed, max_grad_norm, folder):
    from keras_sentemb.models import SentenceEncoder

    out = run_st("st_simcse_train.py", [
        "--start", args.start, "--corpus", args.corpus, "--steps", args.steps,
        "--batch-size", args.batch_size, "--max-length", args.max_length, "--lr", args.lr,
        "--max-grad-norm", max_grad_norm, "--seed", seed, "--output-dir", folder])
    if out is None:
        return None
    return SentenceEncoder.from_preset(out["saved"][-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--start", default=str(START))
    p.add_argument("--corpus", default=str(WIKI))
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--seeds", default="0")
    p.add_argument("--max-grad-norms", default="1.0,0")
    p.add_argument("--sides", default="ours,st")
    p.add_argument("--out", default="runs/simcse_vs_st.jsonl")
    args = p.parse_args(argv)

    from keras_sentemb.evaluation.readers import load_stsb_pairs
    from keras_sentemb.pipelines.callbacks import sts_spearman

    dev, test = load_stsb_pairs("stsb", "dev"), load_stsb_pairs("stsb", "test")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for side in [s.strip() for s in args.sides.split(",") if s.strip()]:
        for max_grad_norm in [float(x) for x in args.max_grad_norms.split(",")]:
            for seed in [int(x) for x in args.seeds.split(",")]:
                began = time.perf_counter()
                with tempfile.TemporaryDirectory() as folder:
                    encoder = (ours(args, seed, max_grad_norm) if side == "ours"
                               else sentence_transformers(args, seed, max_grad_norm, folder))
                    if encoder is None:
                        continue
                    row = {"side": side, "max_grad_norm": max_grad_norm, "seed": seed,
                           "steps": args.steps, "lr": args.lr, "batch_size": args.batch_size,
                           "max_length": args.max_length, "pooling": encoder.pooling,
                           "dev": sts_spearman(encoder, dev), "test": sts_spearman(encoder, test),
                           "minutes": round((time.perf_counter() - began) / 60, 1),
                           **cpu_info()}
                rows.append(row)
                with open(out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    print("| toolkit | gradient clipping | seed | STS-B dev | STS-B test |\n|---|---|---|---|---|")
    for r in rows:
        clip = f"global norm {r['max_grad_norm']:g}" if r["max_grad_norm"] > 0 else "none"
        name = "keras_sentemb" if r["side"] == "ours" else "sentence-transformers"
        print(f"| {name} | {clip} | {r['seed']} | {r['dev']:.2f} | {r['test']:.2f} |")


if __name__ == "__main__":
    main()
