"""The page's connection to its kernel, kept through a busy laptop (JupyterLab's server loads this class by name;
see :mod:`helpers.course.labserver`).

When a browser tab's WebSocket closes (a reload, a laptop that slept), the server buffers the kernel's messages
and replays them on reconnection: but between the socket's closing and the server's noticing, every message the
kernel sent raised ``WebSocketClosedError`` (one traceback each, thousands under a busy cell's output) and was
lost, so a cell that had finished stayed ``[*]`` until a reload. :class:`KeptConnection` keeps those messages and
puts them at the head of the replay buffer, quietly.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from tornado.websocket import WebSocketClosedError

__all__ = ["KeptConnection"]


class KeptConnection(ZMQChannelsWebsocketConnection):
    """A kernel WebSocket connection that keeps, rather than loses with a traceback, the messages it could not send
    because the page's socket had just closed; they are replayed when the page reconnects."""

    def _unsent(self) -> list:
        if "_kept" not in self.__dict__:
            self.__dict__["_kept"] = []
        return self.__dict__["_kept"]

    def handle_outgoing_message(self, stream: Any, outgoing_msg: list[Any]) -> None:
        handler = self.websocket_handler
        channel = stream if isinstance(stream, str) else getattr(stream, "channel", None)
        if handler is None or handler.ws_connection is None or handler.ws_connection.is_closing():
            self._unsent().append((channel, outgoing_msg))
            return
        try:
            super().handle_outgoing_message(stream, outgoing_msg)
        except WebSocketClosedError:
            self._unsent().append((channel, outgoing_msg))

    def disconnect(self) -> None:
        kept = self._unsent()
        super().disconnect()
        if not kept:
            return
        buffers = getattr(self.multi_kernel_manager, "_kernel_buffers", {})
        info = buffers.get(self.kernel_id) if self.kernel_id in buffers else None
        if info and info.get("session_key") == self.session_key and "buffer" in info:
            info["buffer"][:0] = [(c, m) for c, m in kept if c is not None]
            self.log.info("kept %d messages sent while the page's socket was closing", len(kept))
        kept.clear()
