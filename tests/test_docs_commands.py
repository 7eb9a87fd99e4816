"""Every `keras-sentemb` command line in the README and docs/ parses with the real parser.

Commands are taken from fenced code blocks (continuation lines joined) and from
inline code. Each is parsed as `keras_sentemb.cli.main` parses it, without
running it: the global `--verbose` taken out, the command's parser, and for
`train METHOD` the method's own option parser. Synopsis notation is read the
way a user reads it: `[...]` groups are optional and taken, `a|b|c` takes the
first alternative, `...` elides flags that are then filled in, and
placeholders (`MODEL`, `N`, `FILE`, ...) get a value of the flag's type.

A code block whose commands cannot parse here by design (a method that a
separately installed plugin adds, say) is skipped when the line right above
its fence is `<!-- not parsed: REASON -->`; the reason must not be empty.

Every `--model` (and `--compare`, `--teacher`) must name something that
resolves for a user with the repository only: `default`, a keras-hub preset
name, a `kaggle://` / `hf://` handle, a placeholder, or a folder that the same
page creates (`--output` of a `train` or `export` command, `output=` or
`.save(...)` in Python) or that the Data page creates when the page links to it.

A page's commands run in order as written: a `train` (or an `export` to a
Hugging Face folder or a LiteRT file) whose `--output` an earlier command or
Python block of the same page already wrote stops with exit 2 unless it says
`--overwrite`, so a page must not do that.
"""

import argparse
import contextlib
import io
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
DATA_PAGE = REPO / "docs" / "data.md"

_START = re.compile(r"(?:^|(?<=[\s`$(]))(keras-sentemb|python -m keras_sentemb)(?=\s|$)")
_NOT_PARSED = re.compile(r"^<!--\s*not parsed:(?P<reason>.*?)-->\s*$")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")
_PLACEHOLDER_PART = re.compile(r"(?:^|[/.])[A-Z][A-Z0-9_]*(?:$|[/.])")
_MODEL_FLAGS = ("model", "compare", "teacher")
_PY_OUTPUT = re.compile(
    r"""(?:\boutput\s*=\s*|\.save\(\s*|export_saved_model\([^,]+,\s*|export_huggingface\([^,]+,\s*)"""
    r"""(["'])(?P<path>[^"']+)\1"""
)


@dataclass
class Command:
    page: Path
    line: int
    text: str
    inline: bool
    problems: list = field(default_factory=list)

    @property
    def where(self):
        return f"{self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page}:{self.line}"


def _join_block_lines(lines):
    """(line number, logical line) of a code block: `\\` continuations and indented
    synopsis continuations (`    [--flag X]`, `    --flag X`) joined."""
    out = []
    for number, line in lines:
        stripped = line.strip()
        if out and out[-1][1].endswith("\\"):
            out[-1] = (out[-1][0], out[-1][1][:-1] + " " + stripped)
        elif (out and line[:1].isspace() and stripped.startswith(("[", "--"))
              and _START.search(out[-1][1])):
            out[-1] = (out[-1][0], out[-1][1] + " " + stripped)
        else:
            out.append((number, line))
    return out


def extract(page, text=None):
    """The `keras-sentemb` commands of one Markdown page."""
    text = Path(page).read_text(encoding="utf-8") if text is None else text
    lines = text.split("\n")
    commands, prose, block, fence, skip = [], [], None, None, False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if block is None and stripped.startswith("```"):
            block, fence = [], stripped[:3]
            language = stripped[3:].strip()
            marker = _NOT_PARSED.match(lines[number - 2].strip()) if number > 1 else None
            skip = bool(marker)
            if marker and not marker.group("reason").strip():
                raise ValueError(f"{page}:{number - 1}: a 'not parsed' marker must say why")
            continue
        if block is not None:
            if stripped.startswith(fence) and stripped.strip("`") == "":
                if not skip and language in ("", "bash", "sh", "shell", "console", "text"):
                    for start, logical in _join_block_lines(block):
                        match = _START.search(logical)
                        if match and not logical.lstrip().startswith("#"):
                            commands.append(Command(page, start, logical[match.start():], False))
                block = None
                continue
            block.append((number, line))
            continue
        prose.append((number, line))
    # Inline code, which may wrap over lines of a paragraph.
    joined = "\n".join(line for _, line in prose)
    numbers = [number for number, _ in prose]
    for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", joined):
        code = " ".join(match.group(1).split())
        start = _START.match(code)
        if start:
            line = numbers[joined.count("\n", 0, match.start())]
            commands.append(Command(page, line, code, True))
    return commands


