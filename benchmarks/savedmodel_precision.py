"""TF Serving's speed per precision: float32, bfloat16 and int8 SavedModels in a plain TensorFlow process.

    python benchmarks/savedmodel_precision.py --out benchmarks/results/savedmodel_precision.json

Exports the model (`--model`, default the bundled all-MiniLM-L6-v2) once per
precision with `keras-sentemb export --precision P` (each export verified
against `encode` in its precision), then measures each SavedModel with
`savedmodel_latency.py --saved-model DIR` in a fresh process that imports
TensorFlow and tensorflow-text only, as TF Serving runs it: requests of 1, 32
and 256 wiki sentences, median latency and sentences/s. The precisions take
turns round by round (`--rounds`). Reports each precision's median
throughput per request size and its ratio to float32's, the export's
verification (including the lowest cosine to float32 on the probes) and the
CPU.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import REPO, cpu_info  # noqa: E402

HERE = Path(__file__).resolve().parent
PRECISIONS = ("float32", "bfloat16", "int8")


def export(model, base, precision, env):
    subprocess.run([sys.executable, "-m", "keras_sentemb", "export", "--model", model,
                    "--output", str(base), "--precision", precision], env=env, check=True,
                   capture_output=True)
    version = base / "1"
    meta = json.loads((version / "assets.extra" / "sentemb_export.json").read_text())
    return version, meta["verification"]


def latency(path, batch_sizes, min_seconds, env):
    out = subprocess.run([sys.executable, str(HERE / "savedmodel_latency.py"), "--saved-model",
                          str(path), "--batch-sizes", batch_sizes, "--min-seconds",
                          str(min_seconds)], env=env, check=True, capture_output=True, text=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    return {r["batch_size"]: r["sentences_per_s"] for r in report["results"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--batch-sizes", default="1,32,256")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--min-seconds", type=float, default=10.0)
    p.add_argument("--out", default=str(REPO / "runs" / "savedmodel_precision.json"))
    args = p.parse_args()
    precisions = [s.strip() for s in args.precisions.split(",") if s.strip()]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="sentemb-precision-") as tmp:
        exported = {p_: export(args.model, Path(tmp) / p_, p_, env) for p_ in precisions}
        rates = {p_: [] for p_ in precisions}
        for r in range(args.rounds):
            for precision in precisions if r % 2 == 0 else precisions[::-1]:
                rates[precision].append(latency(exported[precision][0], args.batch_sizes,
                                                args.min_seconds, env))
                print(f"round {r} {precision}: {rates[precision][-1]}", file=sys.stderr)
    result = {"benchmark": "savedmodel_precision", "model": args.model, "rounds": args.rounds,
              **cpu_info(), "loadavg_after": [round(x, 2) for x in os.getloadavg()],
              "precisions": {}}
    for precision in precisions:
        median = {b: round(statistics.median(run[b] for run in rates[precision]), 1)
                  for b in rates[precision][0]}
        result["precisions"][precision] = {"sentences_per_s": median,
                                           "verification": exported[precision][1]}
    if "float32" in result["precisions"]:
        base = result["precisions"]["float32"]["sentences_per_s"]
        for entry in result["precisions"].values():
            entry["vs_float32"] = {b: round(v / base[b], 2)
                                   for b, v in entry["sentences_per_s"].items()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print("| precision | " + " | ".join(f"{b} per request, sentences/s (x float32)"
                                       for b in result["precisions"][precisions[0]]
                                       ["sentences_per_s"]) + " |")
    for precision, entry in result["precisions"].items():
        cells = [f"{v} ({entry.get('vs_float32', {}).get(b, '-')}x)"
                 for b, v in entry["sentences_per_s"].items()]
        print(f"| {precision} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
