"""Output bytes as text: decoded without splitting a character, and cut only at a character's boundary."""

from __future__ import annotations


def decode(data: bytes | bytearray, *, at_start: bool = False, at_end: bool = False) -> str:
    """Decodes terminal bytes, replacing invalid ones.

    A slice that starts or ends inside a multi-byte character drops the broken
    piece instead of turning it into replacement characters: at_start drops
    leading continuation bytes, at_end drops an unfinished trailing sequence.
    """
    start, end = 0, len(data)
    if at_start:
        start = skip_continuation_bytes(data, start, end)
    if at_end:
        end = utf8_boundary(data, start, end)
    return bytes(data[start:end]).decode("utf-8", errors="replace")


def utf8_boundary(data: bytes | bytearray, start: int, end: int) -> int:
    """Returns the largest cut <= end that does not split a UTF-8 character."""
    cut = end
    # A character is at most 4 bytes, so at most 3 bytes can belong to an unfinished one.
    while cut > start and end - cut < 4 and is_continuation(data[cut - 1]):
        cut -= 1
    if cut > start and end - cut < 4:
        lead = data[cut - 1]
        if lead >= 0xC0 and sequence_length(lead) > end - cut + 1:
            return cut - 1
    return end


def skip_continuation_bytes(data: bytes | bytearray, start: int, end: int) -> int:
    limit = min(end, start + 3)
    while start < limit and is_continuation(data[start]):
        start += 1
    return start


def is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0


def sequence_length(lead: int) -> int:
    if lead < 0xC0:
        return 1
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    return 2