def _tokens(text):
    """Shell words of the command up to a shell operator or comment; `elided` when
    the text leaves flags out (`...`)."""
    text = text.replace("[method options]", " ... ")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    raw = list(lexer)
    words, elided, depth = [], False, 0
    skip_group = None
    for word in raw:
        if word in ("&&", "||", ";", ">", ">>", "<", "2>", "&", "|&"):
            if depth == 0:
                break
            continue
        if word == "|":
            if depth == 0:
                break
            skip_group = depth  # `[a | b]`: the first alternative only
            continue
        opening = len(word) - len(word.lstrip("["))
        word = word[opening:]
        depth += opening
        closing = 0
        while word.endswith("]") and word.count("]") > word.count("["):
            word, closing = word[:-1], closing + 1
        if skip_group is None and word:
            if word in ("...", "…"):
                elided = True
            elif word.endswith("...") and word != "...":
                elided = True
                words.append(word[:-3])
            else:
                words.append(word)
        depth -= closing
        if skip_group is not None and depth < skip_group:
            skip_group = None
    return words, elided


def _first_alternative(word):
    if "|" in word and not word.startswith(("'", '"')):
        return word.split("|")[0]
    return word


class _ParseError(Exception):
    pass


@contextlib.contextmanager
def _raising(*parsers):
    """argparse errors as `_ParseError` instead of a usage message and exit."""
    saved = []
    for parser in parsers:
        stack = [parser]
        while stack:
            p = stack.pop()
            saved.append((p, p.error))
            p.error = lambda message, p=p: (_ for _ in ()).throw(_ParseError(message))
            for action in p._actions:
                if isinstance(action, argparse._SubParsersAction):
                    stack.extend(action.choices.values())
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for p, error in saved:
            p.error = error


def _actions_by_flag(parser):
    flags = {}
    for action in parser._actions:
        for flag in action.option_strings:
            flags[flag] = action
    return flags


def _placeholder_value(action):
    if action is None:
        return "placeholder"
    if action.dest == "pooling":
        return "mean"
    if action.choices:
        return str(list(action.choices)[0])
    name = getattr(action.type, "__name__", "")
    if action.type is int or "int" in name:
        return "8"
    if action.type is float or "float" in name:
        return "0.5"
    if action.dest in _MODEL_FLAGS:
        return "MODEL"
    return action.dest.upper()


def _fill(words, parsers, elided=False):
    """Placeholders replaced by values of their flag's type; alternatives resolved."""
    flags = {}
    for parser in parsers:
        flags.update(_actions_by_flag(parser))
    out = []
    for i, word in enumerate(words):
        previous = out[-1] if out else None
        word = _first_alternative(word)
        if (i == len(words) - 1 and word in flags and flags[word].nargs is None
                and elided):
            break  # `--format ...`: the value is elided
        if _PLACEHOLDER.match(word) and previous in flags:
            action = flags[previous]
            value = _placeholder_value(action)
            if action.dest in _MODEL_FLAGS:
                value = word  # kept: a placeholder model is checked as such
            word = value
        out.append(word)
    return out


