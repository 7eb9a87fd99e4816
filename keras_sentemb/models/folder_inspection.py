"""A model folder is data, never code: what every loader checks before it reads one.

Model folders come from strangers (a hub download, a colleague's disk). Their
JSON files name classes and modules, their weights are HDF5 / safetensors /
npz, their tokenizers are JSON; none of it may make the loader import a
module, run a function, unpickle an object, read a file outside the folder
or allocate memory for sizes no real model has. Every loader calls
`inspect_model_folder` first: `SentenceEncoder.from_preset` on a folder
written by this package, a keras-hub preset folder or a Hugging Face /
sentence-transformers folder, `StaticEncoder.from_preset` and the numpy
static runtime (`keras-sentemb encode --model STATIC_DIR`),
`MultitaskModel.load_from_folder`, and a training run's backup when it
resumes. The checks read only the folder's listing, its small JSON files and
the headers of its weights files, and import nothing heavy (no TensorFlow,
no Keras), so a hostile folder is refused before any model is built.

Refused, in one line naming the file and the reason (`UnsafeFolderError`):

- a link that leads out of the folder (or a path named in a JSON file, such
  as `modules.json`'s `path`, a safetensors index's file names or a backup's
  weights file, that climbs out of it), and anything that is neither a
  regular file nor a folder (a FIFO would block the reader forever). The one
  exception is a Hugging Face hub cache snapshot, whose files are links into
  the same repository's `blobs/` folder;
- a Keras config (`config.json` and `tokenizer.json` of a keras-hub preset,
  the post-processing layer in `sentemb_config.json`)
  naming a class outside the allowed set (`ALLOWED_CLASSES`), by
  `registered_name`, `class_name` or `module`; a `Lambda` layer or a
  serialized function (`__lambda__`: Python bytecode in a config);
- weights held only as a pickle (`pytorch_model.bin`, `*.pt`, `*.ckpt`),
  which runs code when read; an `.npz` / `.npy` file of Python objects; a
  Hugging Face `config.json` that asks for the folder's own code
  (`auto_map`), and a sentence-transformers module other than a
  `Transformer`, `Pooling`, `Dense`, `Normalize` or `Dropout`;
- sizes no real model has (`LIMITS`): a vocabulary, a number of layers,
  heads, a width or a sequence length beyond them, weights files far smaller
  than the config's parameters need, a JSON file or a tokenizer file larger
  than its limit (`FILE_LIMITS`), a folder of more than `MAX_ENTRIES`
  entries.

Pickles that no loader reads (a `pytorch_model.bin` beside
`model.safetensors`, as most Hugging Face folders hold) are left alone: they
are never opened. Plugins (`keras_sentemb.methods` entry points of installed
packages) are the one way to add code.
"""

import json
import os
import stat
import struct
import zipfile
from pathlib import Path


class UnsafeFolderError(ValueError):
    """A model folder refused before loading: one line naming the file and the reason."""


# Sizes no real model has. The largest real ones, for scale: vocabularies of
# 250,002 (XLM-R) to 262,144 (Gemma 3), 48 layers of width 1,024 to 96 of
# 12,288, feed-forward widths up to 49,152, 8,192 to 131,072 positions.
LIMITS = {
    "vocabulary": 2_000_000,
    "layers": 512,
    "heads": 1_024,
    "width": 65_536,
    "intermediate": 262_144,
    "positions": 1_048_576,
    "segments": 1_024,
}
# Largest file sizes read whole, by name (bytes).
FILE_LIMITS = {
    "tokenizer.json": 256 * 2**20,
    "vocab.txt": 64 * 2**20,
    "vocab.json": 64 * 2**20,
    "merges.txt": 64 * 2**20,
    "vocabulary.txt": 64 * 2**20,
    "vocabulary.json": 64 * 2**20,
}
JSON_LIMIT = 16 * 2**20  # any other JSON file
SAFETENSORS_HEADER_LIMIT = 100 * 2**20  # the format's own limit
MAX_ENTRIES = 10_000
MAX_DEPTH = 8
# A weights file holds at least this many bytes per parameter its config declares
# (int8 is 1; float16 / bfloat16 2): fewer means the config does not describe it.
MIN_BYTES_PER_PARAMETER = 0.5

