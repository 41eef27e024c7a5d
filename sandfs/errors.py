"""Errors a user can act on: the CLI prints their message as one line and exits non-zero."""


class UserError(Exception):
    """A problem with the user's input or machine (not a bug): no traceback, exit status 1."""


class DaemonFailed(UserError):
    """The daemon's own state broke while serving: it unmounted, and says why in one line."""
