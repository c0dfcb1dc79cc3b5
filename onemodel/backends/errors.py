"""Errors of the backend layer."""


class BackendUnavailableError(RuntimeError):
    """A backend was asked for on a machine that cannot run it; the message says why.

    A RuntimeError rather than an ImportError: the cause may be a missing library, a missing
    device or a broken driver, and callers only need to know they must pick another backend.
    """
