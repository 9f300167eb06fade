"""The one base class of user errors, and the exit codes of every command.

A user error is a problem with what the user gave: a config key, an input file, a damaged or mismatched
file, a location that holds someone else's files. Its message names the key, file or line and says what to
do; the CLI prints it as one line and exits with `Exit.USER_ERROR`. Anything else that escapes a command is
not the input's fault: an unreachable tracking store or cluster (`ConnectionError`, one line) or a bug (its
traceback), both `Exit.FAILED`.
"""

from __future__ import annotations

from enum import IntEnum


class UserError(Exception):
    """A problem with the user's config, input or files; the message says what to change."""


class Exit(IntEnum):
    """Exit codes of every command (`run` uses them all)."""

    OK = 0  # done (run: trained and promoted)
    FAILED = 1  # not the input's fault: the tracking store or cluster unreachable, or a bug
    USER_ERROR = 2  # a user error: one line naming what to change
    NOTHING_TO_DO = 3  # run: every stage up to date
    NOT_PROMOTED = 4  # run: trained, but the challenger did not beat the champion
    ALREADY_RUNNING = 5  # run or a stage command: another command holds the run dir's lock
    INTERRUPTED = 130  # SIGINT