# The Keras classes a model folder's configs may name: registered name ->
# the package its `module` must lie in.
ALLOWED_CLASSES = {
    **{f"keras_hub>{name}": "keras_hub" for name in (
        "BertBackbone", "BertTokenizer", "RobertaBackbone", "RobertaTokenizer",
        "XLMRobertaBackbone", "XLMRobertaTokenizer", "DistilBertBackbone",
        "DistilBertTokenizer", "TextEmbedder")},
    **{f"keras_sentemb>{name}": "keras_sentemb" for name in (
        "Whitening", "GlowFlow", "PostProcessing")},
}
# Keras' own classes (module `keras`, no registered name) a config may name.
KERAS_BUILTINS = ("DTypePolicy", "FloatDTypePolicy", "QuantizedDTypePolicy",
                  "QuantizedFloat8DTypePolicy", "DTypePolicyMap")
CODE_CLASSES = ("Lambda", "__lambda__", "TFOpLambda", "function", "__typespec__")
# The sentence-transformers modules a folder may hold (by the last part of `type`).
ST_MODULES = ("Transformer", "Pooling", "Dense", "Normalize", "Dropout")
# Files that hold pickles (PyTorch's, pickle's and joblib's formats).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib")
SIZE_KEYS = {  # config key -> the limit it is held to
    "vocabulary_size": "vocabulary", "vocab_size": "vocabulary",
    "num_layers": "layers", "num_hidden_layers": "layers",
    "num_heads": "heads", "num_attention_heads": "heads",
    "hidden_dim": "width", "hidden_size": "width", "input_dim": "width", "dim": "width",
    "coupling_width": "width", "intermediate_dim": "intermediate",
    "intermediate_size": "intermediate", "max_sequence_length": "positions",
    "max_position_embeddings": "positions", "max_seq_length": "positions",
    "max_length": "positions", "num_segments": "segments", "type_vocab_size": "segments",
    "levels": "layers", "depth": "layers",
}


def _refuse(path, reason):
    raise UnsafeFolderError(f"{path}: {reason}; loading a model folder never runs code from "
                            "it nor reads outside it, so it is refused.")


def _refuse_size(path, reason):
    raise UnsafeFolderError(f"{path}: {reason}; no real model has that, so it is refused "
                            "before anything is loaded.")


# --------------------------------------------------------------- the listing
def _hub_blobs(root):
    """The `blobs/` folder of a Hugging Face hub cache snapshot `root`, or None."""
    if root.parent.name == "snapshots" and root.parent.parent.name.startswith("models--"):
        return root.parent.parent / "blobs"
    return None


def _inside(path, root):
    return path == root or root in path.parents


def _allowed(target, root):
    """Whether a resolved path lies in the folder `root` (or its hub cache's blobs)."""
    blobs = _hub_blobs(root)
    return _inside(target, root) or (blobs is not None and _inside(target, blobs))


def check_entries(folder):
    """Refuse links out of `folder`, special files and folders too large to be a model.

    Args:
        folder: str or path. The folder.

    Raises:
        UnsafeFolderError: naming the entry.
    """
    root = Path(os.path.realpath(os.fspath(folder)))
    count = 0
    for top, dirs, files in os.walk(root, followlinks=False):
        depth = len(Path(top).relative_to(root).parts)
        if depth > MAX_DEPTH:
            _refuse_size(top, f"folders nested {depth} deep in a model folder")
        for name in dirs + files:
            count += 1
            if count > MAX_ENTRIES:
                _refuse_size(root, f"more than {MAX_ENTRIES} files")
            path = Path(top) / name
            if os.path.islink(path):
                target = Path(os.path.realpath(path))
                if not _allowed(target, root):
                    _refuse(path, f"a link to {target}, outside the folder")
                if not target.exists():
                    continue  # a dangling link: the loader reports the missing file
                mode = os.stat(target).st_mode
            else:
                mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                _refuse(path, "neither a regular file nor a folder (a FIFO, socket or device "
                        "would block or feed the reader)")


