"""Request body size limit (docs/service.md §Threat notes).

Bodies larger than ``max_request_bytes`` are refused with 413 before any parsing, both
when ``Content-Length`` announces them and when a chunked body grows past the limit.
The body is read here (at most the limit) and replayed to the app, so the app never
sees a partial body.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import error_response


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that hands out the already-read ``messages`` first, then the rest: how a
    middleware that read the body lets the app read it again."""

    async def replay() -> Message:
        if messages:
            return messages.pop(0)
        return await receive()

    return replay


class BodySizeLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    announced = int(value)
                except ValueError:
                    announced = 0
                if announced > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
        messages: list[Message] = []
        received = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # http.disconnect: let the app see it
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        await self.app(scope, replaying(messages, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413, "payload_too_large", f"request body larger than {self.max_bytes} bytes"
        )
        await response(scope, receive, send)
