"""A counting HTTP proxy in front of the S3 server: every request a client makes, counted at the
server's door, whoever makes it (delta-rs, pyarrow, Spark's s3a, boto3).

Clients point their endpoint at the proxy (`AWS_ENDPOINT_URL=http://127.0.0.1:<port>`); it
forwards each request unchanged to the server (the Host header too, so AWS signatures still
match: s3proxy checks them against the Host it receives) and records one line per request:
method, path, query, status. Standard library only, like `scripts/s3_server.py`:

    python3 scripts/s3_counter.py --upstream 127.0.0.1:9000 --port 9100 [--pid-file F]

Two paths are the proxy's own (a bucket name cannot start with `_`):

    GET  /_counter          the recorded requests as JSON: [[method, path, query, status], ...]
    POST /_counter/reset    forget them

`kind_of` names what a request is (list, get, head, put, delete, post) as a report counts it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import socketserver
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import parse_qs, unquote, urlsplit

CONTROL = "/_counter"
_LOCK = threading.Lock()
_RECORDS: list[tuple[str, str, str, int]] = []


def kind_of(method: str, path: str, query: str) -> str:
    """`list`, `get`, `head`, `put`, `delete` or `post` for one recorded request."""
    method = method.upper()
    if method == "GET":
        params = parse_qs(query, keep_blank_values=True)
        key = path.lstrip("/").partition("/")[2]
        if "list-type" in params or "prefix" in params or "delimiter" in params or not key:
            return "list"
        return "get"
    return method.lower()


def summary(
    records: Iterable[Sequence[object]], *, data_marker: str = "/_delta_log/"
) -> dict[str, int]:
    """Requests by kind, with GETs told apart: `get_log` (a file of a Delta log), `get_data`
    (any other object: a data file, a folder source's file)."""
    counts: dict[str, int] = {}
    for method, path, query, _status in records:
        kind = kind_of(str(method), str(path), str(query))
        if kind == "get":
            kind = "get_log" if data_marker in str(path) else "get_data"
        counts[kind] = counts.get(kind, 0) + 1
    counts["total"] = sum(counts.values())
    return counts


def _read_head(stream) -> bytes:  # type: ignore[no-untyped-def]
    """An HTTP message head (request or status line and headers), b'' at end of stream."""
    lines = []
    while True:
        line = stream.readline(65537)
        if not line:
            return b""
        if not lines and line in (b"\r\n", b"\n"):
            continue  # a stray blank line between messages
        lines.append(line)
        if line in (b"\r\n", b"\n"):
            return b"".join(lines)


def _headers(head: bytes) -> dict[str, str]:
    found = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            found[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return found


def _relay_body(source, target, headers: Mapping[str, str]) -> None:  # type: ignore[no-untyped-def]
    """Copy one message body from `source` to `target` (a socket or file), as its headers say."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = source.readline(65537)
            _send(target, size_line)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = source.readline(65537)
                    _send(target, trailer)
                    if trailer in (b"\r\n", b"\n", b""):
                        return
            _copy(source, target, size + 2)  # the chunk and its CRLF
    length = int(headers.get("content-length", "0") or 0)
    _copy(source, target, length)


def _copy(source, target, length: int) -> None:  # type: ignore[no-untyped-def]
    while length > 0:
        block = source.read(min(length, 1 << 20))
        if not block:
            raise ConnectionError("the peer closed the connection inside a message body")
        _send(target, block)
        length -= len(block)


def _send(target, data: bytes) -> None:  # type: ignore[no-untyped-def]
    if hasattr(target, "sendall"):
        target.sendall(data)
    else:
        target.write(data)


class _Proxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    upstream: tuple[str, int]


class _Handler(socketserver.StreamRequestHandler):
    server: _Proxy

    def handle(self) -> None:
        upstream = socket.create_connection(self.server.upstream)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        replies = upstream.makefile("rb")
        try:
            while self._one(upstream, replies):
                pass
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            replies.close()
            upstream.close()

    def _one(self, upstream: socket.socket, replies) -> bool:  # type: ignore[no-untyped-def]
        """Relay one request and its response; False when the connection ends."""
        head = _read_head(self.rfile)
        if not head:
            return False
        method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        parts = urlsplit(target)
        path = unquote(parts.path)
        if path.startswith(CONTROL):
            return self._control(method, path)
        headers = _headers(head)
        upstream.sendall(head)
        status, reply_head = 0, b""
        if "100-continue" in headers.get("expect", "").lower():
            reply_head = _read_head(replies)
            status = int(reply_head.split(b" ", 2)[1])
            self.wfile.write(reply_head)
            self.wfile.flush()
            if status != 100:  # refused before the body: the client will not send it
                self._record(method, path, parts.query, status)
                _relay_body(replies, self.wfile, _headers(reply_head))
                self.wfile.flush()
                return False
        _relay_body(self.rfile, upstream, headers)
        reply_head = _read_head(replies)
        if not reply_head:
            return False
        status = int(reply_head.split(b" ", 2)[1])
        reply_headers = _headers(reply_head)
        self.wfile.write(reply_head)
        if method != "HEAD" and status not in (204, 304) and status >= 200:
            if "content-length" in reply_headers or "chunked" in reply_headers.get(
                "transfer-encoding", ""
            ):
                _relay_body(replies, self.wfile, reply_headers)
            else:  # a body until the server closes
                while block := replies.read(1 << 16):
                    self.wfile.write(block)
                self._record(method, path, parts.query, status)
                return False
        self.wfile.flush()
        self._record(method, path, parts.query, status)
        return "close" not in reply_headers.get("connection", "").lower()

    def _record(self, method: str, path: str, query: str, status: int) -> None:
        with _LOCK:
            _RECORDS.append((method, path, query, status))

    def _control(self, method: str, path: str) -> bool:
        if method == "POST" and path == CONTROL + "/reset":
            with _LOCK:
                _RECORDS.clear()
            body = b"[]"
        else:
            with _LOCK:
                body = json.dumps(_RECORDS).encode()
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        self.wfile.flush()
        return True


def serve(upstream: str, port: int, host: str = "127.0.0.1") -> _Proxy:
    """A running proxy on `host:port` forwarding to `upstream` (`host:port`), in a thread."""
    up_host, _, up_port = upstream.rpartition(":")
    proxy = _Proxy((host, port), _Handler)
    proxy.upstream = (up_host or "127.0.0.1", int(up_port))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    return proxy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/s3_counter.py", description=__doc__)
    parser.add_argument("--upstream", required=True, help="the S3 server, host:port")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid-file", help="write this process' PID here once listening")
    args = parser.parse_args(argv)
    proxy = serve(args.upstream, args.port)
    if args.pid_file:
        with open(args.pid_file, "w") as handle:
            handle.write(f"{os.getpid()}\n")
    print(f"counting proxy on 127.0.0.1:{args.port} -> {args.upstream}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    proxy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
