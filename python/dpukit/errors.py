"""Errors the front door reports to the user (one clear message, no traceback)."""


class DpukitError(Exception):
    """A failure with a message meant for the user; the CLI prints it and exits 1."""
