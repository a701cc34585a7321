"""runtime/echo.py: which bytes of the output echo typed input, over the byte sequences real shells and programs
produce (taken from bash, zsh, dash, cat and python3 on a PTY), and what a reader sees without them."""

from __future__ import annotations

from terminals.runtime import echo


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def visible(output: bytes, ledger: echo.EchoLedger, marks=()) -> tuple[bytes, int]:
    """What a wait sees of output: the echo left out, up to where it is known."""
    ranges, known = ledger.echo(lambda start, count: output[start:start + count], len(output),
                                lambda at: [mark for mark in marks if mark[0] >= at])
    return echo.without(output[:known], 0, ranges), known


def ledger_with(data: bytes, mode: str, at: int = 0, stale_prompts: int = 0, clock: Clock | None = None):
    ledger = echo.EchoLedger(clock or Clock())
    ledger.typed(at, data, mode, stale_prompts)
    return ledger


def test_a_line_typed_at_a_bash_prompt_is_echo_up_to_its_commands_mark():
    typed = b"sleep 1; echo listening on port 8080\r\n\x1b[?2004l\r"
    output = b"$ " + typed + b"listening on port 8080\r\n$ "
    ledger = ledger_with(b"sleep 1; echo listening on port 8080\n", echo.PROMPT, at=2)
    shown, known = visible(output, ledger, marks=[(2 + len(typed), "C"), (len(output) - 2, "P")])
    assert (shown, known) == (b"$ listening on port 8080\r\n$ ", len(output))


def test_until_the_commands_mark_comes_nothing_after_the_input_is_shown_then_the_first_line_is_echo():
    clock = Clock()
    output = b"$ sleep 1; echo ready\r\n"
    ledger = ledger_with(b"sleep 1; echo ready\n", echo.PROMPT, at=2, clock=clock)
    assert visible(output, ledger) == (b"$ ", 2)
    clock.now += echo.SETTLE_SECONDS
    assert visible(output + b"ready\r\n", ledger) == (b"$ ready\r\n", len(output) + 7)


def test_a_line_that_runs_nothing_is_echo_to_its_end_and_the_shells_complaint_is_shown():
    output = b"$ (\r\nbash: syntax error near unexpected token `newline'\r\n$ "
    ledger = ledger_with(b"(\n", echo.PROMPT, at=2)
    shown, _ = visible(output, ledger, marks=[(len(output) - 2, "P")])
    assert shown == b"$ bash: syntax error near unexpected token `newline'\r\n$ "


def test_a_line_typed_before_the_prompt_is_echo_through_the_kernels_echo_the_prompt_and_the_editors_echo():
    # Typed between a command's end and its prompt: the kernel echoes it, then the line editor draws it again.
    output = b"ls\r\n$ ls\r\n\x1b[?2004l\rfile\r\n$ "
    prompt, command = output.index(b"$ "), output.index(b"file")
    ledger = ledger_with(b"ls\n", echo.PROMPT, stale_prompts=1)
    shown, _ = visible(output, ledger, marks=[(prompt, "P"), (command, "C"), (len(output) - 2, "P")])
    assert shown == b"file\r\n$ "


def test_further_lines_are_echo_from_the_prompt_that_reads_each_to_its_commands_mark():
    output = b"echo one\r\none\r\n$ echo two\r\ntwo\r\n$ "
    first, second_prompt = output.index(b"one\r\n$"), output.index(b"$ echo two")
    second = output.index(b"two\r\n$")
    marks = [(first, "C"), (second_prompt, "P"), (second, "C"), (len(output) - 2, "P")]
    ledger = ledger_with(b"echo one\necho two\n", echo.PROMPT)
    assert visible(output, ledger, marks)[0] == b"one\r\ntwo\r\n$ "


def test_the_kernels_echo_of_each_line_is_found_by_its_text_between_what_the_program_prints():
    output = b"hello\r\ngot HELLO\r\nworld\r\ngot WORLD\r\n"
    ledger = ledger_with(b"hello\nworld\n", echo.KERNEL)
    assert visible(output, ledger) == (b"got HELLO\r\ngot WORLD\r\n", len(output))
    # A control key echoes as ^C; end of file echoes nothing.
    assert visible(b"^C\r\nbye\r\n", ledger_with(b"\x03", echo.KERNEL))[0] == b"\r\nbye\r\n"


def test_output_after_a_kernel_echo_not_yet_shown_is_held_back_until_it_shows_or_is_overdue():
    clock = Clock()
    ledger = ledger_with(b"hello\n", echo.KERNEL, at=5, clock=clock)
    assert visible(b"12345hel", ledger) == (b"12345", 5)
    clock.now += echo.SETTLE_SECONDS
    assert visible(b"12345hel", ledger) == (b"12345hel", 8)


def test_a_line_editors_echo_is_found_by_its_text_and_a_line_it_redrew_across_rows_ends_at_its_line_end():
    output = b">>> print('server ' + 'ready'.upper())\r\nserver READY\r\n>>> "
    ledger = ledger_with(b"print('server ' + 'ready'.upper())\n", echo.EDITOR, at=4)
    assert visible(output, ledger)[0] == b">>> server READY\r\n>>> "
    clock = Clock()
    wrapped = b">>> print('aaaaaaaaaaaaaaaa\raaaaaaaaa')\r\naaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
    ledger = ledger_with(b"print('" + b"a" * 25 + b"')\n", echo.EDITOR, at=4, clock=clock)
    assert visible(wrapped, ledger) == (b">>> ", 4)  # held while the echo may still come whole
    clock.now += echo.SETTLE_SECONDS
    assert visible(wrapped, ledger)[0] == b">>> " + b"a" * 25 + b"\r\n"


def test_with_echo_off_nothing_is_left_out_and_old_inputs_are_forgotten():
    ledger = ledger_with(b"secret\n", echo.NONE)
    assert visible(b"\r\nok\r\n", ledger)[0] == b"\r\nok\r\n"
    ledger = echo.EchoLedger(Clock())
    for number in range(echo.KEPT_INPUTS + 5):
        ledger.typed(number, b"x", echo.KERNEL)
    assert len(ledger._inputs) == echo.KEPT_INPUTS
