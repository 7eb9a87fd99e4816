"""Cross-lingual frozen-teacher contrastive learning: the paper's two-step pipeline.

Step A: a frozen English teacher supervises a Chinese student on en-zh
translation pairs (memory queue, learnable temperature), with the student's
vocabulary first extended by the characters it maps to [UNK] (their new
embedding rows start from the English tokens they align with, `--vocabulary-init
aligned`), the checkpoint selected on a held-out dev split by retrieval.
Optionally the Chinese student is then fine-tuned with supervised SimCSE on
NLI triplets in Chinese (`--zh-nli-file`, none is bundled).
Step B: that Chinese student, frozen, supervises an English student on the
same pairs reversed (the paper's final model), selected on STS-B dev;
optionally fine-tuned with supervised SimCSE on English NLI triplets
(`--nli`). Baseline: unsupervised SimCSE on the English side of the same
pairs with the same steps, batch and max length (`--simcse-baseline`).

Splits: step A holds out `--eval-size` test pairs (retrieval reported before
and after, both directions) and `--dev-size` dev pairs (checkpoint selection);
step B and the SimCSE baseline train on step A's training + dev pairs only,
so step A's test pairs are never trained on.

    python recipes/parallel.py --smoke                # every step, tiny, CPU
    python recipes/parallel.py --steps 300 --batch-size 32 --max-length 48 \\
        --learning-rate 5e-5 --step-b --simcse-baseline --out /tmp/parallel_run
    python recipes/parallel.py --step-a-model /tmp/parallel_run/A_frozen_teacher \\
        --step-b --simcse-baseline ...            # reuse a trained step-A student

References:
    - Learning Monolingual Sentence Embeddings with Large-scale Parallel
      Translation Datasets (ACL ARR 2022), https://openreview.net/forum?id=_vXqKfxoJfN
"""

import functools
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paper import (  # noqa: E402
    Setting, add_row_args, emit_row, paper_parser, paper_value, preset_table, table_row,
)
from keras_sentemb.kernels.onednn_opts import enable_onednn_opts  # noqa: E402
from keras_sentemb.quiet_startup import run_quietly  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"  # docs/data.md says how to fetch each file


# The paper's settings (ACL ARR 2022, openreview _vXqKfxoJfN; no official code is public). The
# defaults are its step-B setting for BERT-base (section 4.2.2, Table 6); each source quotes the
# section or table, and says where this recipe differs.
@functools.cache
def paper():
    """The paper's main setting: the `parallel` method's `bert-base` preset (values and
    sources), then what is this recipe's own (data, protocol, evaluation)."""
    return preset_table("parallel", "bert-base", [
        "model",
        "learning_rate",
        "batch_size",
        "queue_size",
        "max_length",
        "teacher",
        "temperature",
        "init_temperature",
        ("schedule", Setting("cosine", "sections 4.2.1 / 4.2.2: 'a cosine learning rate scheduler' "
                                      "(fit_parallel: 10% warm-up + cosine)")),
        "eval_every",
        ("nli_learning_rate", Setting(1e-5, "section 4.2.3: 'we set the learning rate to 1e-5, batch "
                                           "size to 128, dropout to 0.1, temperature to 0.05, and "
                                           "input length to 50' (base models)")),
        ("nli_batch_size", Setting(128, "section 4.2.3 (base models; large models: 96)")),
        ("nli_mlp", Setting("keep", "Appendix C: 'we adopt the [CLS] with MLP as the fine-tuned "
                                   "models pooling method, as suggested by SimCSE': the NLI head is "
                                   "trained and kept for evaluation (fit_simcse mlp='keep')")),
        ("track_every", Setting(100, "section 4.4.2 / Figure 4A and Appendix A: alignment and "
                                    "uniformity of the target encoder on STS-B dev pairs, "
                                    "'checkpoints every 100 training steps'")),
        ("objective_comparison", Setting("lr 2e-4, batch 128, queue 0", "section 4.4.2 / Table 5: "
                                        "'batch size is 128, learning rate is 2e-4, queue size is "
                                        "0' (--preset objective-comparison)")),
        ("evaluation", Setting("7 STS + 7 transfer", "section 4.3 / Tables 2-3: 'seven transfer and "
                                                    "seven STS tasks by SentEval'; the model's own "
                                                    "pooling ([CLS], Appendix C)")),
    ])


def __getattr__(name):
    """`PAPER`, the table, built on first use (it imports the method, and TensorFlow)."""
    if name == "PAPER":
        return paper()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def presets():
    """The `--preset` choices: each of the method's presets, as what it changes from `main`."""
    from keras_sentemb.methods.registry import get_method

    named = get_method("parallel").presets
    main = named["bert-base"].values
    return {"main": {}, **{name: {k: v for k, v in p.values.items() if main.get(k) != v}
                           for name, p in named.items() if name != "bert-base"}}


