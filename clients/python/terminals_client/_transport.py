"""HTTP for the operations of _core: the envelope read, errors typed, a refused rate retried when asked."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Dict, Optional, Tuple

import httpx

from . import _core
from .errors import RateLimited, ServiceUnavailable, TerminalsError, Timeout, from_response

DEFAULT_URL = "http://127.0.0.1:3001"
USER_AGENT = "terminals-client/1.0"


def settings(url: Optional[str], key: Optional[str]) -> Tuple[str, Optional[str]]:
    """The service's URL and key: as given, else TERMINALS_URL and TERMINALS_API_KEY from the environment."""
    url = (url or os.environ.get("TERMINALS_URL") or DEFAULT_URL).rstrip("/")
    key = key or os.environ.get("TERMINALS_API_KEY") or None
    return url, key


def headers(key: Optional[str]) -> Dict[str, str]:
    found = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if key:
        found["X-API-Key"] = key
    return found


def arguments(request: _core.Request, timeout: float) -> Dict[str, Any]:
    """httpx's arguments for a request: a read timeout long enough for the wait the service may hold it."""
    arguments: Dict[str, Any] = {
        "params": request.params,
        "timeout": httpx.Timeout(timeout + request.wait + (_core.REQUEST_MARGIN if request.wait else 0)),
    }
    if request.body is not None:
        arguments["json"] = request.body
    return arguments


def answer(response: httpx.Response, request: _core.Request) -> Any:
    """The answer's data (or text, for a raw request); the typed error for a refusal."""
    if request.raw and response.status_code < 400:
        return response.text
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("success") is True:
        return body.get("data")
    raise from_response(response.status_code, body, response.headers.get("Retry-After"))


def unreachable(url: str, error: Exception) -> TerminalsError:
    if isinstance(error, httpx.TimeoutException):
        return Timeout(f"the service at {url} did not answer in time ({error.__class__.__name__}); "
                       "it may be overloaded: try again", which="request")
    return ServiceUnavailable(f"could not reach the service at {url}: {error}; check TERMINALS_URL and that the "
                              "service runs", code="UNREACHABLE")


class Retry:
    """The opt-in automatic retry of RATE_LIMITED: wait what Retry-After says, at most `limit` seconds in all."""

    def __init__(self, limit: float) -> None:
        self.left = limit

    def delay(self, error: TerminalsError) -> Optional[float]:
        if not isinstance(error, RateLimited) or error.retry_after is None or error.retry_after > self.left:
            return None
        self.left -= error.retry_after
        return error.retry_after


class SyncTransport:
    def __init__(self, url: Optional[str], key: Optional[str], timeout: float, retry_rate_limited: float) -> None:
        self.url, self.key = settings(url, key)
        self.timeout = timeout
        self.retry_rate_limited = retry_rate_limited
        self.http = httpx.Client(base_url=self.url, headers=headers(self.key))

    def send(self, request: _core.Request) -> Any:
        retry = Retry(self.retry_rate_limited)
        while True:
            try:
                try:
                    response = self.http.request(request.method, request.path, **arguments(request, self.timeout))
                except httpx.HTTPError as error:
                    raise unreachable(self.url, error) from error
                return answer(response, request)
            except TerminalsError as error:
                delay = retry.delay(error)
                if delay is None:
                    raise
                time.sleep(delay)

    def run(self, op: _core.Op) -> Any:
        """Drives an operation of _core to its result."""
        try:
            request = next(op)
            while True:
                request = op.send(self.send(request))
        except StopIteration as done:
            return done.value

    def close(self) -> None:
        self.http.close()


class AsyncTransport:
    def __init__(self, url: Optional[str], key: Optional[str], timeout: float, retry_rate_limited: float) -> None:
        self.url, self.key = settings(url, key)
        self.timeout = timeout
        self.retry_rate_limited = retry_rate_limited
        self.http = httpx.AsyncClient(base_url=self.url, headers=headers(self.key))

    async def send(self, request: _core.Request) -> Any:
        retry = Retry(self.retry_rate_limited)
        while True:
            try:
                try:
                    response = await self.http.request(request.method, request.path,
                                                       **arguments(request, self.timeout))
                except httpx.HTTPError as error:
                    raise unreachable(self.url, error) from error
                return answer(response, request)
            except TerminalsError as error:
                delay = retry.delay(error)
                if delay is None:
                    raise
                await asyncio.sleep(delay)

    async def run(self, op: _core.Op) -> Any:
        try:
            request = next(op)
            while True:
                request = op.send(await self.send(request))
        except StopIteration as done:
            return done.value

    async def close(self) -> None:
        await self.http.aclose()
