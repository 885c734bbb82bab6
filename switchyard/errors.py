"""Typed errors raised inside Switchyard; the server maps them to OpenAI-style HTTP errors in one place."""

from __future__ import annotations


class SwitchyardError(Exception):
    """Base class of every error Switchyard raises on purpose."""


class ModelLoadError(SwitchyardError):
    """A model folder cannot be loaded: a missing or corrupt file, a shape mismatch, an unknown architecture.

    The message names the file and the problem so the user can fix the folder.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class UnsupportedModelError(ModelLoadError):
    """The folder is readable but asks for an architecture or feature Switchyard does not implement."""


class InvalidRequestError(SwitchyardError, ValueError):
    """A request is malformed or can never be served (bad sampling parameter, prompt too long, ...).

    It subclasses ValueError so offline users can catch the familiar type. `param` names the offending field.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


class CapacityError(SwitchyardError):
    """The engine cannot take more work right now (queue full, KV cache full in reject mode).

    `retry_after` (seconds) is the server's estimate of when to try again, when it has one.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)