def check_inside(folder, relative, named_in):
    """Refuse a path named in a folder's JSON file that is absolute or climbs out of it."""
    root = Path(os.path.realpath(os.fspath(folder)))
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        _refuse(named_in, f"names the file {relative!r}, which is not a relative path")
    target = Path(os.path.realpath(root / relative))
    if os.path.isabs(relative) or not _allowed(target, root) or ".." in Path(relative).parts:
        _refuse(named_in, f"names the path {relative!r}, outside the folder")
    return root / relative


# ---------------------------------------------------------------- JSON files
def check_json_size(path, limit=None):
    """Refuse a JSON file larger than its limit, before it is read.

    Args:
        path: str or path. The file.
        limit: int or None. Largest size in bytes. Defaults to `FILE_LIMITS`
            for its name, else `JSON_LIMIT`.
    """
    path = Path(os.fspath(path))
    limit = limit or FILE_LIMITS.get(path.name, JSON_LIMIT)
    size = path.stat().st_size
    if size > limit:
        _refuse_size(path, f"a JSON file of {size:,} bytes (the limit is {limit:,})")


def parse_json(path, text):
    """`json.loads(text)`; JSON nested deeper than the parser can take is refused in one line.

    Python's parser recurses once per level and stops with `RecursionError`
    (about a thousand levels); no real config nests more than a few.
    """
    try:
        return json.loads(text)
    except RecursionError:
        _refuse_size(path, "JSON nested deeper than the parser can take")


def read_json(path, limit=None):
    """A folder's JSON file, size and nesting bounded; None when it is empty or not JSON.

    Empty and invalid files are left to the loaders, which name them in one
    line ("is empty (expected JSON)", "is not valid JSON (line N)").

    Args:
        path: str or path. The file.
        limit: int or None. Largest size in bytes (see `check_json_size`).

    Raises:
        UnsafeFolderError: too large or too deeply nested.
    """
    path = Path(os.fspath(path))
    check_json_size(path, limit)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        return parse_json(path, text)
    except json.JSONDecodeError:
        return None


