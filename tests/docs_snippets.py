"""Extracts and runs the fenced Python blocks of the documentation (docs/**/*.md).

A page's blocks run in order in one namespace, the way a reader would paste
them, in a fresh working folder. A block is skipped only when the line right
above its fence is an HTML comment that says why:

    <!-- not run: needs a TF Serving server on localhost:8501 -->
    ```python
    ...

The comment is invisible on the site; the reason must not be empty. Errors
name the Markdown file and its line: each block is compiled with its page's
path as the file name and padded so that traceback line numbers are the
page's.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
_FENCE_OPEN = re.compile(r"^```python\b.*$")
_NOT_RUN = re.compile(r"^<!--\s*not run:(?P<reason>.*?)-->\s*$")


@dataclass
class Snippet:
    path: Path
    line: int  # 1-based line of the first code line
    code: str
    skip_reason: str = None

    @property
    def where(self):
        return f"{self.path.relative_to(DOCS.parent)}:{self.line}"


def extract(path):
    """The ```python blocks of one Markdown file, with their skip markers."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    snippets, i = [], 0
    while i < len(lines):
        if _FENCE_OPEN.match(lines[i]):
            start = i + 1
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                raise ValueError(f"{path}:{i + 1}: a ```python block is never closed")
            reason = None
            marker = _NOT_RUN.match(lines[i - 1].strip()) if i > 0 else None
            if marker:
                reason = marker.group("reason").strip()
                if not reason:
                    raise ValueError(f"{path}:{i}: a 'not run' marker must say why")
            snippets.append(Snippet(Path(path), start + 1, "\n".join(lines[start:end]), reason))
            i = end + 1
        else:
            i += 1
    return snippets


def pages_with_snippets():
    """Every docs page with at least one ```python block, sorted."""
    return sorted(p for p in DOCS.rglob("*.md") if extract(p))


def run_page(path, workdir):
    """Runs the page's blocks in order in one namespace, inside `workdir`.

    Returns:
        The list of the snippets that were skipped.
    """
    namespace = {"__name__": "__docs__"}
    skipped = []
    old = os.getcwd()
    os.chdir(workdir)
    try:
        for snippet in extract(path):
            if snippet.skip_reason is not None:
                skipped.append(snippet)
                continue
            padded = "\n" * (snippet.line - 1) + snippet.code
            code = compile(padded, str(snippet.path.relative_to(DOCS.parent)), "exec")
            try:
                exec(code, namespace)
            except Exception as e:
                raise AssertionError(f"the snippet at {snippet.where} failed: "
                                     f"{type(e).__name__}: {e}") from e
    finally:
        os.chdir(old)
    return skipped
