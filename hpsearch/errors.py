"""Errors that reach the user, and the exit codes they map to."""

from __future__ import annotations

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # trials failed, or the search did not finish
EXIT_BAD_INPUT = 2


class HpsearchError(Exception):
    """An error with a message meant for the user and an exit code."""

    exit_code: int = EXIT_BAD_INPUT


class BadInput(HpsearchError):
    """Bad input in a file: names the file, line and key path, and what was expected."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        self.file, self.line, self.key, self.detail = file, line, key, message
        # no file: a command-line value or a folder, which the message names itself (a
        # "<input>:" prefix only puzzled users: issue 38)
        where = [f"{file or '<input>'}:{line}" if line is not None else file, key]
        super().__init__(": ".join([*filter(None, where), message]))


class BadInputs(BadInput):
    """Several problems in one file, in file order, as a compiler lists them: `errors`, each
    a BadInput; the first one's file, line and key are this error's."""

    def __init__(self, errors: list[BadInput]) -> None:
        first = errors[0]
        super().__init__(first.detail, first.file, first.line, first.key)
        self.errors = errors
        self.args = ("\n".join(map(str, errors)),)

    def __str__(self) -> str:
        return "\n".join(map(str, self.errors))


class Conflict(HpsearchError):
    """Another driver already owns the experiment, or a name is taken."""


class NotFound(HpsearchError):
    """An experiment, trial or file that does not exist."""


class StorageError(HpsearchError):
    """The runs dir cannot be written (disk full, permissions, read-only): the store is
    intact (every change is one transaction), and `resume` continues once it is fixed."""

    exit_code = EXIT_INCOMPLETE


def shown(value: object, limit: int = 80) -> str:
    """repr(value) as a message quotes it: at most about `limit` characters (a spec value
    may be a megabyte long)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"
