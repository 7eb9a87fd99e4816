"""The `keras-sentemb` command line (also `python -m keras_sentemb`).

```
keras-sentemb encode   --model MODEL --input FILE.txt --output FILE.npy
                       [--pooling cls|mean|max|mean_last2|first_last|layer:K|sbert_wk[:S[:W]]]
                       [--batch-size N] [--max-length N] [--normalize]
                       [--precision float32|bfloat16]
keras-sentemb encode   --model MODEL --input FILE_OR_GLOB --output DIR/ --shard-size N
                       [--shard-format npy|tfrecord] [...]      # streaming, resumable
keras-sentemb evaluate sts --model MODEL --data DIR [--pooling ...] [--format markdown]
keras-sentemb evaluate transfer --model MODEL --data DIR
                       [--tasks MR,CR,SUBJ,MPQA,SST2,TREC,MRPC] [--pooling P] [--seed S]
keras-sentemb evaluate all --model MODEL --data DIR [--output REPORT]
keras-sentemb evaluate retrieval --model MODEL --data BEIR_DIR [--split test|dev]
                       [--truncate-dim K] [--query-prompt P] [--corpus-prompt P]
                       [--approximate] [--format json|markdown] [--output FILE]
keras-sentemb train METHOD --model MODEL --train-file FILE --output DIR
                       [--steps N] [--batch-size N] [--learning-rate LR]
                       [--max-length N] [method options]
                       # METHOD: ct | simcse | consert | sg | parallel | multitask | sts
                       #         | mlm | whitening | flow (post-processing fitted on a frozen model)
keras-sentemb analyze  alignment-uniformity|token-removal|map|layers|training --model MODEL
                       [--compare MODEL2] --output DIR
                       # training: loss and dev score per step from MODEL/training_report.json
keras-sentemb export   --model MODEL --output saved_models/NAME [--version N]
                       [--format saved-model|sentence-transformers|transformers]
                       [--overwrite] [--dtype float32|float16|bfloat16] [--tolerance T]
                       [--truncate-dim K]
```

`encode`, `evaluate` and `export` take `--truncate-dim K`: the first K
dimensions of each vector, renormalised when the model normalises.
`--verbose` (anywhere on the line) shows TensorFlow's C++ start-up logs,
which are hidden otherwise unless TF_CPP_MIN_LOG_LEVEL is set.

Every command that loads MODEL also takes `--num-layers N` (the first N
Transformer layers of MODEL). User mistakes (missing files, unknown models or pooling, bad values) end with
one line on stderr and exit status 2, never a traceback; so do a full disk
("cannot write PATH: no space left on device", or "file too large" under a
file-size limit; nothing half-written is left) and a missing optional
dependency (with the pip command that installs it).

`evaluate ... --output FILE` writes exactly FILE, in the format its
extension (.json, .md) or `--format` names; for sts, transfer and all, a
FILE with neither gets FILE.json and FILE.md.
"""

import argparse
import contextlib
import csv
import importlib
import json
import logging
import os
import sys
import typing

import numpy as np

from keras_sentemb import evaluation
from keras_sentemb import export
from keras_sentemb import models
from keras_sentemb import methods
from keras_sentemb import pipelines
from keras_sentemb.evaluation import training_curves
from keras_sentemb.io_utils import check_new_folder
from keras_sentemb.io_utils import disk_full_cause
from keras_sentemb.io_utils import looks_like_model
from keras_sentemb.io_utils import save_npy
from keras_sentemb.io_utils import write_file_atomic
from keras_sentemb.missing_dependency import MissingDependencyError
from keras_sentemb.missing_dependency import import_optional
from keras_sentemb.pipelines.shared_arguments import SHARED_ARGUMENTS
from keras_sentemb.quiet_startup import quiet_tensorflow_startup
from keras_sentemb.quiet_startup import start_tensorflow
from keras_sentemb.quiet_startup import take_verbose_flag

# The built-in training methods (`train` also takes those registered elsewhere:
# `keras_sentemb.list_methods()`).
METHODS = tuple(methods.registry.BUILTIN_METHODS)
# Shared run arguments that `train` takes as fixed flags of its own (the
# method's other options come from its registered definition).
FIXED_RUN_ARGUMENTS = ("model", "steps", "batch_size", "learning_rate", "max_length", "output")


class UsageError(Exception):
    """A user mistake: reported as one line, exit status 2."""


