"""Refusing a JSON request body that names a key twice, or that is past the document bounds
(nested too deep, a string or number too long: ``planner.loading.json_shape_problem``,
checked before any parser recurses; docs/service.md §Errors).

JSON parsers keep the last of two equal keys, so ``{"epsilon": 0.7, "epsilon": 9}`` would
silently plan at 9. The body is checked here, before FastAPI parses it, and answered 422
``invalid_input`` naming the duplicated key's path, in the envelope of every other 422.
A body that is not JSON passes through, so FastAPI reports it as before.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from accounting.errors import shown
from app.errors import validation_response
from app.limits import replaying
from planner.loading import duplicate_key_path, json_shape_problem


def is_json_request(scope: Scope) -> bool:
    """FastAPI reads a body as JSON when it has no content type or a JSON one."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media = value.decode("latin-1").split(";", 1)[0].strip().lower()
            return media == "application/json" or media.endswith("+json")
    return True


class DuplicateKeyMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS") or not is_json_request(scope):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        body = b""
        while True:  # the body size limit (app/limits.py) wraps this, so the body is bounded
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        problem = json_shape_problem(body)
        if problem is not None:
            response = validation_response([{
                "type": "document_shape", "loc": ("body",), "msg": f"the request body holds {problem}",
            }])
            await response(scope, receive, send)
            return
        path = duplicate_key_path(body) if body.strip() else None
        if path is not None:
            key = path[-1]
            response = validation_response([{
                "type": "duplicate_key", "loc": ("body", *path),
                "msg": f"duplicate key {shown(key)!r} in the request body: give each key once",
            }])
            await response(scope, receive, send)
            return

        await self.app(scope, replaying(messages, receive), send)
