"""Each unsupervised method, trained from each start, on search (Quora) and STS-B.

    python benchmarks/quora_beir.py --output runs/quora-beir
    python benchmarks/retrieval_methods.py --data runs/quora-beir \\
        --starts default,runs/untuned-minilm --output runs/retrieval_methods.jsonl

Every method of `methods_table.py` trains from each start at that table's
budget (250 steps on wiki100k, batch 64 / max length 32; CT K = 7: batch 16 /
max length 64) with the setting that table chose on STS-B dev from the
un-tuned start (`CHOSEN`), the checkpoint kept on STS-B dev (every 50 steps,
the start a candidate). Nothing here is chosen on Quora or on a test set. Each
kept model is then scored once on STS-B test and on the Quora test queries
(nDCG@10, MRR@10, Recall@100, exact search, the model's own pooling and
cosine). One JSON line per row is appended to `--output`; rows already there
are skipped, so an interrupted run continues where it stopped. The markdown
table is printed last.
"""

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import methods_table  # noqa: E402
from _common import cpu_info  # noqa: E402

# The learning rate (and variant) methods_table.py chose on STS-B dev from untuned-minilm.
CHOSEN = {
    "ct_k7": (1e-5, None),
    "ct_in_batch": (1e-4, "dropout"),
    "simcse": (5e-5, None),
    "consert": (3e-5, None),
    "sg_opt": (5e-5, None),
}
RETRIEVAL = ("ndcg@10", "mrr@10", "recall@100")


def done_rows(path):
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return {(r["start"], r["method"]): r for r in rows}


def start_name(start):
    return Path(start).name if "/" in start else start


def markdown(rows):
    lines = ["| start | method | kept step | STS-B dev | STS-B test | Quora nDCG@10 | "
             "MRR@10 | Recall@100 |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        name = "no training" if r["method"] == "start" else methods_table.NAMES[r["method"]]
        lines.append(
            f"| {r['start']} | {name} | {r.get('kept_step', '')} | {r['sts_dev']:.2f} | "
            f"{r['sts_test']:.2f} | {r['ndcg@10']:.2f} | {r['mrr@10']:.2f} | "
            f"{r['recall@100']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="BEIR folder (quora_beir.py)")
    p.add_argument("--split", default="test")
    p.add_argument("--starts", default=f"default,{methods_table.START}")
    p.add_argument("--methods", default=",".join(CHOSEN))
    p.add_argument("--corpus", default=str(methods_table.WIKI))
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default="runs/retrieval_methods.jsonl")
    p.add_argument("--smoke", action="store_true",
                   help="4 steps on 500 sentences, 100 STS pairs: a pipeline check")
    args = p.parse_args(argv)

    import keras_sentemb
    from keras_sentemb import evaluate_retrieval
    from keras_sentemb.data.corpus import load_corpus
    from keras_sentemb.evaluation.beir import load_beir
    from keras_sentemb.evaluation.readers import load_stsb_pairs
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.pipelines.callbacks import sts_spearman

    corpus = load_corpus(args.corpus)
    dev, test = load_stsb_pairs("stsb", "dev"), load_stsb_pairs("stsb", "test")
    if args.smoke:
        args.steps, args.eval_every, args.batch_size = 4, 2, 16
        corpus, dev, test = corpus[:500], dev[:100], test[:100]
    beir = load_beir(args.data, split=args.split)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = done_rows(out)
    table = []
    for start in [s.strip() for s in args.starts.split(",") if s.strip()]:
        for method in ["start"] + [m.strip() for m in args.methods.split(",") if m.strip()]:
            key = (start_name(start), method)
            if key in done:
                table.append(done[key])
                continue
            began = time.perf_counter()
            row = {"start": key[0], "method": method}
            if method == "start":
                encoder = SentenceEncoder.from_preset(start)
            else:
                learning_rate, variant = CHOSEN[method]
                options = methods_table.VARIANTS[method][variant] if variant else None
                encoder = methods_table.fit(method, corpus, start, args, learning_rate, dev,
                                            options)
                selection = encoder.training_report.selection
                batch_size, max_length = methods_table.settings(method, args)
                row.update(learning_rate=learning_rate, variant=variant,
                           kept_step=selection["kept_step"], batch_size=batch_size,
                           max_length=max_length, steps=args.steps)
            row.update(pooling=encoder.pooling, sts_dev=sts_spearman(encoder, dev),
                       sts_test=sts_spearman(encoder, test))
            result = evaluate_retrieval(encoder, beir, show_progress=False)
            row.update({m: result[m] for m in RETRIEVAL}, split=args.split,
                       minutes=round((time.perf_counter() - began) / 60, 1), smoke=args.smoke,
                       keras_sentemb=keras_sentemb.__version__, **cpu_info())
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
            table.append(row)
    print(markdown(table))


if __name__ == "__main__":
    main()
