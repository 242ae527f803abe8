"""The one exception family the CLI turns into a single clear error line."""


class GbxculeError(Exception):
    """A user-facing error: bad input, unsupported hardware, a missing device."""
