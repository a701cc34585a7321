"""Property-based tests (hypothesis) of OutputBuffer and of the read modes, against a simple reference model.

The model keeps every byte ever appended and makes lines by splitting on "\\n". Where the buffer drops old output,
the model takes the buffer's oldest held byte as given and checks, separately, that this eviction point respects
the limits (bytes, lines) and prefers line starts. Everything else (line numbers, line texts, modes, flags, byte
reads, reads since a time) is then computed by the model alone and must equal what the buffer answers.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from terminals.runtime.ansi import strip_ansi
from terminals.runtime.buffer import OutputBuffer
from terminals.runtime.line_reads import MODES, LineRead
from terminals.worker.shapes import bytes_data, line_read_data, read_text

# Deterministic: the same examples on every run and on CI, no example database, no deadline on a loaded machine.
PROFILE = settings(
    derandomize=True, database=None, deadline=None, max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

BIG = 1 << 30  # a byte limit that never evicts
SEARCH = 4096  # how far byte eviction looks for a line start (buffer.py)
NL = 0x0A

# Output pieces: text, line ends of both kinds, a lone \r, multi-byte characters, bytes that are not UTF-8
# (a lone continuation byte, a lead byte without its continuation, 0xff), and escape sequences.
TOKENS = [
    b"a", b"bc", b"line ", b"\n", b"\n", b"\r\n", b"\r", b"", "é".encode(), "€".encode(), "😀".encode(),
    b"\x80", b"\xc3", b"\xe2\x82", b"\xff", b"\x1b[31m", b"\x1b[0m",
]
token = st.sampled_from(TOKENS) | st.binary(max_size=6)
# A piece repeated many times, so that byte limits of a few KiB are reached (eviction needs max_bytes + 4 KiB), with
# lines both shorter and longer than the 4 KiB that eviction looks ahead for a line start.
bulk = st.builds(lambda piece, count: piece * count, st.sampled_from([b"x", b"ab\n", "é".encode(), b"0123456789\r\n"]),
                 st.sampled_from([2, 40, 700, 2600]))
# A line longer than those 4 KiB: eviction cuts it, and then inside a character when it is multi-byte.
long_line = st.sampled_from([b"x" * 5000, "é".encode() * 2600, "😀".encode() * 1300])
payloads = st.lists(token | bulk, max_size=30).map(b"".join)
# Mostly long output, so that it is evicted, by lines and by bytes, in most examples.
long_payloads = st.lists(st.one_of(token, bulk, bulk, long_line), min_size=2, max_size=30).map(b"".join)


def chunked(draw, payload: bytes) -> list[bytes]:
    """The payload cut at arbitrary points: inside lines, between \\r and \\n, inside characters; empty chunks too."""
    cuts = sorted(draw(st.lists(st.integers(0, len(payload)), max_size=25)))
    bounds = [0, *cuts, len(payload)]
    return [payload[start:end] for start, end in zip(bounds, bounds[1:])]


# The reference model


def is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0


def announced_length(lead: int) -> int:
    """Bytes in the UTF-8 sequence this byte starts (1 for anything that is not a lead byte)."""
    return 4 if lead >= 0xF0 else 3 if lead >= 0xE0 else 2 if lead >= 0xC0 else 1


def without_cut_start(raw: bytes) -> bytes:
    """A slice that starts where eviction cut a character: its leading continuation bytes (at most 3) go."""
    skip = 0
    while skip < min(3, len(raw)) and is_continuation(raw[skip]):
        skip += 1
    return raw[skip:]


def without_unfinished_end(raw: bytes) -> bytes:
    """A slice whose end may be a character still arriving: a lead byte followed by fewer continuation bytes than
    it announces (at most 3 of them) goes."""
    trailing = 0
    while trailing < min(4, len(raw)) and is_continuation(raw[-1 - trailing]):
        trailing += 1
    if trailing <= 3 and trailing < len(raw):
        lead = raw[-1 - trailing]
        if lead >= 0xC0 and announced_length(lead) > trailing + 1:
            return raw[: -1 - trailing]
    return raw


def line_text(raw: bytes, *, cut_start: bool, finished: bool) -> str:
    if finished:
        raw = raw.removesuffix(b"\r")  # the PTY's \r\n
    if cut_start:
        raw = without_cut_start(raw)
    if not finished:
        raw = without_unfinished_end(raw)
    return raw.decode("utf-8", "replace")


def choose(mode: str, count: int, head: int, tail: int, limit: int) -> tuple[list[int], tuple[int, int] | None]:
    """Which of count lines a mode shows (offsets), and where a head-tail gap marker goes (offset, lines in gap)."""
    everything = list(range(count))
    if mode == "full":
        return everything[:limit], None
    if mode == "head":
        return everything[: min(head, limit)], None
    if mode == "tail":
        keep = min(tail, limit)
        return everything[count - min(keep, count):], None
    head = min(head, limit)
    tail = min(tail, limit - head)
    if count <= head + tail:
        return everything, None
    return everything[:head] + everything[count - tail:], (head, count - head - tail)


class Model:
    """Every byte appended, every mark of time; the held part starts at the oldest byte the buffer reports."""

    def __init__(self) -> None:
        self.data = b""
        self.arrivals: list[tuple[float, int]] = []  # (time, first byte that arrived then)

    def mark_time(self, when: float) -> None:
        self.arrivals.append((when, len(self.data)))

    def append(self, chunk: bytes) -> None:
        self.data += chunk

    @property
    def end(self) -> int:
        return len(self.data)

    def first_line(self, oldest: int) -> int:
        return self.data[:oldest].count(b"\n")

    def head_cut(self, oldest: int) -> bool:
        return oldest > 0 and self.data[oldest - 1] != NL

    def lines(self, oldest: int) -> tuple[dict[int, str], int, int]:
        """Held lines by absolute number, the number of finished lines ever, of lines ever."""
        first, cut = self.first_line(oldest), self.head_cut(oldest)
        *finished, unfinished = self.data[oldest:].split(b"\n")
        texts = {first + i: line_text(raw, cut_start=cut and i == 0, finished=True) for i, raw in enumerate(finished)}
        finished_total = first + len(finished)
        if unfinished:
            texts[finished_total] = line_text(unfinished, cut_start=cut and not finished, finished=False)
        return texts, finished_total, finished_total + (1 if unfinished else 0)

    def read_lines(self, oldest: int, *, since, mode, head_lines, tail_lines, max_lines) -> LineRead:
        texts, finished_total, total = self.lines(oldest)
        first = self.first_line(oldest)
        requested = first if since is None else since
        start = min(max(requested, first), total)
        offsets, gap = choose(mode, total - start, head_lines, tail_lines, max_lines)
        lines = [texts[start + offset] for offset in offsets]
        if gap:
            lines.insert(gap[0], f"... [{gap[1]} lines omitted] ...")
        if mode in ("full", "head"):
            next_read_from = min(start + len(offsets), finished_total)
        else:
            next_read_from = finished_total
        omitted = total - start - len(offsets)
        evicted = max(0, first - requested)
        return LineRead(
            lines=lines,
            lines_shown=len(offsets),
            total_lines=total,
            next_read_from=next_read_from,
            has_more=next_read_from < finished_total,
            truncated=evicted > 0 or omitted > 0 or (self.head_cut(oldest) and start == first < total)
            or (since is None and oldest > 0),
            lines_omitted=omitted,
            lines_evicted=evicted,
            oldest_line=first,
        )

    def line_since_time(self, oldest: int, when: float) -> int:
        """The line holding the first byte that arrived at or after when (the oldest held one if it was evicted)."""
        arrived = 0.0  # the time each byte arrived is that of the last mark before it
        first_byte = self.end
        for position, (moment, offset) in enumerate(self.arrivals):
            following = self.arrivals[position + 1][1] if position + 1 < len(self.arrivals) else self.end
            arrived = moment
            if arrived >= when and offset < following:
                first_byte = offset
                break
        return self.data[: max(first_byte, oldest)].count(b"\n")


reads = st.fixed_dictionaries({
    "mode": st.sampled_from(MODES),
    "head_lines": st.integers(0, 8),
    "tail_lines": st.integers(0, 8),
    "max_lines": st.integers(0, 14),
})


def check_eviction_point(buffer: OutputBuffer, model: Model, previous_oldest: int) -> int:
    """The oldest held byte is within the limits and not further on than they require; returns it."""
    stats = buffer.stats()
    oldest = stats.oldest_byte
    held_bytes = model.end - oldest
    held_finished = model.data[oldest:].count(b"\n")
    assert previous_oldest <= oldest <= model.end
    # Whatever eviction's slack lets the buffer hold for a while, a reader never sees more than the limits.
    assert held_bytes <= buffer.max_bytes
    assert held_finished <= buffer.max_lines
    # Not over-evicted: a byte eviction keeps max_bytes but for the rest of a line (at most SEARCH bytes);
    # a line eviction keeps exactly max_lines finished lines.
    assert held_bytes >= min(model.end, buffer.max_bytes - SEARCH) or held_finished == buffer.max_lines
    if model.end <= buffer.max_bytes:
        # Only the line limit ever applied: the oldest byte starts the oldest of the newest max_lines lines.
        finished_total = model.data.count(b"\n")
        keep_from = max(0, finished_total - buffer.max_lines)
        expected = sum(len(line) + 1 for line in model.data.split(b"\n")[:keep_from])
        assert oldest == expected
    if oldest != previous_oldest and model.head_cut(oldest):
        # A cut inside a line keeps exactly the newest max_bytes.
        assert oldest == model.end - buffer.max_bytes
    assert stats.total_bytes == model.end == buffer.end
    assert stats.buffer_bytes == held_bytes
    _, _, total = model.lines(oldest)
    assert (stats.total_lines, stats.oldest_line, stats.newest_line) == (total, model.first_line(oldest), total - 1)
    assert stats.buffer_lines == total - model.first_line(oldest)
    return oldest


def check_read_bytes(buffer: OutputBuffer, model: Model, oldest: int, from_byte: int, limit: int,
                     complete: bool) -> tuple[bytes, int]:
    data, start, truncated = buffer.read_bytes(from_byte, limit, complete=complete)
    end = model.end
    assert truncated == (from_byte < oldest)
    base = min(max(from_byte, oldest), end)
    # The start moves only past the continuation bytes of a character that eviction cut in two.
    assert base <= start <= min(base + 3, end)
    assert all(is_continuation(byte) for byte in model.data[base:start])
    if start > base:
        assert base == oldest and (truncated or model.head_cut(oldest))
    assert data == model.data[start : start + len(data)]
    one_character = announced_length(model.data[start]) if start < end else 0
    assert len(data) <= max(limit, one_character)
    if complete and start < end:
        assert data, "a read of a finished output always makes progress"
    stop = start + len(data)
    # Never cut inside a character: not before a continuation byte of a sequence the piece began (unless the limit
    # is smaller than the one character returned), nor, while more may arrive, after an unfinished one.
    unfinished = without_unfinished_end(data) != data
    if stop < end and unfinished and is_continuation(model.data[stop]):
        assert limit < one_character and len(data) == one_character
    if stop == end and not complete:
        assert not unfinished
    return data, stop


@settings(PROFILE, max_examples=300)
@given(data=st.data(), max_lines=st.integers(1, 12), max_bytes=st.sampled_from([1, 10, 300, 3000, BIG]))
def test_buffer_matches_the_model_for_any_output_chunking_and_reads(data, max_lines, max_bytes):
    """Any output, cut into chunks anywhere and read with any parameters between appends, reads as the model says:
    absolute line numbers, line texts, modes, flags, totals, byte reads and reads since a time; evictions keep
    within the byte and line limits without dropping more than they need."""
    payload = data.draw(long_payloads, label="payload")
    chunks = chunked(data.draw, payload)
    buffer, model = OutputBuffer(max_lines=max_lines, max_bytes=max_bytes), Model()
    oldest = 0
    for step, chunk in enumerate(chunks):
        buffer.mark_time(float(step))
        model.mark_time(float(step))
        buffer.append(chunk)
        model.append(chunk)
        oldest = check_eviction_point(buffer, model, oldest)
        for _ in range(data.draw(st.integers(0, 2), label="reads")):
            total = buffer.total_lines
            params = data.draw(reads, label="read")
            since = data.draw(st.none() | st.integers(0, total + 2), label="since")
            assert buffer.read_lines(since=since, **params) == model.read_lines(oldest, since=since, **params)
            when = data.draw(st.integers(-1, 2 * step + 3), label="when") / 2
            assert buffer.line_since_time(when) == model.line_since_time(oldest, when)
            # Anywhere, or near the oldest byte held (where eviction cut), or near the newest.
            near = st.integers(max(0, oldest - 2), oldest + 6) | st.integers(max(0, model.end - 6), model.end + 2)
            from_byte = data.draw(st.integers(0, model.end + 2) | near, label="from_byte")
            limit = data.draw(st.integers(1, 12) | st.just(1 << 20), label="max_bytes")
            check_read_bytes(buffer, model, oldest, from_byte, limit, data.draw(st.booleans(), label="complete"))
            oldest = check_eviction_point(buffer, model, oldest)
    everything = {"since": 0, "mode": "full", "head_lines": 0, "tail_lines": 0, "max_lines": 10**6}
    assert buffer.read_lines(**everything) == model.read_lines(oldest, **everything)


@PROFILE
@given(payload=long_payloads, data=st.data(), max_bytes=st.sampled_from([1, 7, 101, 300, 3000, 5000]),
       read=reads, strip=st.booleans())
def test_no_read_returns_more_than_the_byte_limit_and_each_says_what_was_dropped(payload, data, max_bytes, read,
                                                                                  strip):
    """Appending evicts with slack, yet every read sees exactly the newest max_bytes bytes (less a character cut
    in two at their start) and says truncated when older output was dropped: lines in every mode, lines since a
    time, bytes from an offset (the output endpoint's too), a command's output, the newest text (ACP's)."""
    model, buffer = Model(), OutputBuffer(max_lines=BIG, max_bytes=max_bytes)
    for when, chunk in enumerate(chunked(data.draw, payload)):
        buffer.mark_time(float(when))
        buffer.append(chunk)
    model.append(payload)
    oldest = buffer.oldest_byte
    # The newest max_bytes, or fewer when appending evicted up to a line start a little further on.
    assert oldest == max(0, len(payload) - max_bytes) or len(payload) - max_bytes < oldest and payload[oldest - 1] == NL
    dropped = oldest > 0
    held = payload[oldest:]
    after_drop = without_cut_start(held) if dropped else held  # a byte read from an evicted offset starts there
    assert buffer.stats().buffer_bytes == len(held) <= max_bytes
    assert buffer.read_lines(since=None, **read) == model.read_lines(oldest, since=None, **read)
    everything = buffer.read_lines(since=None, mode="full", max_lines=BIG)
    assert everything.truncated == (dropped or everything.lines_omitted > 0)
    assert buffer.read_lines(since=buffer.line_since_time(-1.0), **read).lines == buffer.read_lines(**read).lines

    assert buffer.read_bytes(0, BIG, complete=True) == (after_drop, len(payload) - len(after_drop), dropped)
    finished = SimpleNamespace(is_alive=False, finished=True, exit_status=None)
    assert bytes_data(finished, buffer, 0, BIG, strip)["truncated"] == dropped
    assert buffer.text_between(0, len(payload)) == (after_drop.decode("utf-8", "replace"), dropped)
    # The newest text (what ACP renders) holds back a character still unfinished at the end.
    assert buffer.text_between(0, None) == (without_unfinished_end(after_drop).decode("utf-8", "replace"), dropped)


@PROFILE
@given(data=st.data(), max_lines=st.integers(1, 12), max_bytes=st.sampled_from([1, 300, BIG]),
       poll_mode=st.sampled_from(["full", "head"]))
def test_polling_with_next_read_from_never_skips_or_repeats_a_line(data, max_lines, max_bytes, poll_mode):
    """Polling with since=nextReadFrom while output arrives in any chunks: every finished line is either shown
    exactly once or counted exactly once in linesEvicted; an unfinished line is shown again once finished."""
    payload = data.draw(long_payloads, label="payload")
    buffer, model = OutputBuffer(max_lines=max_lines, max_bytes=max_bytes), Model()
    since, seen, evicted = 0, {}, 0
    for chunk in chunked(data.draw, payload):
        buffer.append(chunk)
        model.append(chunk)
        for _ in range(data.draw(st.integers(0, 2), label="polls")):
            limit = data.draw(st.integers(1, 6), label="max_lines")
            read = buffer.read_lines(since=since, mode=poll_mode, head_lines=limit, max_lines=limit)
            assert read.lines_evicted == max(0, read.oldest_line - since)
            evicted += read.lines_evicted
            first = max(since, read.oldest_line)
            finished_shown = read.next_read_from - first
            assert 0 <= finished_shown <= read.lines_shown <= finished_shown + 1  # only the last can be unfinished
            for number, text in zip(range(first, read.next_read_from), read.lines):
                assert number not in seen, f"line {number} shown twice"
                seen[number] = text
            assert read.has_more == (read.next_read_from < buffer.finished_lines)
            since = read.next_read_from
    while True:  # the rest, until nothing more is finished
        read = buffer.read_lines(since=since, mode=poll_mode, head_lines=5, max_lines=5)
        evicted += read.lines_evicted
        for number, text in zip(range(max(since, read.oldest_line), read.next_read_from), read.lines):
            assert number not in seen
            seen[number] = text
        since = read.next_read_from
        if not read.has_more:
            break
    finished_total = model.data.count(b"\n")
    assert since == finished_total == buffer.finished_lines
    assert len(seen) + evicted == finished_total
    assert all(0 <= number < finished_total for number in seen)
    texts, _, _ = model.lines(buffer.oldest_byte)
    for number, text in seen.items():
        if number in texts and number != model.first_line(buffer.oldest_byte):
            assert text == texts[number]  # what was shown is what the line still reads


@PROFILE
@given(text=st.text(max_size=300), data=st.data(), max_bytes=st.sampled_from([7, 200, BIG]))
def test_byte_reads_return_whole_characters_and_lose_nothing(text, data, max_bytes):
    """Reading UTF-8 output by byte offset with any limits, while it arrives in any chunks: every piece decodes on
    its own, and the pieces put together are the output (from the oldest byte held, after an eviction)."""
    payload = text.encode() * data.draw(st.sampled_from([1, 40, 400]), label="repeat")
    buffer = OutputBuffer(max_lines=BIG, max_bytes=max_bytes)
    position, pieces, lost = 0, [], False
    for chunk in chunked(data.draw, payload):
        buffer.append(chunk)
        limit = data.draw(st.integers(1, 9) | st.just(1 << 20), label="limit")
        piece, start, truncated = buffer.read_bytes(position, limit)
        if truncated:
            lost, pieces = True, []
        else:
            assert start == position
        pieces.append(piece.decode())  # strict: half a character raises
        position = start + len(piece)
    while position < buffer.end:
        piece, start, truncated = buffer.read_bytes(position, 5, complete=True)
        assert piece, "a read of a finished output always makes progress"
        if truncated:
            lost, pieces = True, []
        pieces.append(piece.decode())
        position = start + len(piece)
    joined = "".join(pieces).encode()
    if lost or buffer.oldest_byte > 0:
        assert payload.endswith(joined)
    else:
        assert joined == payload


@PROFILE
@given(payload=payloads, data=st.data())
def test_time_marks_without_output_between_them_keep_the_later_time(payload, data):
    """When the time is marked again before any output arrives, the output that follows arrived at the later time:
    a read since a time between the two marks starts at that output."""
    buffer, model = OutputBuffer(max_lines=BIG, max_bytes=BIG), Model()
    moment = 0.0
    for chunk in chunked(data.draw, payload):
        for _ in range(data.draw(st.integers(1, 3), label="marks")):
            moment += 1
            buffer.mark_time(moment)
            model.mark_time(moment)
        buffer.append(chunk)
        model.append(chunk)
    for when in range(-1, 2 * int(moment) + 3):
        assert buffer.line_since_time(when / 2) == model.line_since_time(0, when / 2)


# The read modes as the API applies them


texts = st.lists(st.sampled_from(["a", "bc", "é😀", "\n", "\r\n", "\r", "\x1b[32m", " "]), max_size=60).map("".join)


@PROFILE
@given(text=texts, read=reads, strip=st.booleans())
def test_command_output_reads_apply_the_modes_like_the_model(text, read, strip):
    """A command's output (read_text) is split into lines and shaped by mode exactly as the model shapes them."""
    options = {**read, "strip_ansi": strip}
    output, total, shown, omitted = read_text(text, options)
    plain = (strip_ansi(text) if strip else text).replace("\r\n", "\n")
    ends_with_newline = plain.endswith("\n")
    lines = plain.removesuffix("\n").split("\n") if plain else []
    offsets, gap = choose(read["mode"], len(lines), read["head_lines"], read["tail_lines"], read["max_lines"])
    expected = [lines[offset] for offset in offsets]
    if gap:
        expected.insert(gap[0], f"... [{gap[1]} lines omitted] ...")
    assert (total, shown, omitted) == (len(lines), len(offsets), len(lines) - len(offsets))
    assert output == "\n".join(expected) + ("\n" if ends_with_newline and expected else "")
    assert shown <= max(read["max_lines"], 0)


@PROFILE
@given(payload=payloads, read=reads, since=st.none() | st.integers(0, 30), strip=st.booleans(), alive=st.booleans())
def test_output_endpoint_data_matches_the_buffer_read(payload, read, since, strip, alive):
    """The output endpoint's data is the buffer's read: the output joined with \\n (plain with stripAnsi), and stats
    that count the bytes, tokens, shown and omitted lines of exactly that output."""
    buffer = OutputBuffer(max_lines=7, max_bytes=BIG)
    buffer.append(payload)
    session = SimpleNamespace(is_alive=alive, exit_status=None)
    result = buffer.read_lines(since=since, **read)
    data = line_read_data(result, session, strip=strip)
    output = "\n".join(result.lines)
    assert data["output"] == (strip_ansi(output) if strip else output)
    assert data["stats"] == {
        "totalBytes": len(data["output"].encode("utf-8", "surrogatepass")),
        "estimatedTokens": math.ceil(len(data["output"]) / 4),
        "linesShown": result.lines_shown,
        "linesOmitted": result.lines_omitted,
    }
    assert (data["totalLines"], data["nextReadFrom"], data["hasMore"], data["truncated"]) == (
        result.total_lines, result.next_read_from, result.has_more, result.truncated)
    assert (data["oldestLine"], data["linesEvicted"], data["isActive"]) == (
        result.oldest_line, result.lines_evicted, alive)
    assert data["oldestLine"] <= data["nextReadFrom"] <= data["totalLines"]


@PROFILE
@given(text=st.text(max_size=200), data=st.data(), finished=st.booleans())
def test_output_endpoint_byte_reads_cover_the_output_once(text, data, finished):
    """Reading the output endpoint by byte offset (fromByte/nextByte) returns every character once, and eof only
    at the end of the output of a program that has exited."""
    payload = text.encode()
    buffer = OutputBuffer(max_lines=BIG, max_bytes=BIG)
    buffer.append(payload)
    session = SimpleNamespace(is_alive=not finished, finished=finished, exit_status=None)
    position, chunks = 0, []
    for _ in range(len(payload) + 1):
        answer = bytes_data(session, buffer, position, data.draw(st.integers(1, 6), label="maxBytes"), False)
        assert answer["fromByte"] == position
        assert position <= answer["nextByte"] <= answer["totalBytes"] == len(payload)
        assert answer["truncated"] is False
        chunks.append(answer["chunk"])
        position = answer["nextByte"]
        assert answer["eof"] == (finished and position == len(payload))
        if position == len(payload):
            break
    assert "".join(chunks) == payload.decode("utf-8")


# Found by the properties above (kept as examples, so a regression shows under its own name)


def test_a_read_smaller_than_a_character_waits_for_the_whole_character():
    """maxBytes smaller than a character returns that character only once all its bytes arrived."""
    buffer = OutputBuffer(max_lines=10, max_bytes=BIG)
    buffer.append("ࠀ".encode()[:2])
    assert buffer.read_bytes(0, 1) == (b"", 0, False)
    assert buffer.read_bytes(0, 1, complete=True) == ("ࠀ".encode()[:2], 0, False)
    buffer.append("ࠀ".encode()[2:] + b"z")
    assert buffer.read_bytes(0, 1) == ("ࠀ".encode(), 0, False)
    buffer.append(b"\xe2" + b"ab")  # a lead byte broken off by the next one: returned alone, not held back
    assert buffer.read_bytes(4, 1) == (b"\xe2", 4, False)


def test_a_read_after_eviction_skips_a_cut_character_only_at_the_cut():
    """Once eviction cut a line, a read from a later position still starts exactly there, invalid bytes and all."""
    buffer = OutputBuffer(max_lines=10, max_bytes=3)
    buffer.append(b"x" * 5000 + "😀".encode())  # the newest 3 bytes are the end of the 😀: cut inside it
    assert buffer.read_bytes(0, 10)[1] == buffer.end  # the cut part of the 😀 is skipped
    buffer.append(b"\x80z")
    assert buffer.read_bytes(buffer.end - 2, 10) == (b"\x80z", buffer.end - 2, False)


def test_a_second_time_mark_before_any_output_is_when_the_output_arrived():
    """mark_time twice, then output: a read since a time between the marks starts at that output."""
    buffer = OutputBuffer(max_lines=10, max_bytes=BIG)
    buffer.append(b"old\n")
    buffer.mark_time(1.0)
    buffer.mark_time(2.0)
    buffer.append(b"new\n")
    assert buffer.line_since_time(1.5) == 1
    assert buffer.read_lines(since=buffer.line_since_time(1.5)).lines == ["new"]