DIFFERENCES = [
    "data: the paper's large-scale translation pairs are not available; the closest "
    "default data is Tatoeba en-zh (data/cmn-eng.tsv, about 29k pairs; docs/data.md).",
    "NLI: supervised SimCSE uses the SNLI dev+test triplets fallback (5.7k), not SNLI/MNLI train.",
    "steps A and B share one setting here (step B's BERT-base values); the paper trains step A "
    "with the large-model values (lr 5e-5, batch 200, queue 200,000, 2 epochs).",
    "step A's frozen teacher is --teacher (default: all-MiniLM-L6-v2, a trained 384-d English "
    "encoder), not SimCSE-RoBERTa-large; a teacher of another size than the student gives the "
    "student a kept tanh head to the teacher's space (fit_parallel).",
    "evaluation: the row scores the final English student (step B, after NLI with --nli) with "
    "its own pooling; the 7 STS tasks need --sts-data, the 7 transfer tasks --transfer-data.",
    "--smoke: the default model, 8 steps, batch 8, queue 64, every step on a tenth of the "
    "pairs: a CPU check, not a result.",
]



def _report(student):
    """The run's record, without the per-step alignment/uniformity history."""
    report = student.training_report
    out = dict(report.extras, pooling=report.pooling, pooling_reason=report.pooling_reason,
               data=report.data, selection=report.selection, seconds=report.seconds)
    out.pop("alignment_uniformity", None)
    return out


ROW_PAPER = ("Learning Monolingual Sentence Embeddings with Large-scale Parallel Translation "
             "Datasets, Table 2 (7 STS tasks) + Table 3 (7 transfer tasks)")
TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]