def _error(message):
    print(f"keras-sentemb: error: {message}", file=sys.stderr)
    return 2


def _warn(message):
    print(f"keras-sentemb: warning: {message}", file=sys.stderr)


def read_lines(path):
    """Lines of a UTF-8 text file; invalid bytes are replaced (with a warning).

    Every line counts, empty ones included; a final newline does not start an
    extra line. `\\r\\n` line ends are accepted.
    """
    if not os.path.isfile(path):
        raise UsageError(f"input file not found: {path}")
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        return []
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    lines, bad = [], []
    for number, raw in enumerate(raw_lines, start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(raw.decode("utf-8", errors="replace"))
            bad.append(number)
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (" ..." if len(bad) > 10 else "")
        _warn(
            f"{path}: {len(bad)} line(s) are not valid UTF-8 (line {shown}); "
            "invalid bytes were replaced with U+FFFD."
        )
    return lines


def _positive(cast, what, text):
    """`text` as a `cast` value > 0, or the argparse error naming `what` it expected."""
    try:
        value = cast(text)
    except ValueError:
        value = None
    if value is None or not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive {what}, got {text!r}")
    return value


def _positive_int(text):
    return _positive(int, "integer", text)


def _positive_float(text):
    return _positive(float, "number", text)


def _verbosity(text):
    """Keras verbosity: "auto" or 0, 1, 2 (ints: Keras compares with ints)."""
    if text == "auto":
        return text
    if text in ("0", "1", "2"):
        return int(text)
    raise argparse.ArgumentTypeError(f"expected auto, 0, 1 or 2, got {text!r}")


def _pooling(text):
    try:
        return models.pooling.parse_pooling(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def _load_encoder(model, pooling=None, max_length=None, num_layers=None, precision=None):
    dtype = None
    if precision is not None:
        # Built in its precision once, not built in float32 and then copied.
        precision = models.native_bfloat16.effective_precision(precision)
        dtype = models.precision.INFERENCE_POLICIES[precision]
    encoder = models.SentenceEncoder.from_preset(model, max_length=max_length,
                                                 num_layers=num_layers, dtype=dtype)
    if pooling is not None:
        # Validate layer:K against this model's depth.
        encoder.pooling = models.pooling.parse_pooling(pooling, encoder.num_layers)
    return encoder


# ---------------------------------------------------------------- commands
def cmd_encode_shards(args):
    """`encode --shard-size N`: stream FILE_OR_GLOB into shards in the folder --output."""
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise UsageError(f"--output {args.output} is a file; with --shard-size give a folder")
    if args.truncate_dim is not None:
        raise UsageError("--truncate-dim is not supported with --shard-size")
    try:
        models.sharded_encoding.match_inputs(args.input)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    encoder = _load_encoder(args.model, args.pooling, args.max_length, args.num_layers,
                            args.precision)
    with contextlib.redirect_stdout(sys.stderr):
        manifest = encoder.encode_to_files(
            args.input, args.output, shard_size=args.shard_size, batch_size=args.batch_size,
            normalize=args.normalize, precision=args.precision,
            shard_format=args.shard_format, show_progress=True, model_name=args.model,
        )
    print(
        f"wrote {args.output}: {manifest['rows']} rows x {manifest['dim']} float32 in "
        f"{len(manifest['shards'])} shard(s) ({manifest['shards_skipped']} already there)",
        file=sys.stderr,
    )
    return 0


def cmd_encode(args):
    # This process only encodes: two batches side by side, each on its share
    # of the cores, beat one batch on all of them (keras_sentemb.models.cpu_threads).
    models.cpu_threads.configure_encode_threads()
    if args.shard_size is not None:
        return cmd_encode_shards(args)
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if os.path.isdir(args.output):
        raise UsageError(
            f"--output {args.output} is a folder; give a .npy file path, or --shard-size N "
            "to stream the input into shards in that folder"
        )
    if not os.path.isdir(out_dir):
        raise UsageError(f"output folder does not exist: {out_dir}")
    if not os.access(out_dir, os.W_OK):
        raise UsageError(f"output folder is not writable: {out_dir}")
    sentences = read_lines(args.input)
    encoder = _load_encoder(args.model, args.pooling, args.max_length, args.num_layers,
                            args.precision)
    with contextlib.redirect_stdout(sys.stderr):  # the progress bar is not a result
        vectors = encoder.encode(
            sentences,
            batch_size=args.batch_size,
            normalize=args.normalize,
            show_progress=None if sys.stderr.isatty() else False,
            precision=args.precision,
            truncate_dim=args.truncate_dim,
        )
    # Never a half-written .npy: a temporary file, renamed when complete.
    write_file_atomic(args.output, lambda f: save_npy(f, vectors.astype(np.float32)))
    print(
        f"wrote {args.output}: {vectors.shape[0]} x {vectors.shape[1]} float32",
        file=sys.stderr,
    )
    return 0


def _split_tasks(text):
    return [t for t in text.split(",") if t.strip()] if text else None


# Report file extensions and the format each names.
REPORT_EXTENSIONS = {".json": "json", ".md": "markdown"}


def report_files(output, fmt, benchmark):
    """The report files `evaluate --output OUTPUT` writes: a list of `(path, format)`.

    `--output FILE` writes exactly FILE, in the format its extension (`.json`,
    `.md`) names, else in `--format`'s (JSON by default). For `sts`,
    `transfer` and `all`, an OUTPUT without either extension is a prefix:
    `OUTPUT.json` and `OUTPUT.md`.

    Args:
        output: str. The `--output` value.
        fmt: str or None. The `--format` value (None when not given).
        benchmark: str. `sts`, `transfer`, `all` or `retrieval`.

    Returns:
        list of `(path, format)`, format `"json"` or `"markdown"`.

    Examples:

    >>> report_files("r.json", None, "retrieval")
    [('r.json', 'json')]
    >>> report_files("r", "markdown", "retrieval")
    [('r', 'markdown')]
    >>> report_files("report", None, "all")
    [('report.json', 'json'), ('report.md', 'markdown')]
    """
    named = REPORT_EXTENSIONS.get(os.path.splitext(output)[1].lower())
    if named is not None and fmt is not None and fmt != named:
        raise UsageError(
            f"--output {output} names a {named} file but --format is {fmt}; give the file "
            f"the extension of its format (.json or .md) or drop --format"
        )
    if named is None and benchmark != "retrieval":
        return [(output + ".json", "json"), (output + ".md", "markdown")]
    return [(output, named or fmt or "json")]


def _check_report_files(files):
    """Fail before any work when a report file of `report_files` cannot be written there."""
    for path, _ in files:
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise UsageError(f"--output folder does not exist: {folder}")
        if os.path.isdir(path):
            raise UsageError(f"--output {path} is a folder; give a file path")


def _write_report(files, report, markdown):
    """Each `(path, format)` of `report_files`, written whole (temporary file, then rename)."""
    for path, fmt in files:
        text = markdown if fmt == "markdown" else json.dumps(report, indent=2)
        write_file_atomic(path, lambda f: f.write(text), mode="w", encoding="utf-8")
    print(f"wrote {' and '.join(path for path, _ in files)}", file=sys.stderr)


def cmd_evaluate(args):
    reports = evaluation.report
    if not os.path.exists(args.data):
        raise UsageError(f"data folder not found: {args.data}")
    if args.output:
        files = report_files(args.output, args.format, args.benchmark)
        _check_report_files(files)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    tasks = _split_tasks(args.tasks)
    if args.benchmark == "sts" and (args.seed is not None or args.config is not None):
        raise UsageError("--seed and --config belong to 'evaluate transfer' and 'evaluate all'")
    if args.benchmark not in ("sts", "retrieval") and args.split is not None:
        raise UsageError("--split belongs to 'evaluate sts' and 'evaluate retrieval'")
    if args.benchmark == "retrieval":
        return cmd_evaluate_retrieval(args)
    if args.benchmark == "all" and args.truncate_dim is not None:
        raise UsageError("--truncate-dim applies to 'evaluate sts', 'transfer' and 'retrieval'")
    if args.query_prompt is not None or args.corpus_prompt is not None or args.approximate:
        raise UsageError("--query-prompt, --corpus-prompt and --approximate belong to "
                         "'evaluate retrieval'")
    if args.update_card:
        if not os.path.isfile(os.path.join(args.model, models.presets.SENTEMB_CONFIG)):
            raise UsageError(
                f"--update-card needs a model folder written by keras_sentemb; {args.model} is not one"
            )
    options = {"seed": 1111 if args.seed is None else args.seed, "config": args.config or "paper"}
    encoder = _load_encoder(args.model, args.pooling, args.max_length, args.num_layers)
    if args.truncate_dim is not None:
        models.truncation.check_truncate_dim(args.truncate_dim, encoder.output_dim)
        options_truncate = {"truncate_dim": args.truncate_dim}
    else:
        options_truncate = {}
    # stdout carries exactly the result: no progress bar.
    with contextlib.redirect_stdout(sys.stderr):
        if args.benchmark == "sts":
            split = args.split.split(",") if args.split and "," in args.split else args.split
            result = evaluation.sts.evaluate_sts(
                encoder, args.data, tasks=tasks, batch_size=args.batch_size, split=split,
                show_progress=False, **options_truncate)
            markdown = reports.sts_markdown(result)
        elif args.benchmark == "transfer":
            result = evaluation.transfer.evaluate_transfer(encoder, args.data, tasks=tasks, batch_size=args.batch_size,
                                       mrpc_features=args.mrpc_features, show_progress=False,
                                       **options, **options_truncate)
            markdown = reports.transfer_markdown(result)
        else:
            transfer = [t for t in tasks or [] if t.strip().upper() in evaluation.transfer_readers.TRANSFER_TASKS + ("SST",)]
            sts = [t for t in tasks or [] if t not in transfer]
            result = reports.evaluate_all(
                encoder, args.data, batch_size=args.batch_size,
                sts_tasks=sts or None, transfer_tasks=transfer or None, **options,
            )
            markdown = reports.report_markdown(dict(result, model=args.model))
    result["model"] = args.model
    if args.output:
        _write_report(files, result, markdown)
    if args.update_card:
        evaluation.card_results.add_evaluation(args.model, args.benchmark, result)
        print(f"added the {args.benchmark} results to the model card in {args.model}", file=sys.stderr)
    print(markdown if args.format == "markdown" else json.dumps(result))
    return 0


def cmd_evaluate_retrieval(args):
    """`evaluate retrieval`: a BEIR folder, metrics by trec_eval, optional HNSW recall."""
    for name in ("tasks", "seed", "config"):
        if getattr(args, name) is not None:
            raise UsageError(f"--{name} does not apply to 'evaluate retrieval'")
    split = args.split or "test"
    if split not in ("test", "dev"):
        raise UsageError(f"--split for retrieval must be test or dev, got {split!r}")
    if args.update_card:
        _check_card_folder(args.model)
    # A missing optional dependency, then bad files, fail before the model loads.
    import_optional("pytrec_eval", "evaluate retrieval", "retrieval")
    if args.approximate:
        import_optional("faiss", "evaluate retrieval --approximate", "retrieval")
    data = evaluation.beir.load_beir(args.data, split=split)
    encoder = _load_encoder(args.model, args.pooling, args.max_length, args.num_layers)
    if args.truncate_dim is not None:
        models.truncation.check_truncate_dim(args.truncate_dim, encoder.output_dim)
    with contextlib.redirect_stdout(sys.stderr):  # progress bars are not the result
        result = evaluation.beir.evaluate_retrieval(
            encoder, data, truncate_dim=args.truncate_dim, query_prompt=args.query_prompt,
            corpus_prompt=args.corpus_prompt, batch_size=args.batch_size,
            approximate=args.approximate,
            show_progress=None if sys.stderr.isatty() else False,
        )
    result["model"] = args.model
    markdown = evaluation.beir.retrieval_markdown(result)
    if args.output:
        _write_report(report_files(args.output, args.format, "retrieval"), result, markdown)
    if args.update_card:
        evaluation.card_results.add_evaluation(args.model, "retrieval", result)
        print(f"added the retrieval results to the model card in {args.model}", file=sys.stderr)
    print(markdown if args.format == "markdown" else json.dumps(result))
    return 0


def _check_card_folder(model):
    if not os.path.isfile(os.path.join(model, models.presets.SENTEMB_CONFIG)):
        raise UsageError(
            f"--update-card needs a model folder written by keras_sentemb; {model} is not one"
        )


ANALYSES = ("alignment-uniformity", "token-removal", "map", "layers", "training")


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
            encoder = _load_encoder(model, args.pooling, args.max_length, args.num_layers)
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


def _parse_value(text):
    """A value that may take several forms (`--dev`): none, a bool, a number or a string."""
    lowered = text.lower()
    if lowered in ("none", "null"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _optional(cast, what):
    """A parser of `cast` values that also takes `none` / `null` (for None)."""
    def parse(text):
        if text.lower() in ("none", "null"):
            return None
        try:
            return cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} or none, got {text!r}") from None
    return parse


def _comma_list(cast, what):
    """`32,16,8` -> `(32, 16, 8)` (each item parsed by `cast`)."""
    def parse(text):
        try:
            return tuple(cast(item) for item in text.split(",") if item.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {what}s, got {text!r}") from None
    return parse


_optional_float = _optional(float, "a number")
_CASTS = {int: (int, "an integer"), float: (float, "a number")}


def _flag_type(field):
    """The argparse `type` (and `action`) of an option, from its annotation."""
    base = field.base_type
    if field.name == "verbose":
        return {"type": _verbosity}
    if base is bool:
        return {"action": argparse.BooleanOptionalAction}
    if base in _CASTS:
        cast, what = _CASTS[base]
        return {"type": _optional(cast, what) if field.optional else cast}
    if typing.get_origin(base) is tuple:
        cast, what = _CASTS.get(typing.get_args(base)[0], (str, "value"))
        parse = _comma_list(cast, what)
        return {"type": _optional(parse, f"comma-separated {what}s") if field.optional else parse}
    if base is str or (base is object and isinstance(field.default, str)):
        kwargs = {"type": str}  # e.g. --dev stsb | FILE | none, read by the method
        if field.spec.choices is not None:
            kwargs["choices"] = field.spec.choices
        return kwargs
    return {"type": _parse_value}


def method_option_parser(method, add_help=False):
    """An argparse parser of one method's options, built from its registered definition.

    Every shared run argument without a fixed `train` flag and every field of
    the method's config becomes a `--kebab-case` flag taking the same values,
    parsed by the field's type: bools get `--flag/--no-flag`, numbers their
    type (`none` too where None is allowed), tuples comma-separated lists,
    strings stay strings (with their choices). Options that take Python
    objects have no flag. Each flag's help is the option's doc line.

    Returns:
        `(parser, method)`: the parser (its `method_flags` lists the flags)
        and the `Method` class.
    """
    method = methods.get_method(method)
    parser = argparse.ArgumentParser(prog=f"keras-sentemb train {method.name}", add_help=add_help)
    group = parser.add_argument_group(f"{method.name} options")
    parser.method_flags = []
    shared, optional = method.run_arguments()
    fields = [a.as_option_field() for a in shared if a.name not in FIXED_RUN_ARGUMENTS]
    fields += list(method.config_class.option_fields())
    fields += [a.as_option_field() for a in optional]
    docs = {a.name: a.doc_line() for a in shared + optional}
    for field in fields:
        if field.spec.python_only:
            continue
        flag = "--" + field.name.replace("_", "-")
        parser.method_flags.append(flag)
        text = docs.get(field.name) or field.doc_line()
        group.add_argument(flag, dest=field.name, default=argparse.SUPPRESS,
                           help=text.replace("%", "%%"), **_flag_type(field))
    return parser, method


def train_help(method):
    """`keras-sentemb train METHOD --help`: the common flags, then the method's options."""
    common = argparse.ArgumentParser(add_help=False)
    _train_args(common)
    options, method = method_option_parser(method)
    parser = argparse.ArgumentParser(
        prog=f"keras-sentemb train {method.name}", parents=[common, options],
        description=method.summary(),
    )
    return parser.format_help()


def cmd_train(args, extra):
    parser, method = method_option_parser(args.method)
    if method.parallel_passes:
        # Their steps run two independent encoder passes: one per share of the
        # cores beats every op split over all of them (models.cpu_threads).
        models.cpu_threads.configure_train_threads()
    # Dev-set evaluations and the kept checkpoint are reported through logging.
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    options, unknown = parser.parse_known_args(extra)
    if unknown:
        valid = sorted(parser.method_flags)
        raise UsageError(
            f"unknown option(s) for 'train {args.method}': {' '.join(unknown)}; "
            f"valid method options: {' '.join(valid) or '(none)'}"
        )
    if not os.path.exists(args.train_file):
        raise UsageError(f"train file not found: {args.train_file}")
    backup_dir = f"{os.path.abspath(args.output)}.backup"
    resuming = args.resume and os.path.isdir(backup_dir)
    if looks_like_model(args.output) and not args.overwrite:
        raise UsageError(
            f"{args.output} already holds a trained model; pass --overwrite to train again "
            "into it, or choose another --output"
        )
    check_new_folder(args.output, overwrite=True, what="--output")
    common = {"model": args.model, "output": args.output}
    if args.num_layers is not None:
        common["model"] = _load_encoder(args.model, num_layers=args.num_layers)
    for name in ("steps", "batch_size", "learning_rate", "max_length"):
        value = getattr(args, name)
        if value is not None:
            common[name] = value
    callbacks = []
    if args.resume:
        backup = pipelines.backup.TrainingBackup(backup_dir)
        callbacks.append(backup)
        if resuming:
            print(f"resuming the interrupted run from its backup in {backup_dir}", file=sys.stderr)
    elif os.path.isdir(backup_dir):
        _warn(f"--no-resume: ignoring the backup of an earlier run in {backup_dir}")
    try:
        # Keras prints progress bars on stdout; stdout is for results.
        with contextlib.redirect_stdout(sys.stderr):
            encoder = methods.fit(method.name, args.train_file, **common, callbacks=callbacks,
                                  **vars(options))
    except KeyboardInterrupt:
        if args.resume and backup.start_epoch > 0:
            hint = f"run the same command again to resume from the backup in {backup_dir}"
        else:
            hint = "no backup was written yet; the same command starts over"
        raise UsageError(f"interrupted; {hint}") from None
    report = getattr(encoder, "training_report", None)
    detail = f" (pooling {report.pooling}: {report.pooling_reason})" if report else ""
    print(f"saved the {args.method} encoder to {args.output}{detail}", file=sys.stderr)
    return 0


def cmd_export(args):
    saved_model = args.format == "saved-model"
    if saved_model and args.dtype is not None:
        raise UsageError("--dtype applies to the Hugging Face formats; a SavedModel computes in float32")
    if not saved_model and args.version is not None:
        raise UsageError(f"--version applies to --format saved-model, not {args.format}")
    if not saved_model and args.truncate_dim is not None:
        raise UsageError(f"--truncate-dim applies to --format saved-model, not {args.format}")
    encoder = _load_encoder(args.model, args.pooling, args.max_length, args.num_layers)
    tolerance = {} if args.tolerance is None else {"tolerance": args.tolerance}
    if saved_model:
        path = export.saved_model.export_saved_model(
            encoder, args.output, version=args.version, overwrite=args.overwrite,
            truncate_dim=args.truncate_dim, **tolerance,
        )
    else:
        path = export.huggingface.export_huggingface(
            encoder, args.output, format=args.format, overwrite=args.overwrite,
            dtype=args.dtype or "float32", **tolerance,
        )
    print(path)
    return 0


# ------------------------------------------------------------------ parser
def _train_args(p):
    """The flags every `train METHOD` takes (the method's options come from its fit_*)."""
    doc = {a.name: a.doc for a in SHARED_ARGUMENTS}
    p.add_argument("--model", default="default", help=doc["model"])
    p.add_argument("--train-file", required=True, help="the training data (see the method's data)")
    p.add_argument("--output", required=True, help=doc["output"])
    p.add_argument("--steps", type=_positive_int, default=None,
                   help=doc["steps"] + " Defaults to the method's.")
    p.add_argument("--batch-size", type=_positive_int, default=None,
                   help=doc["batch_size"] + " Defaults to the method's.")
    p.add_argument("--learning-rate", type=_positive_float, default=None, help=doc["learning_rate"])
    p.add_argument("--max-length", type=_positive_int, default=None,
                   help=doc["max_length"] + " Defaults to the method's.")
    p.add_argument("--num-layers", type=_positive_int, default=None,
                   help="start from the first N Transformer layers of MODEL")
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                   help="back up every eval_every steps to OUTPUT.backup and continue an "
                        "interrupted run from there (default: on)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a model already in --output")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-sentemb",
        description="Contrastive sentence embeddings on keras-hub backbones.",
    )
    # Taken out of argv before parsing (anywhere on the line), listed here for --help.
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's C++ start-up logs (hidden by default)")
    sub = parser.add_subparsers(dest="command", required=True)

    def model_args(p, pooling=True):
        p.add_argument("--model", required=True, help="'default', a keras-hub preset, or a model folder")
        if pooling:
            p.add_argument("--pooling", type=_pooling, default=None,
                           help="cls|mean|max|mean_last2|first_last|layer:K|sbert_wk[:START[:WINDOW]] "
                                "(default: the model's)")
        p.add_argument("--max-length", type=_positive_int, default=None)
        p.add_argument("--num-layers", type=_positive_int, default=None,
                       help="keep only the first N Transformer layers of MODEL")

    p = sub.add_parser("encode", help="encode a text file (one sentence per line) to .npy")
    model_args(p)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--batch-size", type=_positive_int, default=128)
    p.add_argument("--normalize", action="store_true")
    p.add_argument("--precision", choices=["float32", "bfloat16"], default="float32",
                   help="bfloat16: faster on CPUs with AVX512-BF16/AMX and on GPUs")
    p.add_argument("--shard-size", type=_positive_int, default=None,
                   help="stream --input (a file or a glob) into shards of N lines in the "
                        "folder --output; resumable")
    p.add_argument("--shard-format", choices=["npy", "tfrecord"], default="npy")
    p.add_argument("--truncate-dim", type=_positive_int, default=None,
                   help="keep the first K dimensions (renormalised when the model normalises)")

    p = sub.add_parser("evaluate", help="evaluate an encoder (STS, SentEval transfer tasks, "
                                        "both, or BEIR retrieval)")
    p.add_argument("benchmark", choices=["sts", "transfer", "all", "retrieval"])
    model_args(p)
    p.add_argument("--data", required=True,
                   help="SentEval-style downstream folder (or STS-B csv); retrieval: a BEIR folder")
    p.add_argument("--tasks", default=None,
                   help="comma-separated, e.g. STSBenchmark,STS12,STS17 or MR,CR,SUBJ,MPQA,SST2,TREC,MRPC "
                        "(default: every task found)")
    p.add_argument("--split", default=None,
                   help="sts: test (default), dev, train or all; retrieval: test (default) or dev")
    p.add_argument("--truncate-dim", type=_positive_int, default=None,
                   help="evaluate the first K dimensions (renormalised when the model normalises)")
    p.add_argument("--query-prompt", default=None, help="retrieval: prefix of every query")
    p.add_argument("--corpus-prompt", default=None, help="retrieval: prefix of every document")
    p.add_argument("--approximate", action="store_true",
                   help="retrieval: also search a faiss HNSW index and report its recall")
    p.add_argument("--batch-size", type=_positive_int, default=128)
    p.add_argument("--seed", type=int, default=None,
                   help="transfer: seed of the folds and classifiers (default 1111, SentEval's)")
    p.add_argument("--config", choices=["paper", "fast"], default=None,
                   help="transfer: SentEval's paper setting (default) or its fast one")
    p.add_argument("--mrpc-features", choices=["senteval", "concat"], default="senteval",
                   help="transfer: [|u-v|, u*v] (SentEval's, default) or [u, v, |u-v|, u*v]")
    p.add_argument("--format", choices=["json", "markdown"], default=None,
                   help="stdout: one JSON line (default) or the markdown table; also the "
                        "format of --output FILE when its extension names none")
    p.add_argument("--output", default=None, metavar="FILE",
                   help="also write the report to FILE, in the format its extension (.json, "
                        ".md) or --format names; for sts, transfer and all, a FILE with "
                        "neither gets FILE.json and FILE.md")
    p.add_argument("--update-card", action="store_true",
                   help="add the results to the model card of the --model folder")

    p = sub.add_parser("train", help="train an encoder with a contrastive method "
                                     "(`train METHOD --help` lists its options)")
    p.add_argument("method", choices=methods.list_methods())
    _train_args(p)

    p = sub.add_parser("analyze", help="analyses as a PNG plus its numbers (JSON, CSV); "
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
    p.add_argument("--max-points", type=_positive_int, default=600, help="map: sentences drawn at most")
    p.add_argument("--seed", type=int, default=0, help="map: seed of the sample and t-SNE")
    p.add_argument("--poolings", default="cls,mean,max", help="layers: poolings per layer")

    p = sub.add_parser("export", help="export a SavedModel for TF Serving, or a Hugging Face folder")
    model_args(p)
    p.add_argument("--output", required=True, help="saved_models/NAME (a SavedModel), else the folder")
    p.add_argument("--version", type=_positive_int, default=None)
    p.add_argument("--format", choices=["saved-model", "sentence-transformers", "transformers"],
                   default="saved-model")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing export (SavedModel version or folder), atomically")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default=None,
                   help="weights of a Hugging Face folder (default float32)")
    p.add_argument("--tolerance", type=_positive_float, default=None,
                   help="largest relative error of the export against encode() (default 1e-4)")
    p.add_argument("--truncate-dim", type=_positive_int, default=None,
                   help="the SavedModel returns the first K dimensions (renormalised when "
                        "the model normalises)")
    return parser


def _written_path(args, error):
    """What the command was writing when `error` happened, as the user named it."""
    if getattr(args, "output", None):
        return args.output
    if getattr(args, "update_card", False):
        return args.model
    while error is not None:
        if getattr(error, "filename", None):
            return error.filename
        error = error.__cause__ or error.__context__
    return "the output"


def one_line_error(error, args):
    """The one-line message for `error`, or None when it must stay a traceback.

    A full disk (or a file-size limit or quota) is reported as "cannot write
    PATH: no space left on device" (or "file too large", "disk quota
    exceeded"), whichever library raised it; user mistakes (`UsageError`,
    unknown or broken models, missing files, bad values) and missing optional
    dependencies by their first line. Anything else is a bug: None.

    Args:
        error: Exception. What the command raised.
        args: argparse.Namespace. The command's arguments (for the path).

    Returns:
        str or None.
    """
    cause = disk_full_cause(error)
    if cause is not None:
        return f"cannot write {_written_path(args, error)}: {cause}"
    if isinstance(error, (UsageError, models.presets.ModelNotFoundError, FileNotFoundError,
                          FileExistsError, ValueError, MissingDependencyError)):
        text = str(error).strip()
        return text.splitlines()[0] if text else type(error).__name__
    return None


def _attach_negative_numbers(argv):
    """`--flag -1e-5` -> `--flag=-1e-5`, so argparse reads a negative number as a value.

    argparse only recognises plain negative numbers (`-1`, `-0.5`) as values;
    `-1e-5` would otherwise be taken for an option, and the user would see
    "expected one argument" instead of what is wrong with the value.
    """
    out = []
    for token in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and token.startswith("-"):
            try:
                float(token)
            except ValueError:
                pass
            else:
                out[-1] = f"{out[-1]}={token}"
                continue
        out.append(token)
    return out


# Optional packages that Keras and keras-hub (through kagglehub) import when
# they are imported, only for features `encode` and `export` never use
# (scikit-learn wrappers, notebook detection, image-gallery plots): about a
# second of a cold start.
KERAS_IMPORT_TIME_EXTRAS = ("sklearn", "IPython", "matplotlib")


def _import_keras_without_extras():
    """Import Keras and keras-hub with `KERAS_IMPORT_TIME_EXTRAS` hidden, then unhide them.

    They import each in a `try: import ... except ImportError`, so while
    its name maps to `None` in `sys.modules` Keras records it as missing.
    Afterwards the packages import normally for any code that asks for them.
    """
    hidden = [name for name in KERAS_IMPORT_TIME_EXTRAS if name not in sys.modules]
    if "keras" in sys.modules or not hidden:
        return
    for name in hidden:
        sys.modules[name] = None
    try:
        import keras  # noqa: F401
        import keras_hub  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def main(argv=None):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    argv = _attach_negative_numbers(sys.argv[1:] if argv is None else list(argv))
    argv, verbose = take_verbose_flag(argv)
    # This is a program of its own: TensorFlow's C++ start-up notices are
    # dropped unless --verbose or the user's TF_CPP_MIN_LOG_LEVEL (see quiet_startup).
    with quiet_tensorflow_startup(verbose):
        if len(argv) >= 2 and argv[0] == "train" and argv[1] in methods.list_methods() and (
            "-h" in argv or "--help" in argv
        ):
            print(train_help(argv[1]))
            return 0
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and args.command != "train":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command in ("encode", "export"):
            _import_keras_without_extras()
        start_tensorflow()
    try:
        if args.command == "encode":
            return cmd_encode(args)
        if args.command == "evaluate":
            return cmd_evaluate(args)
        if args.command == "train":
            return cmd_train(args, extra)
        if args.command == "analyze":
            return cmd_analyze(args)
        return cmd_export(args)
    except KeyboardInterrupt:
        return _error("interrupted")
    except Exception as e:
        message = one_line_error(e, args)
        if message is None:  # not a user's or the machine's problem: a bug, with its traceback
            raise
        return _error(message)


if __name__ == "__main__":
    sys.exit(main())
