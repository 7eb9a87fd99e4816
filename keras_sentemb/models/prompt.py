"""A prompt template that frames every sentence before the encoder reads it.

PromptBERT (Jiang et al., 2022) reads a sentence through a template such as
`This sentence : "[X]" means [MASK] .`: the sentence takes the place of
`[X]`, and the sentence vector is the last layer's state at `[MASK]`
(`pooling="mask"`). The template is part of the model: `encode`, training
batches and the SavedModel frame every sentence the same way, and the
encoder's folder stores it.

Framing happens on token ids, after truncation: the sentence keeps up to
`max_length - 2` tokens (the limit is the sentence's own, as the reference
code truncates before framing) and the template's tokens come on top, so a
long sentence never pushes `[MASK]` out of the sequence.
"""

import dataclasses

SENTENCE = "[X]"
MASK = "[MASK]"
MAX_TEMPLATE_CHARS = 1000


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A parsed template: the ids before and after the sentence, and where `[MASK]` is.

    Attributes:
        template: str. The template, `[X]` marking the sentence.
        prefix: tuple of int. Token ids between the start token and the sentence.
        suffix: tuple of int. Token ids between the sentence and the end token.
        mask_index: int or None. The `[MASK]` token's position in the packed
            sequence: from the start when non-negative (a `[MASK]` in the
            prefix), else from the end (`-1` is the end token). None without
            a `[MASK]`.
    """

    template: str
    prefix: tuple
    suffix: tuple
    mask_index: object = None

    @property
    def extra(self):
        """Tokens the template adds to every sentence."""
        return len(self.prefix) + len(self.suffix)


def check_template(template):
    """`template` if it is a str with exactly one `[X]` and at most one `[MASK]`."""
    if not isinstance(template, str):
        raise ValueError(f"`prompt` must be a str with one {SENTENCE} (where the sentence "
                         f"goes) or None; received {type(template).__name__}.")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise ValueError(f"`prompt` has {len(template):,} characters; a template has at most "
                         f"{MAX_TEMPLATE_CHARS:,}.")
    if template.count(SENTENCE) != 1:
        raise ValueError(f"`prompt` must contain {SENTENCE} (where the sentence goes) exactly "
                         f"once; received {template!r}.")
    if template.count(MASK) > 1:
        raise ValueError(f"`prompt` may contain {MASK} at most once; received {template!r}.")
    return template


def parse_prompt(template, tokenize, mask_token_id):
    """The `Prompt` of `template`, its text pieces tokenized with `tokenize`.

    Args:
        template: str, e.g. `'This sentence : "[X]" means [MASK] .'`.
        tokenize: callable. A str -> list of token ids (no special tokens).
        mask_token_id: int or None. The tokenizer's mask token.

    Returns:
        `Prompt`.
    """
    check_template(template)
    if MASK in template and mask_token_id is None:
        raise ValueError(f"`prompt` contains {MASK}, but this tokenizer has no mask token.")

    def ids(text):
        out = []
        for i, piece in enumerate(text.split(MASK)):
            if i:
                out.append(int(mask_token_id))
            if piece.strip():
                out.extend(int(t) for t in tokenize(piece))
        return tuple(out)

    before, after = template.split(SENTENCE)
    prefix, suffix = ids(before), ids(after)
    mask_index = None
    if MASK in before:
        mask_index = 1 + prefix.index(int(mask_token_id))  # after the start token
    elif MASK in after:
        mask_index = suffix.index(int(mask_token_id)) - len(suffix) - 1  # the end token is -1
    return Prompt(template, prefix, suffix, mask_index)
