"""The one base class of the errors meant for the user.

An error caused by what the user gave (a recipe key, a data file's line, a model folder, an option, a
missing extra, a download that failed its check) derives from :class:`UserError`: the command line prints
its message as one line and exits with 2, with no traceback; a program calling sentcl can catch this one
class. Anything else that escapes a command is a bug (its traceback is shown) or a failure of the machine.
This module imports nothing from sentcl, so every room can use it.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input or setup, said in one line that names the file and line, the key or the option."""


class MissingDataError(UserError, FileNotFoundError):
    """Data a command needs (an evaluation split, a probe's pairs) is not in the data folder; the message
    says what was looked for and where."""
