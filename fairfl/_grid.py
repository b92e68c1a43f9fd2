"""A Flower Grid that hands every call to another: the base of fairfl's grid wrappers.

:class:`~fairfl.telemetry.wrapper.RecordingGrid` (records each round) and
:class:`~fairfl.secagg.server.SecureGrid` (runs train batches as SecAgg+ rounds) change
``send_and_receive`` only; everything else a runtime's grid offers is the wrapped one's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid


class PassThroughGrid(Grid):
    """Every call goes to ``grid``; a subclass overrides what it changes."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid

    def set_run(self, run: Any) -> None:
        """The wrapped grid's."""
        self.grid.set_run(run)

    @property
    def run(self) -> Any:
        """The wrapped grid's run."""
        return self.grid.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """The wrapped grid's."""
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        """The wrapped grid's."""
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """The wrapped grid's (only ``send_and_receive`` is ever changed by a subclass)."""
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """The wrapped grid's."""
        return self.grid.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """The wrapped grid's."""
        return self.grid.send_and_receive(messages, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        """Anything else a runtime's grid offers (``get_nodes``) is the wrapped grid's."""
        return getattr(self.grid, name)
