"""Errors of the command line: a user error printed as ``neural-ik COMMAND: error: MESSAGE`` with its exit code.

The command line words the settings a message names as their flags (:func:`..errors.flag_word`).
"""

from __future__ import annotations

import sys

from ..errors import SettingError, UserError, flag_word, worded

__all__ = ["CliError", "UsageError", "guarded", "say", "exit_code", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_INTERRUPTED"]


EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class CliError(UserError):
    """A user error of the command line: printed as ``neural-ik: <message>`` without a traceback.

    Parameters
    ----------
    message : str
        Names the file and the problem (and may name a setting:
        :func:`..errors.setting`).
    code : int
        Exit code (1 failure, 2 bad arguments).
    """

    def __init__(self, message, code=EXIT_FAILED):
        super().__init__(message)
        self.code = code


class UsageError(CliError, SettingError):
    """Bad arguments (exit code 2)."""

    def __init__(self, message):
        super().__init__(message, EXIT_USAGE)


def guarded(run):
    """Wrap a subcommand's ``run(args)``: a user error (:class:`..errors.UserError`, :class:`CliError`) prints
    its message, the settings it names worded as flags, and returns its exit code (:func:`exit_code`).

    Parameters
    ----------
    run : callable
        ``run(args) -> int``.

    Returns
    -------
    callable
    """

    def wrapper(args):
        try:
            return run(args)
        except UserError as ex:
            print("neural-ik {}: error: {}".format(getattr(args, "command", ""), say(ex)), file=sys.stderr)
            return exit_code(ex)

    wrapper.__doc__ = run.__doc__
    wrapper.__name__ = run.__name__
    return wrapper


def say(text) -> str:
    """A message, an error or a warning as the command line prints it: the settings it names as flags."""
    return worded(text, flag_word)


def exit_code(ex) -> int:
    """The exit code of a user error: its own (:class:`CliError`), 2 for a bad setting, else 1."""
    code = getattr(ex, "code", None)
    if isinstance(code, int):
        return code
    return EXIT_USAGE if isinstance(ex, SettingError) else EXIT_FAILED
