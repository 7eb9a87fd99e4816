"""Quora duplicate questions (quora-dev.csv) as a BEIR retrieval set, split into dev and test.

    python benchmarks/quora_beir.py --output datasets/quora-beir [--dev-fraction 0.3] [--seed 0]
    python benchmarks/quora_beir.py --output datasets/quora-beir-train --train-fraction 0.2
    python benchmarks/quora_beir.py --output datasets/quora-dev-small --small-dev 300 [--distractors 2000]

The CS224N `quora-dev.csv` holds labelled question pairs. Every distinct
question (exact text after stripping) is a document of the corpus; questions
linked by an `is_duplicate = 1` pair are grouped into duplicate sets (the
connected components of those links: a duplicate of a duplicate is a
duplicate). A question with at least one duplicate is a query, and its
relevant documents are the other questions of its set; a query is never its
own answer (its query id equals its corpus id, which `evaluate_retrieval`
ignores, as BEIR does). Queries are split into dev and test by duplicate set
(all queries of one set go to the same split) with a seeded shuffle, so no
test query has a duplicate among the dev queries.

`--train-fraction F` (F < `--dev-fraction`) gives the first F of the
shuffled sets to a `train` split instead of `dev` (`qrels/train.tsv`: the
pairs to train on, e.g. supervised SimCSE with mined hard negatives); `dev`
keeps the rest of its share and `test` is the same as without it.

Writes `corpus.jsonl`, `queries.jsonl`, `qrels/dev.tsv`, `qrels/test.tsv`
and `stats.json`.

`--small-dev N` writes instead a retrieval dev set small enough to score
during training (`keras-sentemb train ... --dev-retrieval DIR`): N queries
drawn (seeded) from the dev split, their relevant questions, and
`--distractors` other questions drawn from those that no test query finds
nor asks (so selecting on it never looks at the test split). It holds
`corpus.jsonl`, `queries.jsonl`, `qrels/dev.tsv` and `stats.json`, and is
written to a temporary folder first, then renamed: a folder that exists is
refused.
"""

import argparse
import json
import os
import random
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
DEFAULT_INPUT = HERE.parent / "data" / "multitask" / "quora-dev.csv"  # docs/data.md


def duplicate_sets(pairs):
    """Connected components of the duplicate links: `{question: set id}` (union-find)."""
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in parent}


def convert(rows, dev_fraction=0.3, seed=0, train_fraction=0.0):
    """BEIR dicts from `(question1, question2, label)` rows.

    Returns:
        `(corpus, queries, qrels)`: corpus `[{"_id", "title", "text"}]`,
        queries `[{"_id", "text"}]`, qrels `{"dev": [(qid, did, 1)], "test": [...]}`
        (and `"train"` when `train_fraction` > 0).
    """
    if not 0 <= train_fraction < dev_fraction:
        raise ValueError(f"--train-fraction must be in [0, --dev-fraction); got {train_fraction}")
    ids = {}
    for a, b, _ in rows:
        for text in (a.strip(), b.strip()):
            if text and text not in ids:
                ids[text] = f"q{len(ids)}"
    links = [(ids[a.strip()], ids[b.strip()]) for a, b, label in rows
             if int(label) == 1 and a.strip() and b.strip() and a.strip() != b.strip()]
    group = duplicate_sets(links)
    members = {}
    for qid, root in group.items():
        members.setdefault(root, []).append(qid)
    roots = sorted(r for r, m in members.items() if len(m) > 1)
    random.Random(seed).shuffle(roots)
    n_dev = int(round(dev_fraction * len(roots)))
    n_train = int(round(train_fraction * len(roots)))
    split_of = {r: ("train" if i < n_train else "dev" if i < n_dev else "test")
                for i, r in enumerate(roots)}
    text_of = {v: k for k, v in ids.items()}
    qrels = {"train": [], "dev": [], "test": []} if n_train else {"dev": [], "test": []}
    query_ids = []
    for root in roots:
        for qid in sorted(members[root], key=lambda x: int(x[1:])):
            query_ids.append(qid)
            qrels[split_of[root]] += [(qid, other, 1) for other in members[root] if other != qid]
    corpus = [{"_id": qid, "title": "", "text": text} for text, qid in ids.items()]
    queries = [{"_id": qid, "text": text_of[qid]} for qid in sorted(query_ids, key=lambda x: int(x[1:]))]
    return corpus, queries, qrels