def _keras_objects(value):
    """Every dict of a JSON value that names a Keras object (has `class_name`)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "class_name" in item:
                yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def check_keras_config(config, path):
    """Refuse a Keras config naming a class outside `ALLOWED_CLASSES`, a Lambda or a function.

    Args:
        config: the parsed JSON.
        path: the file it came from (for the message).
    """
    for obj in _keras_objects(config):
        name = obj.get("class_name")
        registered = obj.get("registered_name")
        module = obj.get("module")
        if name in CODE_CLASSES or registered in CODE_CLASSES:
            what = "a Lambda layer" if "Lambda" in str(name) else "a serialized function"
            _refuse(path, f"names {what} ({name!r}: Python code in a config)")
        if not isinstance(name, str) or not (module is None or isinstance(module, str)):
            _refuse(path, f"names a class by a non-string ({name!r}, module {module!r})")
        if registered in ALLOWED_CLASSES:
            package = ALLOWED_CLASSES[registered]
            if registered.split(">", 1)[1] != name or (
                    module is not None and module.split(".")[0] != package):
                _refuse(path, f"names the class {registered!r} with class_name {name!r} in "
                        f"module {module!r}, outside the allowed set")
            continue
        if registered in (None, name) and name in KERAS_BUILTINS and (
                module in (None, "keras") or str(module).startswith("keras.")):
            continue
        shown = registered or (f"{module}.{name}" if module else name)
        allowed = ", ".join(sorted(k.split(">")[1] for k in ALLOWED_CLASSES))
        _refuse(path, f"names the class {shown!r} (module {module!r}), outside the allowed set "
                f"({allowed} and Keras' dtype policies)")


def _positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_sizes(config, path):
    """Refuse sizes beyond `LIMITS` (or not positive ints) in a config dict, nested ones too."""
    for obj in _all_dicts(config):
        for key, limit_name in SIZE_KEYS.items():
            if key not in obj or obj[key] is None:
                continue
            value = obj[key]
            if not _positive_int(value):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    _refuse_size(path, f"{key}={value!r} (a size must be a positive int)")
                continue  # not a size (e.g. a string): the loader's own checks apply
            limit = LIMITS[limit_name]
            if value > limit:
                _refuse_size(path, f"{key}={value:,} (more than {limit:,})")


def _all_dicts(value):
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def declared_parameters(config):
    """About how many parameters a Transformer config declares (embeddings + layers), or None."""
    def first(*keys):
        return next((config[k] for k in keys if _positive_int(config.get(k))), None)

    vocab = first("vocabulary_size", "vocab_size")
    layers = first("num_layers", "num_hidden_layers")
    width = first("hidden_dim", "hidden_size")
    inner = first("intermediate_dim", "intermediate_size") or (4 * width if width else None)
    positions = first("max_sequence_length", "max_position_embeddings") or 0
    if None in (vocab, layers, width):
        return None
    return (vocab + positions) * width + layers * (4 * width * width + 2 * width * inner)


def check_weights_size(config, config_path, weights):
    """Refuse a config declaring far more parameters than its weights files can hold.

    Args:
        config: the Transformer config (keras-hub's `config` or Hugging Face's).
        config_path: where it came from.
        weights: list of paths. The weights files (existing ones counted).
    """
    parameters = declared_parameters(config)
    files = [Path(w) for w in weights if Path(w).is_file()]
    if parameters is None or not files:
        return
    held = sum(f.stat().st_size for f in files)
    if held < MIN_BYTES_PER_PARAMETER * parameters:
        names = ", ".join(f.name for f in files[:3]) + (" ..." if len(files) > 3 else "")
        _refuse_size(config_path, f"declares about {parameters:,} parameters, but its weights "
                     f"({names}) hold {held:,} bytes: the config does not describe them")


# ------------------------------------------------------------ weights files
def safetensors_header(path):
    """The header (dict) of a safetensors file, its size bounded; None when unreadable.

    Only the header is read. An unreadable file is left to the loader's own
    one-line checks (truncated, not safetensors).
    """
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return None
        (n,) = struct.unpack("<Q", head)
        if n > path.stat().st_size - 8:
            return None  # truncated or not safetensors: the loader says so
        if n > SAFETENSORS_HEADER_LIMIT:
            _refuse_size(path, f"a safetensors header of {n:,} bytes (the limit is "
                         f"{SAFETENSORS_HEADER_LIMIT:,})")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return None
    return header if isinstance(header, dict) else None


def _safetensors_whole(path):
    """Whether a safetensors file's header parses and its tensors fit in it."""
    header = safetensors_header(path)
    if header is None:
        return False
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    ends = [t["data_offsets"][1] for k, t in header.items()
            if k != "__metadata__" and isinstance(t, dict)
            and isinstance(t.get("data_offsets"), list) and len(t["data_offsets"]) == 2
            and isinstance(t["data_offsets"][1], int)]
    return 8 + n + max(ends, default=0) <= Path(path).stat().st_size


def check_safetensors_shapes(path, header, limits):
    """Refuse tensors of a safetensors header whose dimensions pass `limits`.

    Args:
        limits: dict tensor name -> tuple of limits (None: unbounded), one
            per dimension.
    """
    for name, dims_limits in limits.items():
        tensor = header.get(name)
        if not isinstance(tensor, dict):
            continue
        shape = tensor.get("shape")
        if not isinstance(shape, list):
            continue
        for size, limit in zip(shape, dims_limits):
            if limit is not None and isinstance(size, int) and size > LIMITS[limit]:
                _refuse_size(path, f"the tensor {name!r} of shape {shape} (more than "
                             f"{LIMITS[limit]:,} {limit})")


