"""Why training data could not be read, in one line that names the file or the path.

TensorFlow reports a file it cannot read as an `OpError` whose message is
written for its own developers: a graph node, a stack of Python frames, a
libcurl code. Those reach a user who streams training data when

- a remote path (`gs://`, `s3://`, `hdfs://`) cannot be listed or opened:
  no network, no credentials, no such bucket, or a file system this
  TensorFlow does not have (`remote_errors`, around `tf.io.gfile` calls);
- a file cannot be read while tf.data reads it: a TFRecord that fails its
  checksum, data that is not gzip, a file that vanished after it was listed,
  a reader that raised (`reading`, around the iteration; `read_error` for
  an error already raised).

Each becomes a `DataError`, a `ValueError` whose message is one line:
`cannot read PATH: WHY`. Where a source of many files (a glob) holds a
corrupt one, TensorFlow's message names no file; the files the source
listed (`remember_files`) are then read one by one and the line names the
corrupt one (`cannot read FILE (of GLOB): corrupt data: ...`). Errors that do not come from reading data (a bug
in a training step, say) pass through unchanged.
"""

import collections
import contextlib
import re

import tensorflow as tf


class DataError(ValueError):
    """Training data that cannot be used: unreadable, or too many rows skipped (one line)."""


# How a message names a source of many files -> its files (see `remember_files`).
_FILES = collections.OrderedDict()
_REMEMBERED = 64


def remember_files(names, files):
    """Record that a source named by each of `names` (its glob, its description) reads `files`.

    Only sources of several files are kept (the most recent `_REMEMBERED`);
    `read_error` uses them to name the corrupt file of a glob.
    """
    files = tuple(files)
    if len(files) < 2:
        return
    for name in names:
        _FILES[str(name)] = files
        _FILES.move_to_end(str(name))
    while len(_FILES) > _REMEMBERED:
        _FILES.popitem(last=False)


def _record_reader(path):
    """A dataset that reads every record of `path` (TFRecord or gzip), or None for other files."""
    gz = path.endswith(".gz")
    stem = path[:-3] if gz else path
    if stem.endswith((".tfrecord", ".tfrecords", ".tfrec")):
        return tf.data.TFRecordDataset(path, compression_type="GZIP" if gz else "")
    if gz:
        return tf.data.TextLineDataset(path, compression_type="GZIP")
    return None


def corrupt_member(where):
    """The first file of the many-file source `where` whose records fail to read, or None."""
    for name in [where, *str(where).split(", ")]:
        files = _FILES.get(str(name))
        if files is not None:
            break
    else:
        return None
    for path in files:
        records = _record_reader(path)
        if records is None:
            continue
        try:
            for _ in records.batch(4096):
                pass
        except tf.errors.DataLossError:
            return path
        except tf.errors.OpError:
            continue
    return None


# libcurl's codes for a network that is not there (curl/curl.h).
_CURL_REASONS = {
    "5": "cannot resolve the proxy (no network?)",
    "6": "cannot resolve the host {host} (no network?)",
    "7": "cannot connect to {host} (no network?)",
    "28": "the connection to {host} timed out",
    "35": "the TLS handshake with {host} failed",
}
_SCHEMES_IN_TENSORFLOW_IO = ("s3", "hdfs", "viewfs", "har", "http", "https", "az")
# What the iterator of a tf.data pipeline is called in the errors it raises.
_ITERATOR_NODES = ("IteratorGetNext", "MultiDeviceIteratorGetNextFromShard",
                   "OptionalFromValue", "IteratorGetNextAsOptional")


def _scheme(path):
    return path.split("://", 1)[0] if "://" in str(path) else None


def tensorflow_message(error):
    """The sentence of an `OpError` that says what went wrong, without graph and stack noise.

    A reader's own Python exception (raised inside `tf.py_function` or a
    generator) is found in the traceback TensorFlow wraps it in, and its
    message is returned as it was written.

    Args:
        error: `tf.errors.OpError`.

    Returns:
        str, one line.
    """
    text = getattr(error, "message", None) or str(error)
    own = re.findall(r"(?:^|\s)(?:\w+\.)*DataError: (.+)", text)
    if own:
        return own[-1].strip()
    raised = re.findall(r"^(?:\w+\.)*\w*(?:Error|Exception): (.+)$", text, flags=re.M)
    text = re.sub(r"\{\{function_node [^}]*\}\}", "", text)
    text = re.sub(r"\[\[\{\{node [^}]*\}\}\]\]", "", text)
    text = re.sub(r"\[Op:[^\]]*\]( name: ?\S*)?", "", text)
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith(
        ("Graph execution error", "Detected at node", "File \"", "Traceback"))
        and not line.endswith(":")]
    if raised and (not lines or "py_function" in text or "generator" in text.lower()):
        return raised[-1].strip()
    return lines[-1] if lines else type(error).__name__