def small_dev(corpus, queries, qrels, n_queries=300, distractors=2000, seed=0):
    """A small dev set from `convert`'s output: `(corpus, queries, {"dev": qrels})`.

    `n_queries` dev queries (a seeded sample), every document relevant to
    them, their own questions (ignored as answers, as in the full set) and
    `distractors` documents sampled from the questions outside the test
    split's duplicate sets. Deterministic for a seed.
    """
    if n_queries < 1 or distractors < 0:
        raise ValueError(f"--small-dev must be >= 1 and --distractors >= 0; got {n_queries} "
                         f"and {distractors}")
    relevant = {}
    for q, d, score in qrels["dev"]:
        relevant.setdefault(q, []).append((d, score))
    dev_queries = sorted(relevant, key=lambda x: int(x[1:]))
    if n_queries > len(dev_queries):
        raise ValueError(f"--small-dev {n_queries} is more than the {len(dev_queries)} dev queries")
    rng = random.Random(seed)
    chosen = sorted(rng.sample(dev_queries, n_queries), key=lambda x: int(x[1:]))
    kept = set(chosen) | {d for q in chosen for d, _ in relevant[q]}
    test_side = {x for q, d, _ in qrels["test"] for x in (q, d)}
    pool = sorted((d["_id"] for d in corpus if d["_id"] not in kept | test_side),
                  key=lambda x: int(x[1:]))
    if distractors > len(pool):
        raise ValueError(f"--distractors {distractors} is more than the {len(pool)} questions "
                         "outside the test split")
    kept |= set(rng.sample(pool, distractors))
    small_corpus = [d for d in corpus if d["_id"] in kept]
    small_queries = [q for q in queries if q["_id"] in set(chosen)]
    dev = [(q, d, score) for q in chosen for d, score in relevant[q]]
    return small_corpus, small_queries, {"dev": dev}


def write_small_dev(folder, corpus, queries, qrels, stats):
    """Write the small dev set whole or not at all (a temporary folder, then renamed)."""
    folder = Path(folder)
    if folder.exists():
        raise ValueError(f"{folder} exists; choose a new --output for --small-dev")
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    try:
        write_beir(tmp, corpus, queries, qrels)
        with open(tmp / "stats.json", "w", encoding="utf-8") as f:
            json.dump(stats, f, indent=2)
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def write_beir(folder, corpus, queries, qrels):
    folder = Path(folder)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for doc in corpus:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as f:
        for query in queries:
            f.write(json.dumps(query, ensure_ascii=False) + "\n")
    for split, rows in qrels.items():
        with open(folder / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            f.writelines(f"{q}\t{d}\t{s}\n" for q, d, s in rows)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(DEFAULT_INPUT))
    p.add_argument("--output", required=True)
    p.add_argument("--dev-fraction", type=float, default=0.3)
    p.add_argument("--train-fraction", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--small-dev", type=int, default=None, metavar="N",
                   help="write only a small dev set of N dev queries (for --dev-retrieval)")
    p.add_argument("--distractors", type=int, default=2000,
                   help="--small-dev: questions outside the test split added to its corpus")
    args = p.parse_args(argv)
    if args.small_dev is not None and Path(args.output).exists():
        raise SystemExit(f"quora_beir.py: {args.output} exists; choose a new --output for "
                         "--small-dev")
    from keras_sentemb.data.nli import read_labeled_pairs

    rows, skipped = read_labeled_pairs(args.input, return_skipped=True)
    try:
        corpus, queries, qrels = convert(rows, args.dev_fraction, args.seed, args.train_fraction)
    except ValueError as error:
        raise SystemExit(f"quora_beir.py: {error}") from None
    if args.small_dev is not None:
        try:
            corpus, queries, qrels = small_dev(corpus, queries, qrels, args.small_dev,
                                               args.distractors, args.seed)
            stats = {"input": os.path.basename(args.input), "documents": len(corpus),
                     "dev_queries": len(queries), "dev_qrels": len(qrels["dev"]),
                     "distractors": args.distractors, "dev_fraction": args.dev_fraction,
                     "seed": args.seed}
            write_small_dev(args.output, corpus, queries, qrels, stats)
        except ValueError as error:
            raise SystemExit(f"quora_beir.py: {error}") from None
        print(json.dumps(stats))
        return
    write_beir(args.output, corpus, queries, qrels)
    stats = {
        "input": os.path.basename(args.input), "pairs": len(rows), "skipped_rows": skipped,
        "documents": len(corpus), "queries": len(queries),
        "dev_queries": len({q for q, _, _ in qrels["dev"]}),
        "test_queries": len({q for q, _, _ in qrels["test"]}),
        "dev_qrels": len(qrels["dev"]), "test_qrels": len(qrels["test"]),
        "dev_fraction": args.dev_fraction, "seed": args.seed,
        **({"train_fraction": args.train_fraction,
            "train_queries": len({q for q, _, _ in qrels["train"]}),
            "train_qrels": len(qrels["train"])} if "train" in qrels else {}),
    }
    with open(Path(args.output) / "stats.json", "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=2)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
