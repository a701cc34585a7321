"""How fast a terminal's PTY is read: in batches, at a bounded rate while nobody reads it, never faster than the
echo of typed input allows (pty.py)."""

READS_PER_WAKEUP = 16  # a PTY read returns about 4 KiB; batching saves loop iterations
# What one read of a PTY master brings when more is waiting (the line discipline's 4 KiB less one). A shorter read
# emptied the PTY: reading again at once finds a few bytes and contends for the terminal's lock with the program
# writing, which for a program that writes a line at a time (`seq`) cost a quarter of its rate (bench/ANALYSIS.md).
FULL_READ = 4095
# A terminal that floods while nobody reads it is read at a bounded rate: one read a wake-up, and each time it has
# brought this much the reader rests this long, so its program waits on its own output (as under tmux, or ttyd's
# flow control) instead of taking the event loop, which it shares with every other terminal and the HTTP requests:
# at most about 1.3 MB/s.
UNREAD_FLOOD_BYTES = 64 * 1024
UNREAD_REST_SECONDS = 0.05
# ...but never while the echo of typed input is on its way: the kernel echoes into the same PTY output, and drops
# the echo that finds it full (n_tty.c), so a paste into a resting terminal lost two thirds of what a terminal
# window shows. Each byte written is owed up to ECHO_BYTES_PER_INPUT_BYTE bytes of reading at the full rate ("\n"
# echoes as "\r\n", a control key as "^C"); a flood nobody typed earns nothing. And input is written no faster
# than its echo is read: while more than ECHO_WINDOW_BYTES of input written has not been matched by as many bytes
# read (well under the PTY's 64 KiB), the rest of a paste waits, so a busy event loop delays the echo instead of
# losing it. Echo that does not come (a program
# that turned echo off, a full line the kernel discarded) holds input back for ECHO_PATIENCE_SECONDS at most.
ECHO_BYTES_PER_INPUT_BYTE = 2
ECHO_WINDOW_BYTES = 16 * 1024
ECHO_PATIENCE_SECONDS = 0.2
