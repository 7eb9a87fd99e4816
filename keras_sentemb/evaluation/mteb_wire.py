"""The two processes of an MTEB evaluation, and the pipe between them.

MTEB runs on PyTorch (its data loaders, its sentence-transformers checks) and
a keras_sentemb encoder runs on TensorFlow; the two never share a process
(their LLVM copies clash). So an MTEB evaluation is two processes: the
TensorFlow side holds the encoder and answers encode requests, the PyTorch
side runs `mteb.evaluate` with an encoder object that sends each request over
a pipe. This module is the pipe, imported by both sides: it imports neither
framework.

One request is one JSON line `{"id": N, "texts": [...], "prompt": P}` (P a
prefix of every text, or null); its answer is one JSON line `{"id": N,
"file": "vectors_N.npy"}` (a float32 `[len(texts), dim]` array written in the
shared working folder) or `{"id": N, "error": "one line"}`. The requesting
side closing its end ends the serving loop.
"""

import json
import os

import numpy as np


class EncodeFailed(RuntimeError):
    """The encoding side could not encode a request (its one-line reason)."""


def serve(encode, requests, replies, workdir):
    """Answer encode requests until the other side closes its end.

    Args:
        encode: callable. `encode(texts) -> float32 array [len(texts), dim]`.
        requests: binary file object. Where the requests arrive, one JSON line each.
        replies: binary file object. Where the answers go.
        workdir: str. The folder both sides share, for the vectors.

    Returns:
        int. The number of requests answered.
    """
    answered = 0
    for line in requests:
        request = json.loads(line)
        texts = request["texts"]
        prompt = request.get("prompt")
        if prompt:
            texts = [prompt + t for t in texts]
        try:
            vectors = np.asarray(encode(texts), np.float32)
        except (ValueError, TypeError) as e:  # a bad text or setting: tell the other side
            answer = {"id": request["id"], "error": f"{type(e).__name__}: {e}"}
        else:
            name = f"vectors_{request['id']}.npy"
            np.save(os.path.join(workdir, name), vectors)
            answer = {"id": request["id"], "file": name}
        replies.write((json.dumps(answer) + "\n").encode("utf-8"))
        replies.flush()
        answered += 1
    return answered


class EncodeClient:
    """The requesting side of the pipe: `encode(texts, prompt)` -> float32 array.

    Args:
        requests: binary file object. Where requests are written.
        replies: binary file object. Where the answers are read.
        workdir: str. The folder both sides share.
    """

    def __init__(self, requests, replies, workdir):
        self.requests, self.replies, self.workdir = requests, replies, workdir
        self.sent = 0

    def encode(self, texts, prompt=None):
        """The vectors of `texts` (each prefixed with `prompt`), in order."""
        self.sent += 1
        request = {"id": self.sent, "texts": [str(t) for t in texts], "prompt": prompt or None}
        self.requests.write((json.dumps(request) + "\n").encode("utf-8"))
        self.requests.flush()
        line = self.replies.readline()
        if not line:
            raise EncodeFailed("the encoding process ended before answering (see its message above)")
        answer = json.loads(line)
        if "error" in answer:
            raise EncodeFailed(answer["error"])
        path = os.path.join(self.workdir, answer["file"])
        vectors = np.load(path)
        os.remove(path)
        return vectors

    def close(self):
        """Closes the request end: the serving loop then returns."""
        for f in (self.requests, self.replies):
            try:
                f.close()
            except OSError:
                pass
