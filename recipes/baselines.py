"""Post-processing and pooling baselines on STS-B: whitening, BERT-flow, SBERT-WK.

For one model, prints STS-B dev/test Spearman x100 (cosine) of:

- the plain poolings (`cls`, `mean`, `max`, `mean_last2`, `first_last`) and
  SBERT-WK (`sbert_wk:START:2`, START chosen on STS-B dev);
- BERT-whitening (Su et al., 2021) fitted on a corpus with `fit_whitening`
  from `mean`, `cls` and `first_last` pooling (the output size chosen on
  STS-B dev among all dimensions, 256 and 128);
- BERT-flow (Li et al., 2020) trained on the same corpus with `fit_flow` from
  `mean`, `cls` and `mean_last2` pooling (the checkpoint chosen on STS-B dev).

The corpus (and the STS-B sentences) are encoded once with every pooling
needed (`encode_poolings`: one Transformer pass); the fits take those
vectors (what `keras-sentemb encode --pooling P` writes). Only STS-B dev
chooses anything; test is reported once.

    python recipes/baselines.py --model default --fit-sentences 20000 --results out.json
    python recipes/baselines.py --smoke                # ~2 minutes on CPU

References:
    - [Su et al., 2021](https://arxiv.org/abs/2103.15316) (whitening)
    - [Li et al., 2020](https://arxiv.org/abs/2011.05864) (BERT-flow)
    - [Wang & Kuo, 2020](https://arxiv.org/abs/2002.06652) (SBERT-WK)
"""

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from keras_sentemb.kernels.onednn_opts import enable_onednn_opts
from keras_sentemb.quiet_startup import add_verbose_flag, run_quietly

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

REPO = Path(__file__).resolve().parents[1]
WIKI = REPO / "data" / "wiki.txt"  # docs/data.md makes it
PLAIN_POOLINGS = ("cls", "mean", "max", "mean_last2", "first_last")
WHITENING_POOLINGS = ("mean", "cls", "first_last")
WHITENING_DIMS = "all,256,128"
FLOW_POOLINGS = ("mean", "cls", "mean_last2")


def spearman(vectors, sentences, pairs):
    from keras_sentemb.pipelines.callbacks import vectors_spearman

    return round(vectors_spearman(vectors, sentences, pairs), 2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--corpus", default=str(WIKI), help="one sentence per line")
    parser.add_argument("--fit-sentences", type=int, default=20000,
                        help="fit on the first N corpus sentences")
    parser.add_argument("--cache", default=None, help="folder for the corpus vectors (.npy)")
    parser.add_argument("--flow-batch-size", type=int, default=32)
    parser.add_argument("--flow-eval-every", type=int, default=125)
    parser.add_argument("--results", default=None, help="write the JSON here too")
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run")
    add_verbose_flag(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    import numpy as np

    from keras_sentemb.api import fit_flow
    from keras_sentemb.api import fit_whitening
    from keras_sentemb.data.corpus import load_corpus
    from keras_sentemb.evaluation.layer_survey import encode_poolings
    from keras_sentemb.evaluation.readers import load_stsb_pairs
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.models.sbert_wk import check_sbert_wk
    from keras_sentemb.pipelines.callbacks import pair_sentences

    start = time.time()
    encoder = SentenceEncoder.from_preset(args.model)
    dev, test = load_stsb_pairs("stsb", "dev"), load_stsb_pairs("stsb", "test")
    corpus = load_corpus(args.corpus)[: args.fit_sentences]
    flow_steps, dims = None, WHITENING_DIMS
    if args.smoke:
        dev, test, corpus, flow_steps = dev[:100], test[:100], corpus[:400], 20
        args.flow_eval_every, dims = 10, "128,64"  # 400 vectors cannot whiten 384 dims
    sts = pair_sentences(dev + test)
    starts = []
    for s in range(encoder.num_layers + 1):
        try:
            check_sbert_wk(s, 2, encoder.num_layers)
            starts.append(s)
        except ValueError:
            pass
    wk = [f"sbert_wk:{s}:2" for s in starts]
    logging.info("encoding %d STS-B sentences with %d poolings", len(sts), len(PLAIN_POOLINGS) + len(wk))
    sts_vectors = encode_poolings(encoder, sts, list(PLAIN_POOLINGS) + wk)

    def scores(vectors):
        return {"dev": spearman(vectors, sts, dev), "test": spearman(vectors, sts, test)}

    rows = {p: scores(sts_vectors[p]) for p in PLAIN_POOLINGS}
    wk_dev = {p: spearman(sts_vectors[p], sts, dev) for p in wk}
    best_wk = max(wk, key=wk_dev.get)
    rows[best_wk] = scores(sts_vectors[best_wk])
    result = {"model": args.model, "fit_sentences": len(corpus), "plain": rows,
              "sbert_wk_dev_by_start": wk_dev, "sbert_wk_kept": best_wk}
    print(json.dumps(result), flush=True)

    fit_poolings = sorted(set(WHITENING_POOLINGS) | set(FLOW_POOLINGS))
    cache = Path(args.cache) if args.cache else None
    corpus_vectors = {}
    missing = [p for p in fit_poolings
               if cache is None or not (cache / f"{p}.npy").exists() or args.smoke]
    if missing:
        logging.info("encoding %d corpus sentences with %s", len(corpus), missing)
        corpus_vectors.update(encode_poolings(encoder, corpus, missing))
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
            for p in missing:
                np.save(cache / f"{p}.npy", corpus_vectors[p])
    for p in fit_poolings:
        if p not in corpus_vectors:
            corpus_vectors[p] = np.load(cache / f"{p}.npy")

    def evaluate(fitted, pooling):
        vectors = np.asarray(fitted.postprocess(sts_vectors[pooling]))
        # The fitted encoder's own encode() gives the same vectors.
        check = fitted.encode(sts[:32])
        assert np.allclose(check, vectors[:32], atol=1e-3, rtol=1e-4), "encode() differs"
        return scores(vectors)

    result["whitening"], result["flow"] = {}, {}
    for p in WHITENING_POOLINGS:
        fitted = fit_whitening(corpus_vectors[p], model=encoder, pooling=p,
                               dim=dims, dev=dev, verbose=0)
        report = fitted.training_report
        result["whitening"][p] = {
            **evaluate(fitted, p), "dim": report.resolved["dim"],
            "dev_by_dim": report.selection["history"][0][1],
        }
        print(json.dumps({"whitening": {p: result["whitening"][p]}}), flush=True)
        fitted.postprocess = None
    for p in FLOW_POOLINGS:
        t = time.time()
        fitted = fit_flow(corpus_vectors[p], model=encoder, pooling=p, steps=flow_steps,
                          batch_size=args.flow_batch_size, eval_every=args.flow_eval_every,
                          dev=dev, verbose=0)
        report = fitted.training_report
        result["flow"][p] = {
            **evaluate(fitted, p), "steps": report.steps_trained,
            "kept_step": report.selection["kept_step"],
            "dev_history": report.selection["history"],
            "train_seconds": round(time.time() - t, 1),
        }
        print(json.dumps({"flow": {p: result["flow"][p]}}), flush=True)
        fitted.postprocess = None
    result["seconds"] = round(time.time() - start, 1)
    print(json.dumps(result, indent=2))
    if args.results:
        with open(args.results, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    enable_onednn_opts()  # before TensorFlow starts: its oneDNN kernels on AVX2-only CPUs
    sys.exit(run_quietly(main))  # TensorFlow's start-up notices hidden unless --verbose
