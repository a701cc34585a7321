"""Failures the terminal runtime and the worker report; each carries the error code the API shows for it. The one
set of these errors, without Django: the web processes rebuild the API's error from the code (exceptions.from_code)."""


class TerminalError(Exception):
    """Base of every runtime failure."""

    code = "INTERNAL_ERROR"

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class SessionNotFound(TerminalError):
    """No live terminal has that id in this worker."""

    code = "TERMINAL_NOT_FOUND"


class SessionInactive(TerminalError):
    """The terminal's process has ended, so it takes no more input or signals."""

    code = "TERMINAL_INACTIVE"


class SessionLimitReached(TerminalError):
    """The worker already hosts as many terminals as it may."""

    code = "LIMIT_REACHED"


class SpawnFailed(TerminalError):
    """The shell or program could not be started."""

    code = "INVALID_INPUT"


class WriteFailed(TerminalError):
    """Input could not be delivered to the terminal."""

    code = "WRITE_FAILED"


class KillFailed(TerminalError):
    """The terminal's processes could not be signalled."""

    code = "KILL_FAILED"


class LineTooLong(TerminalError):
    """A line longer than the terminal's line discipline holds would reach the program cut short."""

    code = "INVALID_INPUT"


class WindowSizeInvalid(TerminalError):
    """A window size the PTY cannot take (the kernel keeps each side in 16 bits) or the service does not allow."""

    code = "INVALID_INPUT"


class TerminalBusy(TerminalError):
    """A command is already running in the terminal's foreground."""

    code = "TERMINAL_BUSY"


class InvalidRequest(TerminalError):
    """The request does not fit this kind of terminal."""

    code = "INVALID_INPUT"


class CommandNotFound(TerminalError):
    """The terminal has no command with that id."""

    code = "COMMAND_NOT_FOUND"


class RecordingNotFound(TerminalError):
    """The recording asked for is not on this host, or its file is gone."""

    code = "RECORDING_NOT_FOUND"


class AccountUnavailable(TerminalError):
    """The Unix account a terminal is to run as does not exist here, or this worker cannot switch to it."""

    code = "FORBIDDEN"
