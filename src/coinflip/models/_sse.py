"""Server-sent events, decoded incrementally as the bytes arrive, as the WHATWG HTML standard (9.2.6) says
(CRLF, LF or CR end lines, and a CR may end one read and its LF start the next)."""

from __future__ import annotations


class SSEDecoder:
    """Feed it body bytes in any split; it hands back each complete event as (type, data)."""

    def __init__(self) -> None:
        self._partial = bytearray()  # the start of a line whose end has not arrived yet
        self._after_cr = False  # the last read ended with CR: a leading LF now ends nothing
        self._first = True  # a UTF-8 byte order mark may open the stream
        self._data: list[str] = []
        self._type = ""

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
            self._after_cr = False  # that LF was the end of the CRLF: the next one is a line of its own
        if not chunk:
            return []
        self._after_cr = chunk.endswith(b"\r")
        if b"\n" not in chunk and b"\r" not in chunk:  # the middle of a long line: no copy of what came
            self._partial += chunk
            return []
        lines = (bytes(self._partial) + chunk).splitlines(keepends=True)
        self._partial = bytearray() if lines[-1].endswith((b"\n", b"\r")) else bytearray(lines.pop())
        events: list[tuple[str, str]] = []
        for raw in lines:
            line = raw.rstrip(b"\r\n")
            if self._first:
                line, self._first = line.removeprefix(b"\xef\xbb\xbf"), False
            if not line:
                if self._data:
                    events.append((self._type or "message", "\n".join(self._data)))
                self._data, self._type = [], ""
            elif line.startswith(b"data:"):  # nearly every line: the fast path
                self._data.append(line[6 if line[5:6] == b" " else 5 :].decode("utf-8", "replace"))
            elif not line.startswith(b":"):
                name, colon, value = line.decode("utf-8", "replace").partition(":")
                value = value[1:] if colon and value.startswith(" ") else value
                if name == "data":
                    self._data.append(value)
                elif name == "event":
                    self._type = value
                elif name == "error":  # no standard field: llama.cpp's server sends its failure so, then [DONE]
                    self._type, self._data = "error", [value]
        return events
