"""A griffe extension for the API reference: reads the package's docstring style.

The house style (Keras') writes a section title, a blank line, and then the
section's body; `Examples:` bodies are not indented (`>>>` lines and fenced
blocks start at the docstring's margin). griffe's Google parser skips such a
section, so the examples would render as plain text. Before parsing, this
extension drops the blank line after each section title and indents an
unindented body by four spaces, up to the next section title.
"""

import re

import griffe

TITLES = {
    "Args", "Arguments", "Returns", "Yields", "Raises", "Example", "Examples", "References",
    "Note", "Notes", "Attributes", "Warning", "Warnings",
}
_TITLE = re.compile(r"^(?P<title>[A-Z][a-z]+):\s*$")


def house_style_to_google(text):
    """The docstring `text` with its section bodies indented under their titles."""
    out, section, after_title = [], None, False
    for line in text.split("\n"):
        match = _TITLE.match(line)
        if match and match.group("title") in TITLES:
            section, after_title = match.group("title"), True
            out.append(line)
            continue
        if section and after_title and not line.strip():
            continue
        after_title = False
        if section and line.strip() and not line[0].isspace():
            line = "    " + line
        out.append(line)
    return "\n".join(out)


class HouseStyle(griffe.Extension):
    """Rewrites each docstring into the layout griffe's Google parser reads."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = house_style_to_google(obj.docstring.value)
