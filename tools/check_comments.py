#!/usr/bin/env python3
"""List measured figures and dates in code comments and docstrings.

Comments should say *why* in one clause; a figure that justified a constant
belongs in ``docs/`` (``docs/design.md``, ``docs/benchmarks.md``,
``docs/lab-notes.md``), linked from the comment. This script prints
``path:line: kind: text`` for every comment or docstring line that carries

* a date (``2 Dec``, ``Dec 2``, ``2026-12-02``) or a run log word
  (``session``, ``this round``, ``fourth round``);
* a measured figure: a time, rate or memory size (``ms``, ``s``,
  ``frames/s``, ``MB``...), a speed ratio (``4x faster``), a before/after
  arrow (``12.4 -> 0.75``), or a length, angle or share (``mm``, ``cm``,
  ``deg``, ``%``) on a line with a measuring word (held out, was,
  took, before, jitter, a benchmark's name...).

A number that only restates the constant it documents (``0.133 s`` next to
``CONTACT_FADE_S``) is a definition, not a measurement: end that comment line
with ``# figure: definition`` (comments) or put ``(definition)`` in the
docstring line to keep it out of the report. Exit status: 0 when nothing is
found, 1 otherwise (``--count`` prints hits per file).

Usage::

    python tools/check_comments.py [PATH ...] [--count] [--kinds date,figure]

Without paths it scans the shipped code and ``training/``: every ``.py``
file of the repository except ``tests/``, ``benchmarks/``, ``tools/``,
``docs/`` and virtual environments.
"""

import argparse
import ast
import io
import re
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Folders (relative to the repository root) that are not scanned by default.
SKIP_DIRS = {"tests", "benchmarks", "tools", "docs", ".git", ".ci", "out", "bench_out", "dist", "build"}

MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)"
DATE_RE = re.compile(
    r"\b\d{1,2}(?:st|nd|rd|th)? " + MONTHS + r"\b"
    r"|\b" + MONTHS + r"[a-z]* \d{1,2}(?:st|nd|rd|th)?\b"
    r"|\b20\d\d-\d\d-\d\d\b"
)
RUN_RE = re.compile(
    r"(?<!Blender )(?<!current )(?<!user's )\bsessions?\b"   # a run log's session, not Blender's
    r"|\b(?:this|last|previous|next|first|second|third|fourth|fifth|sixth) (?:round|session)\b",
    re.I,
)
#: Units that are nearly always a measurement (a time, a rate, a memory size).
TIMING_UNIT = r"(?:ms|us|µs|s|sec|seconds|min|frames/s|MB|MiB|GB|kB|KB)"
#: Units that are a measurement or a definition; reported with a measuring word on the same line.
SIZE_UNIT = r"(?:mm|cm|deg|°|%)"
NUMBER = r"\d+(?:[.,]\d+)*"
TIMING_RE = re.compile(r"(?<![\w.])" + NUMBER + r"\s?" + TIMING_UNIT + r"(?![\w/])")
RATIO_RE = re.compile(r"(?<![\w.])" + NUMBER + r"\s?(?:x|times)\s+(?:faster|slower|as\s+(?:long|fast))", re.I)
ARROW_RE = re.compile(r"\d+\.\d+\s?[^\W\d]*\s*(?:->|→)\s*\**\d|(?<![\w.])\d+\s?[^\W\d]*\s*(?:->|→)\s*\**\d+\.\d")
SIZE_RE = re.compile(r"(?<![\w.])" + NUMBER + r"\s?" + SIZE_UNIT + r"(?![\w/])")
MEASURE_WORD_RE = re.compile(
    r"\b(?:held[- ]out|benchmark|bench_\w+|was|were|took|faster|slower|A/B|before|"
    r"jitter|MPJPE|training\.evaluate|on the (?:VM|reference machine))\b", re.I)


def is_strong_figure(text):
    """Whether a line carries a time, rate, memory size, speed ratio or before/after arrow."""
    return bool(TIMING_RE.search(text) or RATIO_RE.search(text) or ARROW_RE.search(text))


#: Markers that keep a line that only restates its constant out of the report.
ALLOW_RE = re.compile(r"#\s*figure:\s*definition|\(definition\)")


