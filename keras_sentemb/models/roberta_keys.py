"""Reading RoBERTa folders whose weights have no `roberta.` prefix.

keras-hub's RoBERTa converter asks for `roberta.`-prefixed keys, as a
`RobertaForMaskedLM` checkpoint (roberta-base) stores them. A `RobertaModel`
saved by transformers or sentence-transformers (and the folders
`export_huggingface` writes) stores them without a prefix. `prefixed_view`
yields a temporary view of such a folder: links to its files and a copy of
its weights under prefixed names.
"""

import contextlib
import os
import tempfile
from pathlib import Path

from safetensors.numpy import load_file
from safetensors.numpy import save_file

PREFIX = "roberta."


@contextlib.contextmanager
def prefixed_view(folder, config):
    """`folder`, or a temporary view of it with `roberta.`-prefixed weight names."""
    weights = Path(folder) / "model.safetensors"
    if config.get("model_type") != "roberta" or not weights.is_file():
        yield folder
        return
    tensors = load_file(str(weights))
    if any(key.startswith(PREFIX) for key in tensors):
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="sentemb-roberta-") as view:
        view = Path(view)
        for entry in Path(folder).iterdir():
            if entry.name != weights.name:
                os.symlink(entry.resolve(), view / entry.name)
        save_file({PREFIX + k: v for k, v in tensors.items()}, str(view / weights.name))
        del tensors
        yield str(view)
