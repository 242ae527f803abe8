"""The assembler's error type."""

from __future__ import annotations

from gbxcule.core.errors import GbxculeError


class AsmError(GbxculeError):
    """An assembly error; once located, the message names the source, the line number and the line."""

    def __init__(self, message: str, source: str | None = None, line_no: int | None = None,
                 line_text: str | None = None) -> None:
        self.message = message
        self.source = source
        self.line_no = line_no
        self.line_text = line_text
        if line_no is None:
            super().__init__(f"{source}: {message}" if source else message)
        else:
            super().__init__(f"{source}:{line_no}: {message}\n    {line_text.strip() if line_text else ''}")
