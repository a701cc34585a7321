"""Each refused request is logged once, as one line an operator can filter (logger terminals.refusals, INFO), with
no traceback, no duplicate from django.request, and no key."""

from __future__ import annotations

import uuid

import pytest

from .servers import wait_for


@pytest.mark.embedded_only("the log read is the embedded server's own process")
def test_each_refusal_is_one_log_line_without_traceback(server, keys, alice, anonymous):
    # The marker rides in what each request may carry (an unknown query parameter would be refused, 400).
    marker = str(uuid.uuid4())
    log = server.processes[0]
    refused = [
        (anonymous.get(f"/api/terminals?sessionId={marker}"), "401 UNAUTHORIZED"),
        (alice.get(f"/api/terminals/{marker}"), "404 TERMINAL_NOT_FOUND"),
        (alice.get(f"/api/nowhere-{marker}"), "404 NOT_FOUND"),
        (alice.get("/api/terminals", headers={"Authorization": f"Token {keys['bob']}"}, params={"sessionId": marker}),
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


def test_json_logs_are_one_object_per_line_with_keys_masked(orm, keys):
    """TERMINALS_LOG_FORMAT=json: every log record is a JSON object on one line (time, level, logger, message),
    for log pipelines; a key in a URL is masked there as in plain logs."""
    import json

    from .client import Api
    from .servers import start_embedded

    server = start_embedded(TERMINALS_LOG_FORMAT="json")
    try:
        marker = uuid.uuid4().hex[:12]
        bob = keys["bob"]
        assert Api(server.url, None).get(f"/api/terminals?tag={marker}&api_key={bob}").status_code == 401
        log = server.processes[0]

        def records():
            found = []
            for line in log.log().splitlines():
                if line.startswith("{"):
                    found.append(json.loads(line))
            return found

        wait_for(lambda: any(marker in record["message"] for record in records()), 10, "the refusal's record")
        refusal = next(record for record in records() if marker in record["message"])
        assert refusal["level"] == "INFO" and refusal["logger"] == "terminals.refusals", refusal
        assert refusal["message"].startswith("401 UNAUTHORIZED - GET /api/terminals?tag="), refusal
        assert any(record["logger"] == "terminals.worker.server" for record in records())
        assert bob.split(".", 1)[1] not in log.log()
    finally:
        server.stop()
