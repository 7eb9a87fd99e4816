"""Does averaging the weights along a run lift STS-B dev? EMAs and a tail average, beside the run.

    python benchmarks/weight_averaging.py --start runs/untuned-minilm --corpus data/wiki.txt \\
        --method whitenedcse --learning-rate 2e-5 --options '{"temperature": 0.1}'

One `fit_*` run (batch 64, max length 32, pooling `auto`, its dev selection as
usual) with a callback that keeps, after every optimizer step, exponential
moving averages of the encoder's weights (`--decays`) and the uniform average
of every step after the first quarter of the run (the tail, as stochastic
weight averaging keeps). At each evaluation (`--eval-every`) every average is
scored on STS-B dev (float32), beside the run's own weights. Choices are made
on dev only: STS-B test is read once, for whichever candidate (an average at
its best step, or the run's kept checkpoint) is best on dev.

Writes one JSON line per evaluation and a summary line to `--out`; prints the
dev table.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import sts_b  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def averaging_callback(steps, every, decays, log):
    """The Keras callback that keeps the averages and scores them on dev every `every` steps."""
    import keras
    import numpy as np

    class Averages(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.averages = None
            self.tail, self.tail_count = None, 0
            self.best = {}  # name -> (dev, step, weights)

        def on_train_batch_end(self, batch, logs=None):
            weights = [v.numpy().astype(np.float64) for v in self.model.encoder.weights]
            step = int(self.model.optimizer.iterations.numpy())
            if self.averages is None:
                self.averages = {d: [w.copy() for w in weights] for d in decays}
            for decay, average in self.averages.items():
                for a, w in zip(average, weights):
                    a *= decay
                    a += (1 - decay) * w
            if step > steps // 4:
                if self.tail is None:
                    self.tail = [w.copy() for w in weights]
                self.tail_count += 1
                for t, w in zip(self.tail, weights):
                    t += (w - t) / self.tail_count
            if step % every == 0:
                self.score(step)

        def score(self, step):
            encoder = self.model.encoder
            own = encoder.get_weights()
            candidates = {f"ema_{d}": a for d, a in self.averages.items()}
            if self.tail is not None:
                candidates["tail"] = self.tail
            record = {"step": step}
            for name, weights in candidates.items():
                encoder.set_weights([w.astype(o.dtype) for w, o in zip(weights, own)])
                record[name] = round(sts_b(encoder, "dev"), 4)
                if record[name] > self.best.get(name, (-1.0,))[0]:
                    self.best[name] = (record[name], step,
                                       [w.astype(o.dtype) for w, o in zip(weights, own)])
            encoder.set_weights(own)
            record["run"] = round(sts_b(encoder, "dev"), 4)
            log(record)

    return Averages()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default=str(REPO / "runs" / "untuned-minilm"))
    parser.add_argument("--corpus", default=str(REPO / "data" / "wiki.txt"))
    parser.add_argument("--method", default="whitenedcse")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--options", default="{}", help="the method's options, as JSON")
    parser.add_argument("--decays", default="0.99,0.995,0.998")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(REPO / "runs" / "weight_averaging.jsonl"))
    args = parser.parse_args()

    import keras_sentemb
    from _common import cpu_info

    decays = [float(d) for d in args.decays.split(",")]
    options = json.loads(args.options)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)

    def log(record):
        print(json.dumps(record), flush=True)
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    averages = averaging_callback(args.steps, args.eval_every, decays, log)
    start = time.perf_counter()
    encoder = keras_sentemb.fit(
        args.method, args.corpus, model=args.start, steps=args.steps,
        batch_size=args.batch_size, learning_rate=args.learning_rate,
        max_length=args.max_length, eval_every=args.eval_every, seed=args.seed, verbose=0,
        callbacks=[averages], **options)
    seconds = time.perf_counter() - start
    kept = sts_b(encoder, "dev")
    best = {name: {"dev": dev, "step": step} for name, (dev, step, _) in averages.best.items()}
    chosen = max(averages.best, key=lambda n: averages.best[n][0], default=None)
    if chosen is not None and averages.best[chosen][0] > kept:
        encoder.set_weights(averages.best[chosen][2])
    else:
        chosen = "run"
    summary = {
        "method": args.method, "learning_rate": args.learning_rate, "steps": args.steps,
        "options": options, "run_kept_dev": round(kept, 4), "best_averages": best,
        "chosen_on_dev": chosen, "chosen_dev": round(sts_b(encoder, "dev"), 4),
        "chosen_test": round(sts_b(encoder, "test"), 4), "seconds": round(seconds, 1),
        "command": "python benchmarks/weight_averaging.py " + " ".join(
            Path(a).name if os.path.isabs(a) else a for a in sys.argv[1:]),
        "machine": cpu_info(),
    }
    log(summary)


if __name__ == "__main__":
    main()
