"""How close SNCSE's negations start: the gap its margin loss acts on, before any training.

    python benchmarks/sncse_negation_gap.py --corpus data/wiki.txt --models runs/untuned-minilm,default

For the first `--sentences` lines of the corpus: each sentence's negation
(`keras_sentemb.methods.sncse.negation.negate`), two dropout passes of the
sentence and one of its negation (mean pooling, max length 32, as SNCSE
trains), the gap `cos(h, h_neg) - cos(h, h+)` of each row, its spread, the
share of rows inside SNCSE's margins [-0.3, -0.1], the margin loss and,
beside it, the InfoNCE loss of the same views (temperature 0.05, the
batch's other positives as negatives).
Prints one JSON line per model.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--models", default="default")
    p.add_argument("--sentences", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args(argv)

    import numpy as np
    import tensorflow as tf

    from keras_sentemb.data.corpus import load_corpus
    from keras_sentemb.losses.info_nce import info_nce_loss
    from keras_sentemb.methods.sncse.negation import negate
    from keras_sentemb.methods.sncse.trainer import bidirectional_margin_loss
    from keras_sentemb.models import SentenceEncoder

    sentences = load_corpus(args.corpus)[: args.sentences]
    negations = [t.decode() for t in negate(tf.constant(sentences)).numpy()]
    for name in args.models.split(","):
        encoder = SentenceEncoder.from_preset(name)
        gaps, losses, contrastive = [], [], []
        for i in range(0, len(sentences), args.batch_size):
            packed = encoder.preprocess(tf.constant(sentences[i:i + args.batch_size]), 32)
            negated = encoder.preprocess(tf.constant(negations[i:i + args.batch_size]), 32)
            a, b, c = (encoder.sentence_vectors(x, "mean", training=True)
                       for x in (packed, packed, negated))
            loss, gap = bidirectional_margin_loss(a, b, c, 0.1, 0.3)
            contrastive.append(float(info_nce_loss(a, b, temperature=0.05)))
            gaps.append(gap.numpy())
            losses.append(float(loss))
        gap = np.concatenate(gaps)
        print(json.dumps({
            "model": Path(name).name, "sentences": len(gap), "gap_mean": round(float(gap.mean()), 4),
            "gap_p10_p50_p90": [round(float(x), 4) for x in np.percentile(gap, [10, 50, 90])],
            "inside_margins": round(float(((gap >= -0.3) & (gap <= -0.1)).mean()), 3),
            "above_minus_0.1": round(float((gap > -0.1).mean()), 3),
            "margin_loss": round(float(np.mean(losses)), 4),
            "info_nce": round(float(np.mean(contrastive)), 4)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
