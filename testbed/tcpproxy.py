"""A TCP forwarder between a client and a server that a test can cut and restore (a network partition).

Owns: one listening port on 127.0.0.1 forwarding bytes both ways to `target` (TLS passes through
untouched); `cut()` closes every forwarded connection and refuses new ones (accepted, then closed at
once) until `restore()`; `delay_seconds` holds each chunk a client sends for that long before forwarding it
(a round trip to a distant server: one request, one delay). Threads only; everything is closed by `close()` or
leaving the context.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

CHUNK = 65536


class TcpProxy:
    """Forward 127.0.0.1:`port` to `target` (host, port)."""

    def __init__(self, target: tuple[str, int], delay_seconds: float = 0.0) -> None:
        self.target, self.delay_seconds = target, delay_seconds
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name="tcpproxy")
        self._thread.start()

    def cut(self) -> None:
        """Close every forwarded connection and refuse new ones."""
        with self._lock:
            self._cut = True
            for sock in self._open:
                _close(sock)
            self._open.clear()

    def restore(self) -> None:
        """Forward new connections again."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        """Stop listening and close everything."""
        self.cut()
        self._closed = True
        _close(self._listener)
        self._thread.join(timeout=5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut
            if refused:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._open |= {client, server}
            for source, sink, delay in ((client, server, self.delay_seconds), (server, client, 0.0)):
                threading.Thread(target=self._pump, args=(source, sink, delay), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, delay: float) -> None:
        try:
            while data := source.recv(CHUNK):
                if delay:
                    time.sleep(delay)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open.discard(source)
                self._open.discard(sink)
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
