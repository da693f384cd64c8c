"""Errors and messages a user acts on, shared by every front end (no ``bpy``).

A message may name a setting to change: :func:`setting` (``setting("units", "mm")``)
puts a marker for it into the text, naming the setting by its option name
(``pipeline/options.py``), never by a flag or a field. Each front end words the
markers its own way (:func:`worded`): the command line as the flag
(``--units mm``), the sidebar and the dialogs as the field's label
(``'Units' mm in the import options``). ``str()`` of a :class:`Message` or of a
:class:`UserError` reads with the default wording, the flag, which is also what
the command line prints.

- :class:`UserError`: the base of every error a user can fix (bad input, bad
  setting, a file that cannot be written); ``str()`` is the message.
- :class:`SettingError`: a setting's value is wrong (the command line's exit
  code 2, a bad argument).
"""

from __future__ import annotations

import re

__all__ = ["UserError", "SettingError", "Message", "message", "setting", "worded", "settings_named", "template_of",
           "flag_word"]

#: Delimits a setting's marker in a message's template (a character no path or name holds).
_MARK = "\x1f"
_MARKER = re.compile(_MARK + r"([a-z_]+)(?:=([^" + _MARK + r"]*))?" + _MARK)


def setting(name: str, value=None) -> str:
    """A marker naming the setting ``name`` (optionally the value to give it) inside a message's text.

    Build the text with it (``f"pass {setting('units', 'm')}"``) and wrap the
    text in :func:`message` (or raise it in a :class:`UserError`), which words
    it.
    """
    return f"{_MARK}{name}{'' if value is None else '=' + str(value)}{_MARK}"


def flag_word(name: str, value=None) -> str:
    """The command line's wording of a setting: its flag (``--up-axis``), with the value (``--units mm``);
    a switch to turn off reads ``--no-ground``."""
    flag = name.replace("_", "-")
    if value in ("False", False):
        return f"--no-{flag}"
    if value in ("True", True):
        return f"--{flag}"
    return f"--{flag}" if value is None else f"--{flag} {value}"


def worded(text, word=flag_word) -> str:
    """``text`` with each setting's marker replaced by ``word(name, value)`` (``value``: a string or ``None``).

    ``text`` may be a :class:`Message`, a :class:`UserError` or a plain string
    (returned as it is when it holds no marker).
    """
    template = template_of(text)
    return _MARKER.sub(lambda m: word(m.group(1), m.group(2)), template)


def settings_named(text) -> list:
    """The option names of the settings ``text`` names, in order."""
    return [m.group(1) for m in _MARKER.finditer(template_of(text))]


def template_of(text) -> str:
    """The text of ``text`` with its settings' markers (to build another message around it)."""
    if isinstance(text, UserError):
        return text.template
    return getattr(text, "template", None) or str(text)


class Message(str):
    """A text naming settings to change: a ``str`` that reads with the default wording and keeps its
    template (:attr:`template`) for a front end to word (:func:`worded`).

    Slicing or joining it gives a plain string with the default wording: word
    it first.
    """

    template: str

    def __new__(cls, template: str):
        obj = super().__new__(cls, _MARKER.sub(lambda m: flag_word(m.group(1), m.group(2)), template))
        obj.template = template
        return obj


def message(text: str) -> str:
    """``text`` as a :class:`Message` when it names a setting, else as it is."""
    return Message(text) if _MARK in text else text


class UserError(Exception):
    """An error the user can fix: the message names the file or the setting and the problem.

    Parameters
    ----------
    text : str
        The message; it may name settings with :func:`setting`.

    Attributes
    ----------
    template : str
        The message with its settings' markers (:func:`worded` words them).
    setting : str or None
        The first setting the message names (an option name of
        ``pipeline/options.py``), ``None`` when it names none.
    """

    def __init__(self, text="", *args):
        self.template = template_of(text)
        names = settings_named(self.template)
        self.setting = names[0] if names else None
        super().__init__(worded(self.template), *args)


class SettingError(UserError):
    """A setting's value is wrong (on the command line: a bad argument, exit code 2)."""