def parse(words, elided=False):
    """`(args, method_options)` as `keras-sentemb` would parse `words`; `_ParseError`
    when it would refuse them. Nothing runs."""
    from keras_sentemb import cli
    from keras_sentemb.cli import program as cli_main
    from keras_sentemb.quiet_startup import take_verbose_flag

    words = [_first_alternative(w) for w in words]
    if words and _PLACEHOLDER.match(words[0]):
        words[0] = "encode"  # keras-sentemb COMMAND ...
    if len(words) > 1 and words[0] == "train" and _PLACEHOLDER.match(words[1]):
        words[1] = "ct"  # train METHOD
    if len(words) > 1 and words[0] in ("evaluate", "analyze") and _PLACEHOLDER.match(words[1]):
        words[1] = {"evaluate": "sts", "analyze": cli.ANALYSES[0]}[words[0]]
    argv = cli_main.attach_negative_numbers(words)
    argv, _ = take_verbose_flag(argv)
    parser = cli.build_parser()
    method_parser = None
    if len(argv) >= 2 and argv[0] == "train" and argv[1] in cli.METHODS:
        method_parser, _ = cli.method_option_parser(argv[1])
    if "-h" in argv or "--help" in argv:
        # --help prints and exits before anything is required: check the words before it.
        argv = argv[:min(i for i, w in enumerate(argv) if w in ("-h", "--help"))]
        if not argv:
            return None, None
        if len(argv) == 1 or (argv[0] == "train" and len(argv) == 2):
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            if argv[0] not in sub.choices:
                raise _ParseError(f"unknown command {argv[0]!r}")
            if argv[0] == "train" and len(argv) == 2 and argv[1] not in cli.METHODS:
                raise _ParseError(f"unknown method {argv[1]!r}")
            return None, None
        elided = True
    subparsers = [parser]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if argv and argv[0] in sub.choices:
        subparsers.append(sub.choices[argv[0]])
    if method_parser is not None:
        subparsers.append(method_parser)
    argv = _fill(argv, subparsers, elided)
    with _raising(parser, *([method_parser] if method_parser else [])):
        for _ in range(4):
            try:
                args, extra = parser.parse_known_args(argv)
                break
            except _ParseError as e:
                missing = re.match(r"the following arguments are required: (.*)", str(e))
                if not (elided and missing):
                    raise
                command = subparsers[1] if len(subparsers) > 1 else parser
                flags = _actions_by_flag(command)
                for name in missing.group(1).split(", "):
                    if name.startswith("--"):
                        argv += [name, _placeholder_value(flags.get(name))]
                        continue
                    positional = [a for a in command._actions if a.dest == name and a.choices]
                    if not positional or len(argv) < 1:
                        raise
                    argv.insert(1, str(list(positional[0].choices)[0]))
        else:
            raise _ParseError("required arguments could not be filled in")
        if extra and args.command != "train":
            raise _ParseError(f"unrecognized arguments: {' '.join(extra)}")
        options = None
        if args.command == "train":
            options, unknown = method_parser.parse_known_args(extra)
            if unknown:
                raise _ParseError(f"unknown option(s) for 'train {args.method}': {' '.join(unknown)}")
    return args, options


ABBREVIATION = " (argparse prefix matching in keras_sentemb.cli)"


def _abbreviated_common_flags(words, args):
    """Method options that the command's own parser takes for a longer common flag
    (argparse abbreviations: `train simcse --mode sup` sets `--model sup`)."""
    if args is None or getattr(args, "command", None) != "train":
        return []
    from keras_sentemb import cli
    from keras_sentemb.cli import program as cli_main

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if not sub.choices["train"].allow_abbrev:
        return []  # prefixes are not read as flags
    common = [f for a in sub.choices["train"]._actions for f in a.option_strings]
    method_flags, _ = cli.method_option_parser(args.method)
    own = {f for a in method_flags._actions for f in a.option_strings}
    found = []
    for word in words:
        flag = word.split("=")[0]
        if flag in own and flag not in common and any(c.startswith(flag) for c in common):
            found.append(flag)
    return found


def created_folders(page, text=None):
    """Folders the page says how to create: `--output` of train / export commands,
    `output=` / `.save(...)` / `export_*(..., path)` in Python."""
    text = Path(page).read_text(encoding="utf-8") if text is None else text
    made = set()
    for command in extract(page, text):
        words, _ = _tokens(command.text)
        words = words[1:] if words[0] == "keras-sentemb" else words[3:]
        if words and words[0] in ("train", "export") and "--output" in words:
            i = words.index("--output")
            if i + 1 < len(words):
                made.add(_normal(words[i + 1]))
    for match in _PY_OUTPUT.finditer(text):
        made.add(_normal(match.group("path")))
    return made


def _normal(path):
    return os.path.normpath(path.rstrip("/"))


def _python_writes(text):
    """`(line, folder)` of every folder the page's Python writes (`output=`, `.save`, exports)."""
    return [(text.count("\n", 0, m.start()) + 1, _normal(m.group("path")))
            for m in _PY_OUTPUT.finditer(text)]


def _refuses_existing_output(args):
    """The folder a parsed command writes and refuses when it exists, else None.

    `train` refuses a folder that holds a model, `export` a Hugging Face folder
    or LiteRT file that exists; both unless `--overwrite`. A SavedModel export
    adds a version instead.
    """
    command = getattr(args, "command", None)
    if getattr(args, "overwrite", False) or command not in ("train", "export"):
        return None
    if command == "export" and args.format == "saved-model":
        return None
    output = getattr(args, "output", None)
    if not isinstance(output, str) or _PLACEHOLDER.match(output) or _PLACEHOLDER_PART.search(output):
        return None
    return _normal(output)


