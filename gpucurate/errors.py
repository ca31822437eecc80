"""Error types. Every error a user can cause is one of these and prints as one line."""


class GpucurateError(Exception):
    """Base class: the CLI prints ``error: <message>`` and exits with ``exit_code``."""

    exit_code = 1


class ConfigError(GpucurateError):
    """A config file, ``--set`` override or API argument is invalid."""

    exit_code = 2


class InputError(GpucurateError):
    """An input file, row or field is unreadable or violates the data contract.

    The message names the file, and the row (1-based line for JSON Lines, 0-based row for Parquet)
    or field where one is known.
    """

    def __init__(self, message: str, path: str | None = None, row: int | None = None, field: str | None = None):
        where = ""
        if path is not None:
            where = str(path)
            if row is not None:
                where += f":{row}"
            where += ": "
        if field is not None:
            message = f"field '{field}': {message}"
        super().__init__(where + message)
        self.path, self.row, self.field, self.reason = path, row, field, message


class ArgumentError(ConfigError, ValueError):
    """A bad argument value of a command or an API function (also a ``ValueError`` for API callers)."""


class OutputError(GpucurateError):
    """The environment refuses the output: a directory that cannot be created or written, a path under a
    file, a full disk; or a run directory that another command needs is incomplete or unreadable.

    The message names the path.
    """

    exit_code = 1

    def __init__(self, message: str, path=None):
        super().__init__(f"{path}: {message}" if path is not None else message)
        self.path = path


class LockedError(GpucurateError):
    """Another gpucurate process holds the lock of the output directory or ingest state; the message names
    it (pid, host, start time)."""

    exit_code = 4


class SinkError(GpucurateError):
    """A database sink (PostgreSQL/pgvector) cannot be reached, lacks what it needs, or rejected a write.

    The message names the server as ``host:port/dbname``, never the password.
    """

    exit_code = 1


class WorkerLostError(GpucurateError):
    """A Dask worker died while running the command's tasks (killed, or past its memory limit): the
    environment's limit, not a bug; the message names the step, the workers' memory limit and what to
    change."""

    exit_code = 1
