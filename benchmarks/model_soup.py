"""Do runs from one start, averaged weight by weight, beat each run? Soups, and the ensemble.

    python benchmarks/model_soup.py runs/whitenedcse-seed0 runs/whitenedcse-seed1 \\
        --out benchmarks/results/model_soup.jsonl

Every folder is a model saved by `fit_*` (or `keras-sentemb train`) from the
same start, with the same architecture and pooling. Each is scored on STS-B
dev (float32), then two soups (Wortsman et al. 2022, "Model soups"):

- the uniform soup: the mean of every folder's weights;
- the greedy soup: the folders sorted by dev, best first; each is added to
  the soup only if the soup's dev does not fall;
- the ensemble: every run kept and its outputs averaged (the concatenation of
  the runs' L2-normalized vectors, whose cosine is the mean of the runs'
  cosines). It costs every run at inference, so it is not a model to ship:
  it is the ceiling of what one model distilled from the runs could reach.
  An ensemble no better than its best run says the runs have converged to
  the same function, and no averaging or distillation of them can gain.

Choices are made on dev only: STS-B test is read once, for the candidate
(a single run, a soup or the ensemble) best on dev. A soup of N
runs of S steps costs N x S optimizer steps, the budget it is compared at.

Writes one JSON line per candidate and a summary line to `--out`.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_info, shown_path, sts_b  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def mean_weights(weight_lists):
    """The element-wise mean of several models' weight lists (float64, cast back)."""
    import numpy as np

    return [np.mean([np.asarray(w, np.float64) for w in ws], axis=0).astype(np.asarray(ws[0]).dtype)
            for ws in zip(*weight_lists)]


class Ensemble:
    """`encode` of several encoders: the concatenation of their L2-normalized vectors."""

    def __init__(self, encoders):
        self.encoders = list(encoders)

    def encode(self, sentences, **kwargs):
        import numpy as np

        parts = []
        for encoder in self.encoders:
            vectors = np.asarray(encoder.encode(sentences, **kwargs), np.float32)
            parts.append(vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True),
                                              1e-12))
        return np.concatenate(parts, axis=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="models trained from one start")
    parser.add_argument("--out", default=str(REPO / "runs" / "model_soup.jsonl"))
    args = parser.parse_args()
    if len(args.folders) < 2:
        raise SystemExit("model_soup: give two or more model folders")

    from keras_sentemb.models import SentenceEncoder

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)

    def log(record):
        print(json.dumps(record), flush=True)
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    start = time.perf_counter()
    encoder = SentenceEncoder.from_preset(args.folders[0])
    runs, run_encoders = [], []
    for folder in args.folders:
        run_encoders.append(SentenceEncoder.from_preset(folder))
        runs.append({"folder": shown_path(folder), "weights": run_encoders[-1].get_weights(),
                     "dev": round(sts_b(run_encoders[-1], "dev"), 4)})
        log({"candidate": "run", "folder": runs[-1]["folder"], "dev": runs[-1]["dev"]})

    candidates = {f"run {r['folder']}": (r["dev"], r["weights"]) for r in runs}
    uniform = mean_weights([r["weights"] for r in runs])
    encoder.set_weights(uniform)
    candidates["uniform soup"] = (round(sts_b(encoder, "dev"), 4), uniform)
    log({"candidate": "uniform soup", "runs": len(runs), "dev": candidates["uniform soup"][0]})

    ranked = sorted(runs, key=lambda r: -r["dev"])
    members, best_dev = [ranked[0]], ranked[0]["dev"]
    for run in ranked[1:]:
        trial = mean_weights([m["weights"] for m in members + [run]])
        encoder.set_weights(trial)
        dev = round(sts_b(encoder, "dev"), 4)
        log({"candidate": "greedy soup, trial", "members": [m["folder"] for m in members]
             + [run["folder"]], "dev": dev})
        if dev >= best_dev:
            members, best_dev = members + [run], dev
    greedy = mean_weights([m["weights"] for m in members])
    candidates["greedy soup"] = (best_dev, greedy)

    ensemble = Ensemble(run_encoders)
    candidates["ensemble"] = (round(sts_b(ensemble, "dev"), 4), None)
    log({"candidate": "ensemble", "runs": len(runs), "dev": candidates["ensemble"][0]})

    chosen = max(candidates, key=lambda name: candidates[name][0])
    if chosen == "ensemble":
        tested = ensemble
    else:
        encoder.set_weights(candidates[chosen][1])
        tested = encoder
    log({"summary": True, "dev": {name: dev for name, (dev, _) in candidates.items()},
         "greedy_members": [m["folder"] for m in members], "chosen_on_dev": chosen,
         "chosen_dev": candidates[chosen][0], "chosen_test": round(sts_b(tested, "test"), 4),
         "seconds": round(time.perf_counter() - start, 1),
         "command": "python benchmarks/model_soup.py "
                    + " ".join(shown_path(a) if Path(a).exists() else a for a in sys.argv[1:]),
         "machine": cpu_info()})


if __name__ == "__main__":
    main()
