"""Who the nodes are: the server's ``HELLO`` exchange, shared by every Flower unit (docs/flower.md §2, §9, §10).

``NodeRoster.refresh`` asks each node the Grid lists and the server has not met yet (not
admitted, not left out) the unit's hello message, with the plan's fingerprint, and reads
the replies in node-id order. A node that answers with an error or holds another plan is
left out; any other reply goes to the unit's ``admit``, which records the node (its group,
its silo, its client) or returns the reason it is left out. Every node left out is logged
once, ``node N left out: <reason>``, and never asked again; a node that does not answer is
asked again at the next refresh.

``flwr.app`` and ``trainer.flower.messages`` only (no torch): the silo and metric
ServerApps import it at start-up.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from flwr.app import ConfigRecord, Message, RecordDict

from trainer.flower import messages

if TYPE_CHECKING:
    from flwr.serverapp import Grid

PlanT = TypeVar("PlanT")
Log = Callable[[str], None]


@dataclass
class NodeRoster(ABC, Generic[PlanT]):
    """The hello exchange and the nodes left out; a unit adds what it learns from a node (``admit``)."""

    grid: Grid
    plan: PlanT
    plan_fingerprint: str
    timeout: float
    log: Log = print
    excluded: dict[int, str] = field(default_factory=dict)
    online: frozenset[int] = frozenset()

    hello: ClassVar[str]  # the unit's hello message type

    @abstractmethod
    def met(self) -> set[int]:
        """The nodes admitted so far."""

    @abstractmethod
    def admit(self, node: int, record: ConfigRecord) -> str | None:
        """Record ``node`` from its reply (its plan's fingerprint already checked); else why it is left out."""

    @abstractmethod
    def joined_line(self) -> str:
        """Who joined, as the ServerApp logs it once it has met the nodes."""

    def refresh(self) -> None:
        """Meet the listed nodes not met yet (those that do not answer are asked again next round)."""
        listed = sorted(int(node) for node in self.grid.get_node_ids())
        self.online = frozenset(listed)
        met = self.met()
        new = [n for n in listed if n not in met and n not in self.excluded]
        if not new:
            return
        request = RecordDict({messages.REPLY: ConfigRecord({"plan_fingerprint": self.plan_fingerprint})})
        outgoing = [Message(request, node, self.hello, ttl=self.timeout) for node in new]
        replies = sorted(self.grid.send_and_receive(outgoing, timeout=self.timeout),
                         key=lambda r: int(r.metadata.src_node_id))
        for reply in replies:
            node = int(reply.metadata.src_node_id)
            reason = self._reason(node, reply)
            if reason is not None:
                self.excluded[node] = reason
                self.log(f"node {node} left out: {reason}")

    def _reason(self, node: int, reply: Message) -> str | None:
        if reply.has_error():
            return f"error: {reply.error.reason}"
        record = reply.content.config_records[messages.REPLY]
        if str(record["plan_fingerprint"]) != self.plan_fingerprint:
            return "holds another plan"
        return self.admit(node, record)

    def wait_for(self, count: int, timeout: float) -> None:
        """Block until ``count`` nodes are listed (or ``timeout`` seconds passed), then meet them."""
        deadline = time.monotonic() + timeout
        while len(list(self.grid.get_node_ids())) < count and time.monotonic() < deadline:
            time.sleep(0.5)
        self.refresh()


def nodes_per_group(groups: Mapping[int, str], group_ids: Iterable[str]) -> str:
    """``3 node(s) joined: g=2, h=1``: the nodes met (node -> group) counted per group, in ``group_ids``' order."""
    return f"{len(groups)} node(s) joined: " + ", ".join(
        f"{g}={sum(1 for x in groups.values() if x == g)}" for g in group_ids)