def remote_reason(error, path):
    """Why a `tf.io.gfile` call on `path` failed, in words (one line)."""
    text = tensorflow_message(error)
    whole = getattr(error, "message", None) or str(error)
    curl = re.search(r"libcurl code (\d+)", whole)
    if curl:
        details = whole.split("error details:")[-1].strip().splitlines()[0]
        host = re.search(r"host:? ([\w.-]+)", details)
        reason = _CURL_REASONS.get(curl.group(1))
        if reason is not None:
            return reason.format(host=host.group(1) if host else "the server")
        return details or text
    if isinstance(error, tf.errors.UnimplementedError):
        scheme = _scheme(path)
        hint = (" (TensorFlow reads it through tensorflow-io: pip install tensorflow-io)"
                if scheme in _SCHEMES_IN_TENSORFLOW_IO else "")
        return f"this TensorFlow has no {scheme}:// file system{hint}"
    if isinstance(error, (tf.errors.PermissionDeniedError, tf.errors.UnauthenticatedError)):
        return f"permission denied (no credentials, or none that may read it): {text}"
    if isinstance(error, tf.errors.NotFoundError):
        return f"not found (no such bucket, folder or file): {text}"
    return text


def _load_tensorflow_io(error, path):
    """Import tensorflow-io once when it would register the missing file system of `path`."""
    if not isinstance(error, tf.errors.UnimplementedError):
        return False
    if _scheme(path) not in _SCHEMES_IN_TENSORFLOW_IO:
        return False
    try:
        import tensorflow_io  # noqa: F401  (registers s3://, hdfs://, ...)
    except ImportError:
        return False
    return True


def gfile_call(function, path, what="read"):
    """`function(path)` (a `tf.io.gfile` call), its failure as a one-line `DataError`.

    A path whose file system comes with tensorflow-io (`s3://`, `hdfs://`)
    is tried again once tensorflow-io is imported, when it is installed.

    Args:
        function: callable taking `path`.
        path: str. A local or remote path or glob.
        what: str. The verb of the message (`"read"`, `"list"`).

    Returns:
        What `function` returns.

    Raises:
        DataError: `cannot {what} PATH: WHY`.
    """
    try:
        return function(path)
    except tf.errors.OpError as error:
        if _load_tensorflow_io(error, path):
            return gfile_call(function, path, what)
        raise DataError(f"cannot {what} {path}: {remote_reason(error, path)}") from None


def from_data_pipeline(error):
    """Whether `error` was raised while a tf.data iterator read its next element."""
    if not isinstance(error, tf.errors.OpError):
        return False
    text = getattr(error, "message", None) or str(error)
    return any(node in text for node in _ITERATOR_NODES)


def read_error(error, where):
    """`error` (raised while training data was read) as a one-line `DataError`, or None.

    Args:
        error: BaseException.
        where: str. How to name what was being read (a file, a glob).

    Returns:
        `DataError` or None (not an error of reading data).
    """
    if isinstance(error, DataError):
        return error
    if not from_data_pipeline(error):
        return None
    reason = tensorflow_message(error)
    if isinstance(error, tf.errors.DataLossError):
        reason = f"corrupt data: {reason}"
        member = corrupt_member(where)
        if member is not None:
            return DataError(f"cannot read {member} (of {where}): {reason}")
    elif isinstance(error, tf.errors.NotFoundError):
        path, _, why = reason.partition("; ")
        reason = (f"the file is gone ({why or reason})" if path == where
                  else f"a file is gone: {reason}")
    elif isinstance(error, tf.errors.FailedPreconditionError) or "libcurl" in reason:
        reason = remote_reason(error, where)
    if reason.startswith("cannot read "):
        return DataError(reason)
    return DataError(f"cannot read {where}: {reason}")


@contextlib.contextmanager
def reading(where):
    """Turn the errors of reading training data inside the block into one-line `DataError`s.

    Args:
        where: str. How messages name what is read (a file, a glob).

    Raises:
        DataError: the block failed to read data.
    """
    try:
        yield
    except tf.errors.OpError as error:
        mapped = read_error(error, where)
        if mapped is None:
            raise
        raise mapped from None
