"""`keras-sentemb analyze`: analyses of one or more models as a PNG and its numbers."""

import contextlib
import csv
import importlib
import json
import os
import sys

from keras_sentemb import evaluation
from keras_sentemb.cli.common import UsageError
from keras_sentemb.cli.common import load_encoder
from keras_sentemb.cli.common import model_args
from keras_sentemb.cli.common import positive_int
from keras_sentemb.evaluation import training_curves


ANALYSES = ("alignment-uniformity", "token-removal", "map", "layers", "training")


def add_parser(sub):
    """`analyze`'s flags."""
    p = sub.add_parser("analyze", allow_abbrev=False, help="analyses as a PNG plus its numbers (JSON, CSV); "
                                       "'training' draws a trained model folder's loss and dev curves")
    p.add_argument("analysis", choices=ANALYSES)
    model_args(p)
    p.add_argument("--compare", action="append", default=None, metavar="MODEL",
                   help="another model on the same plot (repeatable)")
    p.add_argument("--output", required=True, help="folder for ANALYSIS.png/.json/.csv")
    p.add_argument("--data", default=None,
                   help="STS-B csv/folder (default: the STS-B files); for 'map --task', the SentEval folder")
    p.add_argument("--split", default=None, help="default: dev (layers: test)")
    p.add_argument("--top-k", default=None, help="token-removal: comma-separated k values")
    p.add_argument("--frequency-corpus", default=None,
                   help="token-removal: text file to count token frequencies on (default: the STS sentences)")
    p.add_argument("--task", default=None, help="map: a SentEval sentence task coloured by class (SST2, TREC, MR...)")
    p.add_argument("--method", choices=["tsne", "pca"], default="tsne", help="map: t-SNE (default) or PCA")
    p.add_argument("--max-points", type=positive_int, default=600, help="map: sentences drawn at most")
    p.add_argument("--seed", type=int, default=0, help="map: seed of the sample and t-SNE")
    p.add_argument("--poolings", default="cls,mean,max", help="layers: poolings per layer")
    return p


def _model_name(model):
    return os.path.basename(os.path.normpath(model)) or model


def _write_analysis(folder, name, result, rows):
    """FOLDER/NAME.json (everything) and FOLDER/NAME.csv (the table of `rows`)."""
    with open(os.path.join(folder, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    if rows:
        with open(os.path.join(folder, f"{name}.csv"), "w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def _analyze_training(args, chosen, names):
    """`analyze training`: the curves of each model folder's training report."""
    reports = [training_curves.load_training_report(m) for m in chosen]  # before any output
    os.makedirs(args.output, exist_ok=True)
    results, rows = {}, []
    for name, report in zip(names, reports):
        curves = results[name] = training_curves.training_curves(report)
        rows += [{"model": name, "series": "loss", "step": s, "value": v} for s, v in curves["loss"]]
        rows += [{"model": name, "series": f"dev {candidate}", "step": s, "value": v}
                 for candidate, points in curves["dev"].items() for s, v in points]
    png = os.path.join(args.output, "training.png")
    training_curves.plot_training_curves(results if len(chosen) > 1 else results[names[0]], png)
    _write_analysis(args.output, "training", {"analysis": "training", "chosen": dict(zip(names, chosen)),
                                             "results": results, "plot": png}, rows)
    print(json.dumps({"analysis": "training", "png": png,
                      "json": os.path.join(args.output, "training.json")}))
    return 0


def cmd_analyze(args):
    """Each analysis: one PNG, its numbers as JSON and CSV, in --output."""
    au = evaluation.alignment_uniformity
    maps = evaluation.embedding_map
    removal = evaluation.token_removal
    # By module name: `evaluation.layer_survey` is also the name of a function
    # the package exports, so attribute access may give the function.
    survey = importlib.import_module("keras_sentemb.evaluation.layer_survey")

    chosen = [args.model] + list(args.compare or [])
    names = [_model_name(m) for m in chosen]
    if len(set(names)) != len(names):
        names = chosen
    if args.analysis == "training":
        return _analyze_training(args, chosen, names)
    os.makedirs(args.output, exist_ok=True)
    data = args.data or "stsb"
    if data != "stsb" and not os.path.exists(data):
        raise UsageError(f"data not found: {data}")
    if args.analysis == "map" and len(chosen) > 1:
        raise UsageError("'analyze map' draws one model; run it once per model")
    results, rows = {}, []
    with contextlib.redirect_stdout(sys.stderr):
        for model, name in zip(chosen, names):
            encoder = load_encoder(model, args.pooling, args.max_length, args.num_layers)
            if args.analysis == "alignment-uniformity":
                res = au.sts_alignment_uniformity(encoder, data, args.split or "dev")
                rows.append({"model": name, "alignment": res["alignment"], "uniformity": res["uniformity"]})
            elif args.analysis == "token-removal":
                top_k = [int(k) for k in args.top_k.split(",")] if args.top_k else removal.DEFAULT_TOP_K
                res = removal.frequent_token_removal(encoder, data, args.split or "dev", top_k=top_k,
                                                     frequency_corpus=args.frequency_corpus)
                rows += [{"model": name, "k": p["k"], "spearman": p["spearman"]} for p in res["points"]]
            elif args.analysis == "map":
                split = args.split or ("dev" if args.task in (None, "SST2", "sst2") else
                                       "test" if args.task.upper() == "TREC" else "all")
                res = maps.embedding_map(encoder, data, split, task=args.task, method=args.method,
                                         max_points=args.max_points, seed=args.seed,
                                         path=os.path.join(args.output, "map.png"))
                rows += [{"x": p["x"], "y": p["y"], "label": res["label_names"][p["label"]],
                          "text": p["text"]} for p in res["points"]]
            else:
                poolings = tuple(p.strip() for p in args.poolings.split(","))
                res = survey.layer_survey(encoder, data, args.split or "test", pooling=poolings)
                rows += [{"model": name, "pooling": pool, "layer": l["layer"], "spearman": l["spearman"]}
                         for pool, r in res.items() for l in r["layers"]]
            results[name] = res
            del encoder
    stem = args.analysis.replace("-", "_")
    png = os.path.join(args.output, f"{stem}.png")
    if args.analysis == "alignment-uniformity":
        au.plot_alignment_uniformity(results, png)
    elif args.analysis == "token-removal":
        removal.plot_token_removal(results, png)
    elif args.analysis == "layers":
        curves = {(f"{name} {pool}" if len(chosen) > 1 else pool): r
                  for name, res in results.items() for pool, r in res.items()}
        survey.plot_layer_survey(curves, png)
    for res in results.values():
        if isinstance(res, dict) and "plot" in res:
            res["plot"] = png
    _write_analysis(args.output, stem, {"analysis": args.analysis, "chosen": dict(zip(names, chosen)),
                                        "results": results}, rows)
    print(json.dumps({"analysis": args.analysis, "png": png,
                      "json": os.path.join(args.output, f"{stem}.json")}))
    return 0


def run(args):
    return cmd_analyze(args)
