"""How the sidebar and the dialogs word a message's settings: as the field's label and where it is
(``'Units' mm in the import options``), where the command line writes the flag (:mod:`..errors`)."""

from ..errors import worded
from ..pipeline.options import find_setting

__all__ = ["field_word", "ui_text"]


def field_word(name, value=None):
    """A setting as the UI names it: ``'Up Axis' in the import options``, ``'Ground' off in ...``.

    A placeholder value (``NAME``, ``MAPPING.json``) is left out: the field
    offers the choices.
    """
    found = find_setting(name)
    label = found.label if found is not None else name.replace("_", " ").title()
    where = f" in {found.where}" if found is not None and found.where != "the command line" else ""
    if value in ("False", "True"):
        return f"'{label}' {'on' if value == 'True' else 'off'}{where}"
    if value is None or value.split(".")[0].replace(" ", "").isupper():
        return f"'{label}'{where}"
    return f"'{label}' {value}{where}"


def ui_text(text):
    """``text`` (a message, an error or a plain string) with its settings worded for the UI."""
    return worded(text, field_word)