def _npy_has_objects(f):
    import numpy as np

    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        _, _, dtype = np.lib.format.read_array_header_1_0(f)
    else:
        _, _, dtype = np.lib.format.read_array_header_2_0(f)
    return dtype.hasobject


def check_npz(path):
    """Refuse an `.npz` / `.npy` file holding Python objects (a pickle inside).

    Only the array headers are read; a file that is not one is left to the
    loader's own errors.
    """
    path = Path(path)
    try:
        if path.suffix == ".npy":
            with open(path, "rb") as f:
                objects = _npy_has_objects(f)
            members = [path.name] if objects else []
        else:
            members = []
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    with archive.open(info) as f:
                        if _npy_has_objects(f):
                            members.append(info.filename)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        return
    if members:
        _refuse(path, f"holds Python objects ({members[0]}), a pickle that runs code when read")


# --------------------------------------------------------- folders by kind
def _pickle_only(path):
    _refuse(path, "holds the weights only as a pickle, which runs code when read; convert "
            "them to safetensors (model.safetensors)")


def _check_hf(folder, config_path, config):
    if "auto_map" in config:
        _refuse(config_path, f"asks for the folder's own code (auto_map: "
                f"{sorted(config['auto_map']) if isinstance(config['auto_map'], dict) else '...'})")
    check_sizes(config, config_path)
    index = folder / "model.safetensors.index.json"
    weights = []
    if index.is_file():
        data = read_json(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        for name in sorted(set((weight_map or {}).values())):
            weights.append(check_inside(folder, name, index))
    elif (folder / "model.safetensors").is_file():
        weights.append(folder / "model.safetensors")
    else:
        pickles = [p for p in sorted(folder.iterdir()) if p.suffix in PICKLE_SUFFIXES]
        if pickles:
            _pickle_only(pickles[0])
    if all(_safetensors_whole(w) for w in weights if w.is_file()):  # else: the loader says
        check_weights_size(config, config_path, weights)
    modules_file = folder / "modules.json"
    if modules_file.is_file():
        modules = read_json(modules_file)
        for module in modules if isinstance(modules, list) else ():
            if not isinstance(module, dict):
                continue
            kind = module.get("type", "")
            if not isinstance(kind, str) or not kind.startswith("sentence_transformers.") or (
                    kind.rsplit(".", 1)[-1] not in ST_MODULES):
                _refuse(modules_file, f"names the module type {kind!r}, code outside "
                        f"sentence-transformers' {', '.join(ST_MODULES)} modules")
            if module.get("path"):
                sub = check_inside(folder, module["path"], modules_file)
                dense_config = sub / "config.json"
                if kind.endswith("Dense") and dense_config.is_file():
                    # (Weights only in a pickle: skipped with a warning, never opened.)
                    check_sizes(read_json(dense_config) or {}, dense_config)
    for name in ("sentence_bert_config.json", "tokenizer_config.json",
                 "1_Pooling/config.json", "special_tokens_map.json"):
        if (folder / name).is_file():
            data = read_json(folder / name) or {}
            if name == "sentence_bert_config.json":
                check_sizes(data, folder / name)


def _h5_opens(path):
    """Whether h5py opens `path` (a truncated file is left to the loader's own message)."""
    import h5py

    try:
        with h5py.File(path, "r"):
            return True
    except OSError:
        return False


def _check_keras(folder, sentemb):
    config_path = folder / "config.json"
    weights = [folder / "model.weights.h5", *sorted(folder.glob("model_*.weights.h5"))]
    if config_path.is_file():
        config = read_json(config_path) or {}
        check_keras_config(config, config_path)
        inner = config.get("config") if isinstance(config, dict) else None
        if isinstance(inner, dict):
            check_sizes(inner, config_path)
            # A truncated weights file is left to the loader's own message.
            if all(_h5_opens(w) for w in weights if w.is_file()):
                check_weights_size(inner, config_path, weights)
    # (keras-hub's preprocessor.json and task.json are never read.)
    for name in ("tokenizer.json",):
        path = folder / name
        if path.is_file():
            data = read_json(path, limit=JSON_LIMIT) or {}
            check_keras_config(data, path)
            if isinstance(data, dict) and isinstance(data.get("config"), dict):
                check_sizes(data["config"], path)
                config_file = data["config"].get("config_file")
                if config_file is not None:
                    check_inside(folder, config_file, path)
    assets = folder / "assets"
    if assets.is_dir():
        for path in sorted(assets.rglob("*")):
            limit = FILE_LIMITS.get(path.name)
            if limit is not None and path.is_file() and path.stat().st_size > limit:
                _refuse_size(path, f"a file of {path.stat().st_size:,} bytes (the limit is "
                             f"{limit:,})")
    if sentemb:
        path = folder / "sentemb_config.json"
        stored = read_json(path) or {}
        check_keras_config(stored, path)
        check_sizes(stored, path)
    for path in sorted(folder.glob("*.npz")) + sorted(folder.glob("*.npy")):
        check_npz(path)


def _check_static(folder):
    from keras_sentemb.models import static_files

    path = folder / static_files.STATIC_CONFIG
    check_sizes(read_json(path) or {}, path)
    table = folder / static_files.TABLE_FILE
    if table.is_file():
        header = safetensors_header(table)
        if header is not None:
            check_safetensors_shapes(table, header, {
                "embeddings": ("vocabulary", "width"), "weights": ("vocabulary",),
                "keep": ("vocabulary",), "scales": ("vocabulary",),
                "pca_mean": ("width",), "pca_components": ("width", "width")})
    tokenizer = folder / static_files.TOKENIZER_FILE
    if tokenizer.is_file():
        size = tokenizer.stat().st_size
        if size > FILE_LIMITS["tokenizer.json"]:
            _refuse_size(tokenizer, f"a tokenizer of {size:,} bytes (the limit is "
                         f"{FILE_LIMITS['tokenizer.json']:,})")


def folder_kind(folder):
    """`"static"`, `"sentemb"`, `"huggingface"`, `"keras_hub"` or None, from marker files only."""
    folder = Path(folder)
    if (folder / "sentemb_static.json").is_file():
        return "static"
    if (folder / "sentemb_config.json").is_file():
        return "sentemb"
    if (folder / "config.json").is_file():
        config = read_json(folder / "config.json")
        if isinstance(config, dict) and "model_type" in config:
            return "huggingface"
        if isinstance(config, dict) and ("registered_name" in config or "class_name" in config):
            return "keras_hub"
    return None


def inspect_model_folder(folder, kind=None):
    """Check a model folder before any of it is loaded (see the module docstring).

    Args:
        folder: str or path. The folder.
        kind: str or None. `"sentemb"`, `"keras_hub"`, `"huggingface"` or
            `"static"`; None reads it from the folder's marker files.

    Raises:
        UnsafeFolderError: one line naming the file and the reason.

    Examples:

    ```python
    inspect_model_folder("downloaded_model")   # raises for a hostile folder
    ```
    """
    folder = Path(os.fspath(folder)).expanduser()
    check_entries(folder)
    kind = kind or folder_kind(folder)
    if kind == "static":
        _check_static(folder)
    elif kind in ("sentemb", "keras_hub"):
        _check_keras(folder, sentemb=kind == "sentemb")
    elif kind == "huggingface":
        config_path = folder / "config.json"
        config = read_json(config_path)
        if isinstance(config, dict):
            _check_hf(folder, config_path, config)
    for path in sorted(folder.glob("*.json")):
        if path.is_file():
            check_json_size(path)


def inspect_backup_folder(folder, weights_name=None, named_in=None):
    """Check a training backup before resuming from it: its entries, and its weights file's name.

    Args:
        folder: str or path. The backup folder.
        weights_name: str or None. The weights file its metadata names.
        named_in: str or path. The metadata file that names it.
    """
    check_entries(folder)
    if weights_name is not None:
        check_inside(folder, weights_name, named_in or folder)
    for path in sorted(Path(folder).rglob("*.npz")):
        check_npz(path)
