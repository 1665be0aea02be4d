"""A real TCP server that answers every request with a line that is not HTTP: what a Pushgateway behind a
misconfigured proxy, or one mid-restart, can send back."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

ACCEPT_POLL_SECONDS = 0.05


@contextmanager
def not_http_server() -> Iterator[str]:
    """`with not_http_server() as url:` an http:// URL whose server replies `SPAM` to any request."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(ACCEPT_POLL_SECONDS)
    stop = threading.Event()

    def answer() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(5)
                connection.recv(65536)
                connection.sendall(b"SPAM\r\n\r\n")

    thread = threading.Thread(target=answer, name="not-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
