"""The preparation's user errors, importable without Beam (the CLI catches them for every command)."""

from __future__ import annotations

from core.errors import UserError


class SourceError(UserError, ValueError):
    """Bad input found before the pipeline starts; the message names file, line and counts."""


class HeldOutError(UserError, ValueError):
    """Too few distinct tuples for the dev/test sizes asked for."""


class EmptyDataError(SourceError):
    """A preparation that would publish an empty split, an empty language or no BPE model; the message
    gives the drop counts by reason that emptied it."""


class BeamOptionError(SourceError):
    """A Beam flag that no runner accepts (an unknown --runner), found before the job starts."""
