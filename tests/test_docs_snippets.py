"""Every ```python block in docs/ runs (pages' blocks in order, on the default model)."""

import pytest

from tests import docs_snippets
from tests.docs_snippets import DOCS


def test_the_runner_reports_the_page_and_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n```python\nx = 1\n```\n\ntext\n\n"
        "<!-- not run: needs a server -->\n```python\nimport no_such_module\n```\n\n"
        "```python\ny = x + 1\nraise ValueError(y)\n```\n",
        encoding="utf-8",
    )
    snippets = docs_snippets.extract(page)
    assert [(s.line, s.skip_reason) for s in snippets] == [(4, None), (11, "needs a server"), (15, None)]
    original = docs_snippets.DOCS
    docs_snippets.DOCS = tmp_path
    try:
        with pytest.raises(AssertionError, match=r"page.md:15 failed: ValueError: 2"):
            docs_snippets.run_page(page, tmp_path)
    finally:
        docs_snippets.DOCS = original


def test_a_not_run_marker_must_say_why(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- not run: -->\n```python\nx = 1\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="must say why"):
        docs_snippets.extract(page)


def test_few_snippets_are_skipped():
    skipped = [s for p in DOCS.rglob("*.md") for s in docs_snippets.extract(p) if s.skip_reason]
    ran = [s for p in DOCS.rglob("*.md") for s in docs_snippets.extract(p) if not s.skip_reason]
    assert len(ran) >= 10
    assert len(skipped) <= len(ran) // 2, [s.where for s in skipped]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    "page", docs_snippets.pages_with_snippets(), ids=lambda p: str(p.relative_to(DOCS))
)
def test_docs_page_snippets_run(page, tmp_path):
    docs_snippets.run_page(page, tmp_path)
