"""The `keras-sentemb` command line (also `python -m keras_sentemb`).

```
keras-sentemb encode   --model MODEL --input FILE.txt --output FILE.npy
                       [--pooling cls|mean|max|mean_last2|first_last|layer:K|sbert_wk[:S[:W]]]
                       [--batch-size N] [--max-length N] [--normalize]
                       [--precision auto|float32|bfloat16|int8] [--calibration FILE]
keras-sentemb encode   --model MODEL --input FILE_OR_GLOB --output DIR/ --shard-size N
                       [--shard-format npy|tfrecord] [...]      # streaming, resumable
keras-sentemb evaluate sts --model MODEL --data DIR [--pooling ...] [--format markdown]
keras-sentemb evaluate transfer --model MODEL --data DIR
                       [--tasks MR,CR,SUBJ,MPQA,SST2,TREC,MRPC] [--pooling P] [--seed S]
keras-sentemb evaluate all --model MODEL --data DIR [--output REPORT]
keras-sentemb evaluate retrieval --model MODEL --data BEIR_DIR [--split test|dev]
                       [--truncate-dim K] [--query-prompt P] [--corpus-prompt P]
                       [--approximate] [--format json|markdown] [--output FILE]
keras-sentemb evaluate mteb --model MODEL --tasks T1,T2 [--output DIR]
                       [--data DIR [--split S]] [--precision P] [--query-prompt P]
keras-sentemb train METHOD --model MODEL --train-file FILE --output DIR
                       [--steps N] [--batch-size N] [--learning-rate LR]
                       [--max-length N] [method options]
                       # METHOD: a registered method (`keras_sentemb.list_methods()`,
                       #         `keras-sentemb train --help`)
keras-sentemb analyze  alignment-uniformity|token-removal|map|layers|training --model MODEL
                       [--compare MODEL2] --output DIR
                       # training: loss and dev score per step from MODEL/training_report.json
keras-sentemb export   --model MODEL --output saved_models/NAME [--version N]
                       [--format saved-model|sentence-transformers|transformers]
                       [--overwrite] [--dtype float32|float16|bfloat16] [--tolerance T]
                       [--truncate-dim K] [--precision float32|bfloat16|int8]
                       [--calibration FILE]      # what the SavedModel computes in
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
dependency (with the pip command that installs it). Anything else is a bug:
one line naming the exception (its traceback with `--verbose`), exit status
70.

One module per command (`encode`, `evaluate`, `train`, `analyze`,
`export`), each adding its own parser and running it; `program` builds the
parser, starts TensorFlow quietly and maps failures to exit statuses
(`errors`); `common` holds what the commands share.

`evaluate ... --output FILE` writes exactly FILE, in the format its
extension (.json, .md) or `--format` names; for sts, transfer and all, a
FILE with neither gets FILE.json and FILE.md.
"""

from keras_sentemb.cli.analyze import ANALYSES  # noqa: F401
from keras_sentemb.cli.common import FIXED_RUN_ARGUMENTS  # noqa: F401
from keras_sentemb.cli.common import METHODS  # noqa: F401
from keras_sentemb.cli.common import UsageError  # noqa: F401
from keras_sentemb.cli.errors import one_line_error  # noqa: F401
from keras_sentemb.cli.evaluate import report_files  # noqa: F401
from keras_sentemb.cli.program import EXIT_INTERNAL_ERROR  # noqa: F401
from keras_sentemb.cli.program import EXIT_USER_ERROR  # noqa: F401
from keras_sentemb.cli.program import KERAS_IMPORT_TIME_EXTRAS  # noqa: F401
from keras_sentemb.cli.program import build_parser  # noqa: F401
from keras_sentemb.cli.program import main  # noqa: F401
from keras_sentemb.cli.program import run  # noqa: F401
from keras_sentemb.cli.train import method_option_parser  # noqa: F401
from keras_sentemb.cli.train import train_help  # noqa: F401
