"""`keras-sentemb evaluate`: STS, SentEval transfer tasks, both, BEIR retrieval, or MTEB."""

import contextlib
import json
import logging
import os
import sys

from keras_sentemb import evaluation
from keras_sentemb import models
from keras_sentemb.cli.common import UsageError
from keras_sentemb.cli.common import load_encoder
from keras_sentemb.cli.common import model_args
from keras_sentemb.cli.common import positive_int
from keras_sentemb.io_utils import write_file_atomic
from keras_sentemb.missing_dependency import import_optional
from keras_sentemb.missing_dependency import is_installed
from keras_sentemb.missing_dependency import missing_dependency


def add_parser(sub):
    """`evaluate`'s flags."""
    p = sub.add_parser("evaluate", allow_abbrev=False, help="evaluate an encoder (STS, SentEval transfer tasks, "
                                        "both, BEIR retrieval, or MTEB's own evaluators)")
    p.add_argument("benchmark", choices=["sts", "transfer", "all", "retrieval", "mteb"])
    model_args(p)
    p.add_argument("--data", default=None,
                   help="SentEval-style downstream folder (or STS-B csv); retrieval: a BEIR folder; "
                        "mteb: optional, local data of either kind instead of MTEB's tasks")
    p.add_argument("--tasks", default=None,
                   help="comma-separated, e.g. STSBenchmark,STS12,STS17 or MR,CR,SUBJ,MPQA,SST2,TREC,MRPC; "
                        "mteb: MTEB task names (their data from the Hugging Face Hub), or with "
                        "--data that folder's STS tasks (default: every task found)")
    p.add_argument("--split", default=None,
                   help="sts: test (default), dev, train or all; retrieval: test (default) or dev")
    p.add_argument("--truncate-dim", type=positive_int, default=None,
                   help="evaluate the first K dimensions (renormalised when the model normalises)")
    p.add_argument("--query-prompt", default=None, help="retrieval and mteb: prefix of every query")
    p.add_argument("--corpus-prompt", default=None,
                   help="retrieval and mteb: prefix of every document")
    p.add_argument("--approximate", action="store_true",
                   help="retrieval: also search a faiss HNSW index and report its recall")
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--precision", choices=["float32", "bfloat16", "int8"], default=None,
                   help="sts, retrieval and mteb: what the model encodes in (default float32, "
                        "the same scores on every CPU)")
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
                        "neither gets FILE.json and FILE.md; mteb: a folder for MTEB's results "
                        "layout (results/ORG__NAME/REVISION/...)")
    p.add_argument("--update-card", action="store_true",
                   help="add the results to the model card of the --model folder")
    return p


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
    if args.benchmark == "mteb":
        return cmd_evaluate_mteb(args)
    if args.data is None:
        raise UsageError(f"evaluate {args.benchmark} needs --data")
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
    if args.precision is not None and args.benchmark not in ("sts", "retrieval"):
        raise UsageError("--precision applies to 'evaluate sts' and 'evaluate retrieval'")
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
    encoder = load_encoder(args.model, args.pooling, args.max_length, args.num_layers)
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
                show_progress=False, precision=args.precision or "float32", **options_truncate)
            result["protocol"]["precision"] = args.precision or "float32"
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
    encoder = load_encoder(args.model, args.pooling, args.max_length, args.num_layers)
    if args.truncate_dim is not None:
        models.truncation.check_truncate_dim(args.truncate_dim, encoder.output_dim)
    with contextlib.redirect_stdout(sys.stderr):  # progress bars are not the result
        result = evaluation.beir.evaluate_retrieval(
            encoder, data, truncate_dim=args.truncate_dim, query_prompt=args.query_prompt,
            corpus_prompt=args.corpus_prompt, batch_size=args.batch_size,
            approximate=args.approximate, precision=args.precision,
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


def cmd_evaluate_mteb(args):
    """`evaluate mteb`: MTEB's evaluators (in a PyTorch child process), its results layout."""
    for name in ("truncate_dim", "seed", "config", "format"):
        if getattr(args, name) is not None:
            raise UsageError(f"--{name.replace('_', '-')} does not apply to 'evaluate mteb'")
    if args.approximate or args.update_card:
        raise UsageError("--approximate and --update-card do not apply to 'evaluate mteb'")
    if args.data is None and not args.tasks:
        raise UsageError("evaluate mteb needs --tasks (MTEB task names) or --data (local data)")
    if args.data is not None and not os.path.exists(args.data):
        raise UsageError(f"data folder not found: {args.data}")
    if args.data is None and args.split is not None:
        raise UsageError("--split applies to local data (--data); MTEB's tasks use their own splits")
    if args.output is not None and os.path.exists(args.output) and not os.path.isdir(args.output):
        raise UsageError(f"--output for mteb is a folder; {args.output} is a file")
    # Checked without importing mteb (which is slow to import): it runs in its own process.
    if not is_installed("mteb"):
        raise missing_dependency("mteb", "evaluate mteb", "mteb")
    from keras_sentemb.evaluation.mteb_evaluation import evaluate_mteb

    prompts = {key: value for key, value in (("query", args.query_prompt),
                                             ("document", args.corpus_prompt)) if value}
    precision = args.precision or "float32"
    encoder = load_encoder(args.model, args.pooling, args.max_length, args.num_layers,
                           precision=precision)
    with contextlib.redirect_stdout(sys.stderr):  # MTEB's messages are not the result
        try:
            result = evaluate_mteb(
                encoder, _split_tasks(args.tasks), data=args.data, split=args.split or "test",
                output=args.output, precision=precision, batch_size=args.batch_size,
                prompts=prompts or None, name=os.path.basename(os.path.normpath(args.model)))
        except ValueError as e:
            raise UsageError(str(e).splitlines()[0]) from None
    if args.output:
        print(f"wrote MTEB's results under {args.output}", file=sys.stderr)
    line = {"model": args.model, "precision": precision, "mteb_model": result["model"],
            "tasks": {task: {"main_score": r["main_score"], "splits": r["splits"]}
                      for task, r in result["tasks"].items()}}
    print(json.dumps(line))
    return 0


def _check_card_folder(model):
    if not os.path.isfile(os.path.join(model, models.presets.SENTEMB_CONFIG)):
        raise UsageError(
            f"--update-card needs a model folder written by keras_sentemb; {model} is not one"
        )


def run(args):
    return cmd_evaluate(args)
