"""Progress output: a tqdm bar on a terminal, one plain log line per round otherwise.

Chosen by ``sys.stderr.isatty()`` so that logs captured by a job runner or CI stay
line-oriented and readable.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from trainer.run.metrics import RoundRecord


def describe_round(record: RoundRecord, total_rounds: int) -> str:
    """One human line for a round: metrics, privacy spent, aborts, time.

    ``round N`` is the global round index exactly as in ``rounds.jsonl``, the plots and the
    service's ledger; ``[k/T]`` counts the rounds done.
    """
    parts = [f"round {record.round} [{record.round + 1}/{total_rounds}]"]
    if record.loss is not None:
        parts.append(f"loss {record.loss:.4f}")
    if record.accuracy is not None:
        parts.append(f"acc {record.accuracy:.4f}")
    spent = [f"{g}={e:.3g}" for g, e in record.epsilon_spent.items() if e is not None]
    if spent:
        parts.append("eps " + ",".join(spent))
    parts.append(f"clients {sum(record.survived.values())}/{sum(record.sampled.values())}")
    if record.aborted_pools:
        parts.append("ABORTED " + ", ".join(
            f"{pool} ({record.abort_reasons[pool]})" if pool in record.abort_reasons else pool
            for pool in record.aborted_pools
        ))
    if record.nonfinite_updates:
        parts.append(f"non-finite updates sent as zeros: {record.nonfinite_updates}")
    if record.diverged:
        parts.append("DIVERGED")
    parts.append(f"{record.seconds:.2f}s")
    return "  ".join(parts)


class Progress:
    """Round progress for ``total_rounds`` global rounds, starting after ``initial`` done."""

    def __init__(self, total_rounds: int, initial: int, stream: TextIO | None = None, use_bar: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total_rounds = total_rounds
        self.use_bar = self.stream.isatty() if use_bar is None else use_bar
        self._bar: Any = None
        if self.use_bar:
            from tqdm import tqdm

            self._bar = tqdm(total=total_rounds, initial=initial, file=self.stream, unit="round")

    def round_done(self, record: RoundRecord) -> None:
        if self._bar is not None:
            postfix = {}
            if record.accuracy is not None:
                postfix["acc"] = f"{record.accuracy:.3f}"
            if record.aborted_pools:
                postfix["aborted"] = ",".join(record.aborted_pools)
            self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(1)
            for pool in record.aborted_pools:  # the bar has room for ids only: each reason on its line
                self.message(f"pool {pool} aborted: {record.abort_reasons.get(pool, 'no reason recorded')}")
        else:
            self.stream.write(describe_round(record, self.total_rounds) + "\n")
            self.stream.flush()

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
