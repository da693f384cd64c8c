"""Calling Blender safely (``bpy`` at call time): operators with their console output captured and
their failures in one line, and other files' data kept from running Python.

Both front ends call Blender's importers and exporters: the CLI, whose
stdout may carry the report, and the UI (reading an armature file).
"""

from __future__ import annotations

import os

__all__ = ["disarm_scripts", "operator_error", "quiet"]


def operator_error(ex, captured=""):
    """The cause of a failed Blender operator, in one line.

    Blender's message for a failing Python operator holds the whole
    traceback followed by ``Location: ...``; the cause is its last
    unindented line (``UnicodeDecodeError: ...``). Other messages are joined
    into one line. Long messages keep their end, where the cause is.

    Parameters
    ----------
    ex : BaseException
    captured : str
        What the operator wrote to stderr (used when the exception says nothing).

    Returns
    -------
    str
    """
    text = str(ex).strip() or str(captured).strip()
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.lstrip().startswith("Location:")]
    if any("Traceback (most recent call last)" in line for line in lines):
        causes = [line for line in lines if not line[:1].isspace() and "Traceback (most recent" not in line]
        lines = causes[-1:] or lines[-1:]
    message = " ".join(" ".join(lines).split())
    for prefix in ("Error: ", "Python: "):
        while message.startswith(prefix):
            message = message[len(prefix):]
    if len(message) > 600:
        message = "..." + message[-597:]
    return message or type(ex).__name__


def _quiet_call(func, *args, _stderr=True, **kwargs):
    """Call a Blender operator or function with its console output captured.

    stdout may carry the report (``--report -``) and Blender prints
    tracebacks of failing Python operators to stderr itself; its C code
    writes to the file descriptors directly, so stdout is pointed at
    ``/dev/null`` and stderr at a temporary file meanwhile. A failure is
    raised as ``RuntimeError`` whose message is the cause alone
    (:func:`operator_error`). ``_stderr`` is accepted for compatibility;
    stderr is always captured.
    """
    import contextlib
    import io
    import sys
    import tempfile

    streams = [sys.stdout, sys.stderr]
    fds = []
    for stream in streams:
        try:
            stream.flush()
            fds.append(stream.fileno())
        except (AttributeError, OSError, ValueError):
            fds.append(None)
    saved = {fd: os.dup(fd) for fd in fds if fd is not None}
    capture = tempfile.TemporaryFile()
    try:
        sink = os.open(os.devnull, os.O_WRONLY)
        if fds[0] is not None:
            os.dup2(sink, fds[0])
        if fds[1] is not None:
            os.dup2(capture.fileno(), fds[1])
        os.close(sink)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                return func(*args, **kwargs)
            except RuntimeError as ex:
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                capture.seek(0)
                captured = capture.read().decode("utf-8", "replace") + err.getvalue()
                raise RuntimeError(operator_error(ex, captured)) from None
    finally:
        for stream in streams:
            with contextlib.suppress(Exception):
                stream.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        capture.close()


def quiet(func, *args, **kwargs):
    """Run a Blender operator or function with its console output captured (:func:`_quiet_call`)."""
    return _quiet_call(func, *args, **kwargs)


def _all_ids():
    """Every data-block of the current file, with the node trees embedded in materials, worlds..."""
    import bpy

    for id_ in list(bpy.data.user_map().keys()):
        yield id_
        tree = getattr(id_, "node_tree", None)
        if tree is not None:
            yield tree


def disarm_scripts(ids=None, texts=None):
    """Make sure nothing of the current file can run Python when it is saved and opened again.

    A ``.blend`` target is opened with ``use_scripts=False``, so its text
    blocks registered to run at load and its Python driver expressions do
    not run here; this keeps them from running later, from the saved
    ``--out``: the text blocks' "Register" is unticked (their text stays)
    and drivers whose expression needs Python (not one of Blender's simple
    expressions) are muted.

    Parameters
    ----------
    ids : iterable of bpy.types.ID, optional
        Only these data-blocks' drivers (default: the whole file's); for
        data appended from another file into the user's scene, whose own
        drivers are the user's business.
    texts : iterable of str, optional
        Only these text blocks (default: all).

    Returns
    -------
    list of str
        Warnings saying what was disabled (empty when nothing was).
    """
    import bpy

    names = None if texts is None else set(texts)
    texts = sorted(t.name for t in bpy.data.texts if t.use_module and (names is None or t.name in names))
    for name in texts:
        bpy.data.texts[name].use_module = False
    drivers = []
    for id_ in (_all_ids() if ids is None else [i for i in ids if i is not None]):
        ad = getattr(id_, "animation_data", None)
        if ad is None:
            continue
        for fc in ad.drivers:
            drv = fc.driver
            if drv.type == "SCRIPTED" and not drv.is_simple_expression and not fc.mute:
                fc.mute = True
                drivers.append("{}: {}[{}]".format(id_.name, fc.data_path, fc.array_index))
    warnings = []
    if texts:
        warnings.append("target scripts disabled: text block(s) {} set to run when the file opens are no "
                        "longer registered (their text is kept)".format(", ".join(repr(t) for t in texts)))
    if drivers:
        warnings.append("target scripts disabled: {} Python driver expression(s) muted ({}{})".format(
            len(drivers), ", ".join(drivers[:5]), "..." if len(drivers) > 5 else ""))
    return warnings
