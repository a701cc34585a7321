"""Each refused request is logged once, as one line an operator can filter (logger terminals.refusals, INFO), with
no traceback, no duplicate from django.request, and no key."""

from __future__ import annotations

import uuid

import pytest

from .servers import wait_for


@pytest.mark.embedded_only("the log read is the embedded server's own process")
def test_each_refusal_is_one_log_line_without_traceback(server, keys, alice, anonymous):
    marker = uuid.uuid4().hex[:12]
    log = server.processes[0]
    refused = [
        (anonymous.get(f"/api/terminals?tag={marker}"), "401 UNAUTHORIZED"),
        (alice.get(f"/api/terminals/{uuid.uuid4()}?tag={marker}"), "404 TERMINAL_NOT_FOUND"),
        (alice.get(f"/api/nowhere-{marker}"), "404 NOT_FOUND"),
        (alice.get("/api/terminals", headers={"Authorization": f"Token {keys['bob']}"}, params={"tag": marker}),
         "200"),  # a valid X-API-Key with a stray Authorization header is accepted; not a refusal
    ]
    assert [response.status_code for response, _ in refused] == [401, 404, 404, 200]

    def lines():
        return [line for line in log.log().splitlines() if marker in line and "terminals.refusals" in line]

    wait_for(lambda: len(lines()) == 3, 10, "three refusal lines")
    found = lines()
    for (_, expected), line in zip(refused[:3], found):
        assert f"INFO terminals.refusals: {expected} " in line, line
    text = log.log()
    assert not [line for line in text.splitlines() if marker in line and "django.request" in line]
    assert keys["bob"].split(".", 1)[1] not in text
    assert "Traceback" not in "\n".join(line for line in text.splitlines() if marker in line)
