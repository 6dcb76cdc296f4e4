"""``LoopbackGrid``: Flower's ``Grid`` in one process, for tests and dry runs (docs/flower.md §4).

It delivers every message to a real ``ClientApp`` as a SuperNode would, without Ray,
processes or sockets:

- every message and every reply goes through Flower's own protobuf serialisation
  (``recorddict_to_proto``/``recorddict_from_proto``), so what a node receives is a copy,
  as across a network, and a record Flower cannot carry fails here too;
- each node has its own ``Context`` whose ``state`` is serialised the same way between
  messages (a deployment starts a new ClientApp process per message) and is left
  unchanged when the ClientApp raises, as Flower's ``flwr-clientapp`` does;
- an exception becomes an error reply (``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``, the
  exception's type and text as the reason);
- ``drop(node_id, message_type, group_id)`` makes a node vanish for that message (no
  reply: a dropout), and ``offline`` removes nodes from ``get_node_ids``.

Everything the server received is kept in ``received`` (for audits).
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

DropRule = Callable[[int, str, str], bool]


def wire_copy(content: RecordDict) -> RecordDict:
    """``content`` after a trip through Flower's wire format."""
    return recorddict_from_proto(recorddict_to_proto(content))


class LoopbackGrid(Grid):
    """An in-process Grid over ``node_configs`` (node id -> its ``--node-config``), running ``client_app``."""

    def __init__(
        self,
        client_app: ClientApp,
        node_configs: Mapping[int, Mapping[str, Any]],
        run_config: Mapping[str, Any],
        *,
        run_id: int = 1,
        drop: DropRule | None = None,
    ) -> None:
        self.client_app = client_app
        self.contexts = {
            int(node): Context(run_id, int(node), dict(config), RecordDict(), dict(run_config))
            for node, config in node_configs.items()
        }
        self.drop = drop
        self.offline: set[int] = set()
        self.received: list[Message] = []
        self.delivered: list[Message] = []
        self.client_seconds: dict[str, float] = {}
        self._replies: dict[str, Message] = {}
        self._run = Run.create_empty(run_id)
        # Message() reads the sender's identity from the process (set by Flower's runtimes).
        TaskIdentity.run_id = run_id
        TaskIdentity.node_id = SUPERLINK_NODE_ID
        TaskIdentity.task_id = 0

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(
        self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return [node for node in self.contexts if node not in self.offline]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            ids.append(message.metadata.message_id)
            reply = self._deliver(message)
            if reply is not None:
                self._replies[message.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = [self._replies.pop(i) for i in message_ids if i in self._replies]
        self.received.extend(replies)
        return replies

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(list(self.push_messages(messages)))

    def _deliver(self, message: Message) -> Message | None:
        node = message.metadata.dst_node_id
        kind = message.metadata.message_type
        if node not in self.contexts or node in self.offline:
            return None
        if self.drop is not None and self.drop(node, kind, message.metadata.group_id):
            return None
        delivered = copy.copy(message)  # same metadata, content copied over the wire format
        delivered.content = wire_copy(message.content)
        self.delivered.append(delivered)
        context = self.contexts[node]
        before = context.state
        context.state = wire_copy(before)  # the state a new ClientApp process is handed
        started = time.perf_counter()
        try:
            reply = self.client_app(delivered, context)
        except Exception as exc:  # a ClientApp exception is an error reply, as in flwr-clientapp
            context.state = before
            reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, f"{type(exc)}:<'{exc}'>"), reply_to=delivered)
        self.client_seconds[kind] = self.client_seconds.get(kind, 0.0) + time.perf_counter() - started
        if reply.has_content():
            reply.content = wire_copy(reply.content)
        reply.metadata.__dict__["_message_id"] = uuid.uuid4().hex
        return reply
