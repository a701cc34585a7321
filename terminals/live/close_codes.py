"""The live WebSocket's close codes, sent before any terminal byte when a connection is refused:
4401 no valid credentials (or the key was revoked, or its user disabled, while connected), 4403 a
foreign Origin with cookie authentication, or an interactive attach to another user's terminal (staff: after an
error frame saying to use mode=view), 4404 no such terminal (another user's too; or, while connected, access to it
was taken away: a share removed, a staff flag removed), 4409 the terminal no longer holds output, 4429 the user
holds as many live connections as allowed (live_connections.py), 4503 no worker answered.
4012 this server is stopping (1012, Service Restart, in the application's range); reconnect with ?fromByte.
"""

from __future__ import annotations

from ..exceptions import Forbidden, TerminalInactive, TerminalNotFound, WorkerUnavailable

CLOSE_UNAUTHORIZED, CLOSE_FOREIGN_ORIGIN, CLOSE_NOT_FOUND, CLOSE_INACTIVE, CLOSE_UNAVAILABLE = 4401, 4403, 4404, 4409, 4503
CLOSE_TOO_MANY = 4429  # HTTP's 429 in the application's range: the user's live connections are at the cap
CLOSE_CODES = {TerminalNotFound: CLOSE_NOT_FOUND, TerminalInactive: CLOSE_INACTIVE, WorkerUnavailable: CLOSE_UNAVAILABLE}
CLOSE_CODES[Forbidden] = CLOSE_FOREIGN_ORIGIN  # 4403 for both: what this caller may not do (staff: mode=view)
# RFC 6455's registry has 1012 "Service Restart", but a server may send only 1000 and 3000-4999 (autobahn, under
# daphne, refuses the rest): 4012 says the same in the application's range.
CLOSE_SERVER_STOPPING = 4012