def build_parser():
    p = paper_parser(__doc__.split("\n\n")[0], paper(), DIFFERENCES)
    p.add_argument("--pairs", default=str(DATA / "cmn-eng.tsv"))
    p.add_argument("--model", default=paper_value(paper(), "model"))
    p.add_argument("--teacher", default=paper_value(paper(), "teacher"),
                   help="step A's frozen English teacher: a trained sentence encoder")
    p.add_argument("--preset", default="main", choices=sorted(presets()),
                   help="objective-comparison: lr 2e-4, batch 128, queue 0 (explicit flags win)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=paper_value(paper(), "batch_size"))
    p.add_argument("--max-length", type=int, default=paper_value(paper(), "max_length"))
    p.add_argument("--learning-rate", type=float, default=paper_value(paper(), "learning_rate"))
    p.add_argument("--queue-size", type=int, default=paper_value(paper(), "queue_size"))
    p.add_argument("--temperature", default=paper_value(paper(), "temperature"))
    p.add_argument("--init-temperature", type=float,
                   default=paper_value(paper(), "init_temperature"),
                   help="start of the learnable temperature")
    p.add_argument("--pooling", default="auto",
                   help="the students' pooling; auto: the model's own, else the paper's cls")
    p.add_argument("--mlp", default="auto", choices=["auto", "train", "none"])
    p.add_argument("--eval-size", type=int, default=1000, help="step A's held-out test pairs")
    p.add_argument("--dev-size", type=int, default=500, help="step A's held-out dev pairs")
    p.add_argument("--eval-every", type=int, default=paper_value(paper(), "eval_every"),
                   help="dev evaluation interval (best checkpoint kept)")
    p.add_argument("--extend-vocabulary", type=int, default=10000,
                   help="at most this many new student tokens (0: keep the vocabulary)")
    p.add_argument("--vocabulary-init", default="aligned",
                   choices=["aligned", "mean", "pieces", "normal"])
    p.add_argument("--vocabulary-min-count", type=int, default=2)
    p.add_argument("--modes", default="frozen_teacher",
                   help="comma-separated step-A modes (frozen_teacher, dual, shared)")
    p.add_argument("--step-a-model", default=None,
                   help="a trained step-A student folder: skip step A's training")
    p.add_argument("--zh-nli-file", default=None,
                   help="Chinese NLI triplets (sent0,sent1,hard_neg) to fine-tune the step-A student")
    p.add_argument("--step-b", action="store_true", help="run step B (zh student frozen -> en student)")
    p.add_argument("--simcse-baseline", action="store_true",
                   help="unsupervised SimCSE on the English side, same steps/batch/max length")
    p.add_argument("--nli", action="store_true", help="supervised SimCSE finetune of the step-B student")
    p.add_argument("--nli-file", default=str(DATA / "nli_for_simcse.csv"))
    p.add_argument("--nli-steps", type=int, default=200)
    p.add_argument("--nli-learning-rate", type=float,
                   default=paper_value(paper(), "nli_learning_rate"))
    p.add_argument("--nli-batch-size", type=int, default=paper_value(paper(), "nli_batch_size"))
    p.add_argument("--nli-mlp", default=paper_value(paper(), "nli_mlp"),
                   choices=["keep", "train", "none"],
                   help="keep: the NLI step's MLP head stays for evaluation")
    p.add_argument("--track-every", type=int, default=paper_value(paper(), "track_every"),
                   help="steps between step B's alignment/uniformity points on STS-B dev")
    p.add_argument("--sts-limit", type=int, default=None, help="use the first N STS-B pairs")
    p.add_argument("--out", default="/tmp/parallel_recipe",
                   help="folder for the models, results.json and row.json")
    add_row_args(p, transfer=True, out=False)
    p.add_argument("--smoke", action="store_true", help="tiny CPU run of every step on the default model")
    return p


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    chosen = presets()[args.preset]
    if chosen:  # the preset's values become defaults; explicit flags still win
        parser.set_defaults(**chosen)
        args = parser.parse_args(argv)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.smoke:
        if args.model == paper_value(paper(), "model"):
            args.model = "default"
        args.steps, args.batch_size, args.max_length, args.eval_every = 8, 8, 32, 4
        args.queue_size, args.eval_size, args.dev_size, args.sts_limit = 64, 100, 50, 200
        args.step_b = args.nli = args.simcse_baseline = True
        args.nli_steps, args.nli_batch_size, args.track_every = 4, 8, 4

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from keras_sentemb.api import fit_parallel
    from keras_sentemb.api import fit_simcse
    from keras_sentemb.data.parallel import load_parallel_pairs
    from keras_sentemb.data.parallel import split_pairs
    from keras_sentemb.data.resources import bundled_sts_dir
    from keras_sentemb.evaluation.readers import read_stsb
    from keras_sentemb.evaluation.retrieval import evaluate_bitext_retrieval
    from keras_sentemb.evaluation.sts_alignment_uniformity_tracker import (
        STSAlignmentUniformityTracker)
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.models.vocabulary import unknown_token_share
    from keras_sentemb.pipelines.callbacks import sts_spearman

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    en_student = nli_student = None
    sts = {split: read_stsb(bundled_sts_dir(), split)[: args.sts_limit] for split in ("dev", "test")}

    def stsb(encoder):
        return {split: round(sts_spearman(encoder, pairs), 2) for split, pairs in sts.items()}

    pairs = load_parallel_pairs(args.pairs)
    if args.smoke:
        pairs = pairs[::10]
    train_a, heldout = split_pairs(pairs, eval_size=args.eval_size)  # what fit_parallel holds out
    results = {"args": vars(args), "sts_pairs": {k: len(v) for k, v in sts.items()},
               "pairs": len(pairs), "step_a_test_pairs": len(heldout)}
    base = SentenceEncoder.from_preset(args.model)
    # Step A's frozen English teacher: a trained sentence encoder (section 4.2.1), never the
    # untrained student.
    teacher = SentenceEncoder.from_preset(args.teacher)
    results["teacher"] = {"model": args.teacher, "output_dim": teacher.output_dim,
                          "stsb": stsb(teacher)}

    def source_retrieval(student):
        if student.output_dim != teacher.output_dim:
            return f"n/a: {student.output_dim}-d student, {teacher.output_dim}-d teacher"
        return evaluate_bitext_retrieval(teacher, student, heldout, max_length=args.max_length)

    results["initial"] = {
        "stsb": stsb(base),
        "retrieval": source_retrieval(base),
        "unk_share_test_zh": unknown_token_share(base, [b for _, b in heldout]),
        "unk_share_test_en": unknown_token_share(base, [a for a, _ in heldout]),
    }
    common = dict(
        steps=args.steps, batch_size=args.batch_size, max_length=args.max_length,
        learning_rate=args.learning_rate, queue_size=args.queue_size,
        temperature=args.temperature, init_temperature=args.init_temperature,
        pooling=args.pooling, mlp=args.mlp,
        eval_every=args.eval_every, verbose=2,
    )

    def save_results():
        with open(out / "results.json", "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, ensure_ascii=False)

    # ---------------------------------------------------------------- step A
    students = {}
    if args.step_a_model:
        zh = SentenceEncoder.from_preset(args.step_a_model)
        students["frozen_teacher"] = zh
        results["A_given"] = {
            "model": args.step_a_model,
            "retrieval": source_retrieval(zh),
        }
    else:
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            student = fit_parallel(
                pairs, model=base, teacher=teacher, mode=mode, eval_size=args.eval_size, dev_size=args.dev_size,
                extend_vocabulary=args.extend_vocabulary, vocabulary_init=args.vocabulary_init,
                vocabulary_min_count=args.vocabulary_min_count, output=str(out / f"A_{mode}"),
                plot=str(out / f"A_{mode}_alignment_uniformity.png"), **common,
            )
            results[f"A_{mode}"] = dict(_report(student), stsb=stsb(student))
            students[mode] = student
            logging.info("step A %s: %s", mode, json.dumps(results[f"A_{mode}"]))
            save_results()
    if args.zh_nli_file and "frozen_teacher" in students:
        zh_nli = fit_simcse(
            args.zh_nli_file, model=students["frozen_teacher"], mode="sup", mlp=args.nli_mlp,
            steps=args.nli_steps, batch_size=args.nli_batch_size, max_length=args.max_length,
            learning_rate=args.nli_learning_rate, dev=None, output=str(out / "A_nli"), verbose=2,
        )
        results["A_nli"] = {"retrieval": source_retrieval(zh_nli), "nli_steps": args.nli_steps}
        students["frozen_teacher"] = zh_nli

    # ---------------------------------------------------------------- step B
    reversed_pairs = [(b, a) for a, b in train_a]  # zh -> en, never step A's test pairs
    if args.step_b:
        if "frozen_teacher" not in students:
            build_parser().error("--step-b needs the frozen_teacher step A (in --modes or --step-a-model)")
        # Figure 4A: alignment and uniformity of the English student on STS-B dev pairs.
        tracker = STSAlignmentUniformityTracker(sts["dev"], every=args.track_every)
        en_student = fit_parallel(
            reversed_pairs, model=args.model, teacher=students["frozen_teacher"],
            dev="stsb", eval_size=min(args.eval_size, len(reversed_pairs) // 10),
            output=str(out / "B_frozen_teacher"), track_alignment=False, callbacks=[tracker],
            **common,
        )
        tracker.plot(str(out / "B_alignment_uniformity_stsb.png"))
        results["B_frozen_teacher"] = dict(_report(en_student), stsb=stsb(en_student),
                                           alignment_uniformity_stsb_dev=tracker.history)
        save_results()
        if args.nli:
            # Supervised SimCSE on NLI triplets (premise, entailment, contradiction).
            nli_student = fit_simcse(
                args.nli_file, model=en_student, mode="sup", mlp=args.nli_mlp,
                steps=args.nli_steps, batch_size=args.nli_batch_size,
                learning_rate=args.nli_learning_rate, max_length=args.max_length,
                output=str(out / "B_nli"), verbose=2,
            )
            results["B_nli"] = {"stsb": stsb(nli_student), "nli_steps": args.nli_steps,
                                "pooling": nli_student.training_report.pooling,
                                "mlp": nli_student.training_report.resolved["mlp"],
                                "selection": nli_student.training_report.selection}
            save_results()

    # ------------------------------------------------- SimCSE, same budget
    if args.simcse_baseline:
        english = sorted({b for _, b in reversed_pairs})
        t0 = time.time()
        simcse = fit_simcse(
            english, model=args.model, steps=args.steps, batch_size=args.batch_size,
            max_length=args.max_length, learning_rate=args.learning_rate, pooling=args.pooling,
            mlp=args.mlp, eval_every=args.eval_every, output=str(out / "simcse_english"), verbose=2,
        )
        results["simcse_english"] = {
            "stsb": stsb(simcse), "sentences": len(english), "seconds": time.time() - t0,
            "pooling": simcse.training_report.pooling,
            "selection": simcse.training_report.selection,
        }
    save_results()
    print(json.dumps(results, indent=2, ensure_ascii=False))
    english = nli_student if args.step_b and args.nli else en_student if args.step_b else None
    protocol = {"name": args.preset, "model": args.model, "teacher": args.teacher,
                "init_temperature": args.init_temperature, "nli_mlp": args.nli_mlp,
                "steps": args.steps,
                "batch_size": args.batch_size, "learning_rate": args.learning_rate,
                "queue_size": args.queue_size,
                "model_scored": "B_nli" if args.step_b and args.nli else "B_frozen_teacher"}
    if english is None:
        row = {"paper": ROW_PAPER, "protocol": {**protocol, "model_scored": None,
               "note": "no English student: run step B (--step-b)"}, "tasks": {}, "avg": None}
    else:
        row = table_row(english, args, ROW_PAPER, protocol, transfer_tasks=TRANSFER_TASKS)
    emit_row(row, args)
    return 0


if __name__ == "__main__":
    enable_onednn_opts()  # before TensorFlow starts: its oneDNN kernels on AVX2-only CPUs
    sys.exit(run_quietly(main))  # TensorFlow's start-up notices hidden unless --verbose
