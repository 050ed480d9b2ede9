"""User-facing errors: the CLI prints their message (which names the file, sample or option at fault)
and exits with status 2, without a traceback."""


class AvaError(Exception):
    """Base of every error whose message is meant for the user."""
