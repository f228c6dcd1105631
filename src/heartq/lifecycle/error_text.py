"""What is kept of an attempt's error: clipped for storage, summed up in one line.

A traceback can be megabytes (a recursion, a huge repr); the database keeps its two ends,
where the call that failed and the exception are. Operators read one line first (events,
`dead_reason`, `heartq dlq list`): the traceback's last line.
"""

from __future__ import annotations

from heartq.payload import clean_text

MAX_ERROR_CHARS = 16_000
"""Errors (tracebacks) are stored truncated to this many characters."""


def clip_error(text: str | None) -> str | None:
    """`text` cleaned for storage (`clean_text`) and, if longer than `MAX_ERROR_CHARS`,
    cut in the middle: its start and its end say most."""
    text = clean_text(text)
    if text is None or len(text) <= MAX_ERROR_CHARS:
        return text
    half = MAX_ERROR_CHARS // 2
    return text[:half] + "\n... [truncated] ...\n" + text[-half:]


def error_summary(text: str | None) -> str:
    """The line of an error an operator reads first: a traceback's last line (the
    exception and its message), at most 300 characters."""
    if not text:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""
