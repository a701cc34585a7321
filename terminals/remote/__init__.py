"""The web processes' side of the terminal workers: reaching a terminal held in a worker process over the channel
layer (client), following its output live (follow), telling live clients when its worker is gone (watch), renewing
their viewer leases (leases), and the messages both sides speak (protocol). Nothing here runs in a worker, except
protocol.py, which the worker reads too; nothing here imports terminals.worker."""