def iter_files(paths):
    """Yield the ``.py`` files under ``paths`` (the default scan when empty)."""
    if paths:
        for path in paths:
            path = Path(path)
            if path.is_dir():
                yield from sorted(path.rglob("*.py"))
            else:
                yield path
        return
    for path in sorted(REPO.rglob("*.py")):
        parts = path.relative_to(REPO).parts
        if parts[0] in SKIP_DIRS or parts[0].startswith(".venv") or parts[0] == "venv":
            continue
        if any(part == "__pycache__" for part in parts):
            continue
        if parts == ("devpkg.py",):
            continue
        yield path


def docstring_ranges(tree):
    """``(first, last)`` line ranges (1-based) of the module's, classes', functions' and attributes' docstrings."""
    ranges = []
    nodes = [tree] + [n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for node in nodes:
        body = getattr(node, "body", None)
        if not body:
            continue
        first = body[0]
        if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            ranges.append((first.lineno, first.end_lineno))
    # Attribute docstrings: a bare string right after an assignment.
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for prev, cur in zip(body, body[1:]):
            if (isinstance(prev, (ast.Assign, ast.AnnAssign)) and isinstance(cur, ast.Expr)
                    and isinstance(cur.value, ast.Constant) and isinstance(cur.value.value, str)):
                ranges.append((cur.lineno, cur.end_lineno))
    return ranges


def comment_blocks(source):
    """Yield blocks of ``(line, text)``: runs of comment lines, and docstring paragraphs."""
    text_lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    if tree is not None:
        for first, last in docstring_ranges(tree):
            block = []
            for number in range(first, last + 1):
                text = text_lines[number - 1]
                if not text.strip() and block:
                    yield block
                    block = []
                elif text.strip():
                    block.append((number, text))
            if block:
                yield block
    comments = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments.append((token.start[0], token.string))
    except (tokenize.TokenError, IndentationError):
        pass
    # Runs of whole-line comments form one block; a comment after code is a block of its own.
    block = []
    for number, text in comments:
        trailing = bool(text_lines[number - 1].split("#", 1)[0].strip())
        if block and (trailing or number != block[-1][0] + 1):
            yield block
            block = []
        block.append((number, text))
        if trailing:
            yield block
            block = []
    if block:
        yield block


DECIMALS_RE = re.compile(r"\d\.\d+\D+\d+\.\d")


def find_hits(path, kinds=("date", "figure")):
    """Return ``[(line, kind, text)]`` for one file, sorted by line.

    A line is reported for a date or run word, a time, rate or memory size, a
    speed ratio or a before/after arrow; and, in a block (a run of comment
    lines, a docstring paragraph) that measures something, for a length,
    angle or share or for several decimal figures.
    """
    source = Path(path).read_text(encoding="utf-8", errors="replace")
    all_lines = source.splitlines()
    hits = []
    for block in comment_blocks(source):
        joined = " ".join(text for _, text in block)
        measuring = bool(MEASURE_WORD_RE.search(joined) or any(is_strong_figure(t) for _, t in block))
        for number, text in block:
            if ALLOW_RE.search(all_lines[number - 1]):
                continue
            if "date" in kinds and (DATE_RE.search(text) or RUN_RE.search(text)):
                hits.append((number, "date", text.strip()))
            elif "figure" in kinds and (is_strong_figure(text) or (
                    measuring and (SIZE_RE.search(text) or DECIMALS_RE.search(text)))):
                hits.append((number, "figure", text.strip()))
    return sorted(set(hits))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="files or folders (default: shipped code and training/)")
    parser.add_argument("--count", action="store_true", help="print the number of hits per file only")
    parser.add_argument("--kinds", default="date,figure", help="comma-separated: date, figure")
    args = parser.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    total = 0
    for path in iter_files(args.paths):
        hits = find_hits(path, kinds)
        if not hits:
            continue
        total += len(hits)
        try:
            shown = path.resolve().relative_to(REPO)
        except ValueError:
            shown = path
        if args.count:
            print("{}: {}".format(shown, len(hits)))
            continue
        for number, kind, text in hits:
            print("{}:{}: {}: {}".format(shown, number, kind, text[:160]))
    print("{} hit(s)".format(total), file=sys.stderr)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