def _rewritten_outputs(commands, parsed, text):
    """Adds a problem to each command whose `--output` an earlier step of the page wrote.

    `parsed` maps `id(command)` to its parsed arguments; steps are the page's
    block commands and its Python writes, in the order of their lines.
    """
    steps = [(line, "python", folder) for line, folder in _python_writes(text)]
    steps += [(c.line, "command", c) for c in commands if not c.inline and id(c) in parsed]
    written = {}
    for line, kind, what in sorted(steps, key=lambda step: step[0]):
        if kind == "python":
            written.setdefault(what, line)
            continue
        args = parsed[id(what)]
        folder = _refuses_existing_output(args)
        if folder is not None and folder in written:
            what.problems.append(
                f"--output {folder} was already written at line {written[folder]} of this page: "
                f"`{args.command}` refuses it without --overwrite (exit 2), so the page's "
                "commands do not run in order")
        output = getattr(args, "output", None)
        if args.command in ("train", "export") and isinstance(output, str):
            written.setdefault(_normal(output), line)


def _links_to_data_page(page, text):
    if Path(page) == DATA_PAGE:
        return True
    return bool(re.search(r"\]\((?:\.\./)*(?:docs/)?data\.md(?:#[^)]*)?\)", text))


def _resolves(value, made):
    import keras_hub

    if _PLACEHOLDER.match(value) or _PLACEHOLDER_PART.search(value):
        return True
    if value == "default" or value.startswith(("kaggle://", "hf://")):
        return True
    if value in keras_hub.models.Backbone.presets:
        return True
    return _normal(value) in made


def check(page, text=None, data_made=None):
    """The page's commands, each with the problems found (empty when it parses and resolves)."""
    text = Path(page).read_text(encoding="utf-8") if text is None else text
    made = created_folders(page, text)
    if data_made is None:
        data_made = created_folders(DATA_PAGE) if DATA_PAGE.exists() else set()
    if _links_to_data_page(page, text):
        made |= data_made
    commands = extract(page, text)
    parsed = {}
    for command in commands:
        words, elided = _tokens(command.text)
        words = words[1:] if words[0] == "keras-sentemb" else words[3:]
        if not words:
            if not command.inline:
                command.problems.append("no command after the program name")
            continue
        if command.inline and not any(w.startswith("-") for w in words):
            # A mention in prose (`keras-sentemb train`, `keras-sentemb evaluate ...`):
            # its command words must exist.
            try:
                parse(words[:1] + ["--help"])
            except _ParseError as e:
                command.problems.append(f"does not parse: {e}")
            continue
        try:
            args, options = parse(words, elided=elided or command.inline)
        except _ParseError as e:
            command.problems.append(f"does not parse: {e}")
            continue
        if args is None:
            continue
        parsed[id(command)] = args
        for flag in _abbreviated_common_flags(words, args):
            command.problems.append(
                f"{flag} is read by keras-sentemb as an abbreviation of a common flag, "
                "not as the method's option" + ABBREVIATION)
        values = [getattr(args, name, None) for name in _MODEL_FLAGS]
        values.append(getattr(options, "teacher", None) if options is not None else None)
        for value in values:
            for v in (value if isinstance(value, list) else [value]):
                if isinstance(v, str) and not _resolves(v, made):
                    command.problems.append(
                        f"model {v!r} does not resolve: not 'default', not a keras-hub preset, "
                        "and no command on this page (or on the Data page it links to) creates it"
                    )
    _rewritten_outputs(commands, parsed, text)
    return commands


def _all_commands():
    data_made = created_folders(DATA_PAGE) if DATA_PAGE.exists() else set()
    return [c for page in PAGES for c in check(page, data_made=data_made)]


def test_the_pages_hold_commands_to_check():
    commands = [c for page in PAGES for c in extract(page)]
    assert len(commands) > 50
    assert any(c.inline for c in commands) and any(not c.inline for c in commands)


def _report(commands, keep):
    return [f"{c.where}: {c.text}\n    " + "\n    ".join(p for p in c.problems if keep(p))
            for c in commands if any(keep(p) for p in c.problems)]


def test_every_command_line_parses_and_every_model_resolves():
    # A method option read as a common flag (and the model it then names) is the
    # command line's mistake, not the page's: the next test reports it.
    captured = {c.where for c in _all_commands() if any(ABBREVIATION in p for p in c.problems)}
    bad = _report([c for c in _all_commands() if c.where not in captured], lambda p: True)
    bad += _report([c for c in _all_commands() if c.where in captured],
                   lambda p: ABBREVIATION not in p and "does not resolve" not in p)
    assert not bad, "\n".join(bad) + (
        "\n(a block that cannot parse by design takes `<!-- not parsed: REASON -->` "
        "on the line above its fence)")


def test_method_options_are_not_read_as_common_flags():
    # `--mode` (simcse, consert, sg, parallel) begins `--model`: no prefix matching.
    bad = _report(_all_commands(), lambda p: ABBREVIATION in p)
    assert not bad, "\n".join(bad)


