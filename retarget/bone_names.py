"""Bone names parsed (:func:`parse_name`): side, core name, role hints and kind, for the mapper.

No ``bpy`` here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import conventions as C

__all__ = ["ParsedName", "parse_name", "NUMBERED"]


#: A numbered segment of a chain (Rigify's ``spine.004``, ``spine_05``).
NUMBERED = re.compile(r"[._]\d{2,3}$")


_TOKEN_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


_SEGMENT_RE = re.compile(r"^(.*?)[._](\d{3})$")


@dataclass
class ParsedName:
    """Result of :func:`parse_name`."""

    name: str
    base: str             # name without a Blender ``.001`` suffix
    segment: int          # that suffix's number, 0 if none
    side: str             # "L", "R", "C" or ""
    tokens: tuple         # lowercase tokens without side tokens
    core: str             # letters of the tokens joined ("upperarm")
    number: int           # first number in the tokens (spine_02 -> 2), -1 if none
    roles: tuple          # role hints from ROLE_ALIASES
    kind: str             # "body", "twist", "helper" or "ignore"
    preferred: bool       # DEF- prefix


def parse_name(name: str) -> ParsedName:
    """Normalise a bone name (see :mod:`.conventions` for the steps).

    Examples
    --------
    >>> parse_name("mixamorig:LeftForeArm").core, parse_name("mixamorig:LeftForeArm").side
    ('forearm', 'L')
    >>> parse_name("DEF-upper_arm.L.001").segment
    1
    """
    s = re.split(r"[:|]", name)[-1]
    helper = False
    preferred = False
    changed = True
    while changed:
        changed = False
        low = s.lower()
        for p in sorted(C.STRIP_PREFIXES, key=len, reverse=True):
            if low.startswith(p) and len(s) > len(p):
                helper |= p in C.HELPER_PREFIXES
                preferred |= p in C.PREFERRED_PREFIXES
                s = s[len(p):].lstrip(" _.-")
                changed = True
                break
    segment = 0
    base = name
    m = _SEGMENT_RE.match(s)
    if m:
        s, segment = m.group(1), int(m.group(2))
        base = name[: len(name) - 4]
    toks = [t.lower() for t in _TOKEN_RE.findall(s)]
    side = ""

    def _side(tok):
        if tok in C.LEFT_TOKENS:
            return "L"
        if tok in C.RIGHT_TOKENS:
            return "R"
        if tok in C.CENTER_TOKENS:
            return "C"
        return ""

    words = [t for t in toks if not t.isdigit()]
    if len(words) > 1:
        # a side marker at the start or the end (digits may trail: hand_l_01)
        first = next(i for i, t in enumerate(toks) if not t.isdigit())
        last = max(i for i, t in enumerate(toks) if not t.isdigit())
        for i in (first, last):
            sd = _side(toks[i])
            if sd:
                side = sd
                toks.pop(i)
                break
        if not side:  # "Bip01 L UpperArm" style markers in the middle
            for i, t in enumerate(toks):
                if t in ("left", "right"):
                    side = _side(t)
                    toks.pop(i)
                    break
    nums = [int(t) for t in toks if t.isdigit()]
    core = "".join(t for t in toks if not t.isdigit())
    roles = C.ROLE_ALIASES.get(core, ())
    if not roles and core.startswith(("left", "right")):
        # camelCase split may miss e.g. "leftupperarm"
        rest = core[4:] if core.startswith("left") else core[5:]
        if rest in C.ROLE_ALIASES:
            side = "L" if core.startswith("left") else "R"
            core, roles = rest, C.ROLE_ALIASES[rest]
    tokset = set(toks)
    if core in C.IGNORE_CORES or tokset & C.IGNORE_TOKENS:
        kind = "ignore"
    elif tokset & C.TWIST_TOKENS:
        kind = "twist"
    elif helper or tokset & C.HELPER_TOKENS:
        kind = "helper"
    else:
        kind = "body"
    return ParsedName(name, base, segment, side, tuple(toks), core, nums[0] if nums else -1,
                      tuple(roles), kind, preferred)
