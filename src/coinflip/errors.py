"""Exceptions that end a run with a one-line message instead of a traceback."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

# a path that cannot take what is written there, whatever is retried: one given is bad input (exit 2)
UNUSABLE_PATH = frozenset(
    {errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG}
    | {errno.EEXIST, errno.EROFS}
)


class CoinflipError(Exception):
    """A problem the user can fix; the CLI prints it on one line and exits with `exit_code`."""

    exit_code = 2


class ConfigError(CoinflipError, ValueError):
    """An invalid setting, caught once at the edge."""


class DataError(CoinflipError, ValueError):
    """A dataset file or row that cannot be used."""


class FatalAPIError(CoinflipError):
    """The server refused the request for a reason retrying cannot fix (bad key, unknown model)."""


class RunIncomplete(CoinflipError):
    """Some samples never got a reply, or the run was interrupted; exit code 1."""

    exit_code = 1


class UnknownSettingError(ConfigError, TypeError):
    """A keyword TaskConfig does not have; a TypeError too, as Python's own would be."""


class EndpointError(FatalAPIError):
    """The endpoint itself is wrong (nothing listening, unknown host, TLS, proxy, redirect): fail in seconds."""


class StorageError(CoinflipError):
    """The run directory cannot be written (disk full, read-only); what finished is kept."""

    exit_code = 1
    errno: int | None = None  # why, for a caller that tells a path it was given from a full disk


class EndpointBroken(RunIncomplete):
    """Every request so far failed the same way after its retries: the server, not a sample, is broken."""


def short(value: object) -> str:
    """A value fit for a one-line message, however large (repr of a 5,000-digit number raises)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 64:
        return "a very long number"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


KEPT = "the saved predictions are kept"  # true of a run stopped by its disk and of a rescore (which changes none)


def reason(exc: OSError) -> str:
    """Why, in words: EEXIST where a folder was made means a file is in its place (mkdir /dev/full)."""
    return "not a folder" if exc.errno == errno.EEXIST else exc.strerror or type(exc).__name__


def storage_error(path: object, exc: OSError, hint: str = KEPT) -> StorageError:
    """A one-line message naming the path, for disk full, read-only and permission problems."""
    error = StorageError(f"cannot write {exc.filename or path}: {reason(exc)}; {hint}")
    error.errno = exc.errno
    return error


@contextlib.contextmanager
def named_output() -> Iterator[None]:
    """Writing where the user said (--out, a work directory's page): a path that cannot be used is bad input
    (exit 2), as everywhere else; a full disk or a failing device leaves the output unfinished (exit 1).
    A decorator too, of a command that writes one."""
    try:
        yield
    except StorageError as exc:
        if exc.errno in UNUSABLE_PATH:
            raise ConfigError(str(exc)) from None
        raise