# The checker itself must be able to fail: each bad line below must be reported.
BAD_PAGE = """\
# A page with mistakes

```
keras-sentemb train ct --model untuned-minilm --train-file t.txt --output runs/ct
keras-sentemb encode --modle default --input a.txt --output a.npy
keras-sentemb train simcse --model default --train-file t.txt --output runs/s --no-such-option 3
keras-sentemb export --model runs/never-made --output saved_models/x
keras-sentemb evaluate sts --model bert-base --data keras_sentemb/resources/STS
keras-sentemb encode --model default --input a.txt --output a.npy --batch-size many
```

Inline too: `keras-sentemb train ct --no-such-flag 3 ...`.
"""

GOOD_PAGE = """\
```
keras-sentemb train mlm --model default --train-file t.txt --output runs/untuned \\
    --steps 500 --batch-size 128
keras-sentemb train ct --model runs/untuned --train-file t.txt --output runs/ct --verbose 0
keras-sentemb export --model runs/ct --output saved_models/ct [--version N] [--format saved-model|transformers]
keras-sentemb evaluate sts --model bert_base_en_uncased --data DIR --verbose
keras-sentemb train METHOD --help
```

`keras-sentemb train ct --negatives in_batch --dropout ...` and `keras-sentemb encode --model M
--input FILE --output FILE.npy`.
"""


def test_the_checker_reports_bad_commands(tmp_path):
    page = tmp_path / "bad.md"
    page.write_text(BAD_PAGE, encoding="utf-8")
    commands = check(page, data_made=set())
    assert len(commands) == 7
    assert all(c.problems for c in commands), [c.text for c in commands if not c.problems]


def test_a_not_parsed_block_is_skipped_and_must_say_why(tmp_path):
    page = tmp_path / "plugin.md"
    page.write_text("<!-- not parsed: needs the plugin installed -->\n```\n"
                    "keras-sentemb train plugin_method --output o --train-file t\n```\n",
                    encoding="utf-8")
    assert check(page, data_made=set()) == []
    page.write_text("<!-- not parsed: -->\n```\nkeras-sentemb train x\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="must say why"):
        extract(page)


def test_the_checker_accepts_good_commands(tmp_path):
    page = tmp_path / "good.md"
    page.write_text(GOOD_PAGE, encoding="utf-8")
    commands = check(page, data_made=set())
    assert len(commands) == 7
    assert not [c.problems for c in commands if c.problems]


REWRITING_PAGE = """\
```python
encoder = keras_sentemb.fit_ct("t.txt", steps=4, output="runs/ct")
```

```
keras-sentemb train ct --model default --train-file t.txt --output runs/ct
keras-sentemb train simcse --model default --train-file t.txt --output runs/simcse
keras-sentemb train simcse --model default --train-file t.txt --output runs/simcse --steps 9
keras-sentemb train simcse --model default --train-file t.txt --output runs/simcse --overwrite
keras-sentemb export --model runs/simcse --output saved_models/simcse
keras-sentemb export --model runs/simcse --output saved_models/simcse
keras-sentemb export --model runs/simcse --output hf/simcse --format sentence-transformers
keras-sentemb export --model runs/simcse --output hf/simcse --format sentence-transformers
keras-sentemb train ct --model default --train-file t.txt --output O
keras-sentemb train ct --model default --train-file t.txt --output O
```
"""


def test_the_checker_reports_an_output_written_twice(tmp_path):
    page = tmp_path / "rewrite.md"
    page.write_text(REWRITING_PAGE, encoding="utf-8")
    commands = check(page, data_made=set())
    rewritten = [c.line for c in commands if any("already written" in p for p in c.problems)]
    # The Python block's folder, a second train into a folder, a second Hugging Face
    # export; not --overwrite, a second SavedModel version, or a placeholder.
    assert rewritten == [6, 8, 13]
    assert "line 2 of this page" in " ".join(commands[0].problems)


@pytest.mark.parametrize("text, words", [
    ("keras-sentemb encode --model M --input FILE --output FILE.npy  # one vector a line",
     ["keras-sentemb", "encode", "--model", "M", "--input", "FILE", "--output", "FILE.npy"]),
    ("keras-sentemb export --model runs/ct --output saved_models/ct && docker run x",
     ["keras-sentemb", "export", "--model", "runs/ct", "--output", "saved_models/ct"]),
    ("keras-sentemb evaluate sts --model default --data D > result.json",
     ["keras-sentemb", "evaluate", "sts", "--model", "default", "--data", "D"]),
])
def test_shell_words(text, words):
    assert _tokens(text)[0] == words
