"""SPDY/3.1 as Kubernetes speaks it for exec: github.com/moby/spdystream and its `spdy` package.

Kubernetes upgrades `exec`, `attach` and `port-forward` requests to SPDY/3.1
(k8s.io/apimachinery/pkg/util/httpstream/spdy, over spdystream). A 1.36 API server turns a
client's v5 websocket exec into SPDY towards the kubelet (TranslateStreamCloseWebsocketRequests,
on by default) and kubectl 1.20 speaks SPDY itself, so the simulated kubelet serves it too
(tests/world/exec_server.py). This module is the wire format and the server side of one
connection; tests/world/selftest/test_exec_spdy.py drives it with a client made of the same
`Framer`.

Followed, from moby/spdystream at f0be51f (the same code as the docker/spdystream vendored in
Kubernetes 1.20; only comments and locking differ):

- spdy/read.go and spdy/write.go: every frame has an 8-byte head; a control frame is
  `1 | version(15) | type(16)`, `flags(8) | length(24)`; a data frame `0 | stream id(31)`,
  `flags(8) | length(24)`. Header blocks are `count(32)` and then `len(32) name len(32) value`,
  names lowercase, several values of one name joined by NUL; zlib-compressed with the SPDY/3
  dictionary (spdy/dictionary.go) at best compression, with one compression context per
  direction for the whole connection and a sync flush after each block (write.go:184-226,
  read.go:131-144).
- connection.go and stream.go: the server takes odd, increasing stream ids (validateStreamId,
  connection.go:941); it echoes the peer's pings (the ids of the other parity,
  connection.go:619-632); SETTINGS, WINDOW_UPDATE and HEADERS change nothing (no flow control,
  connection.go:417-447); a peer's GOAWAY or end of file stops the read loop, after which no
  frame can be written (connection.go:384-395 closes closeChan, and the framer then refuses
  writes, connection.go:108-139 and :150-163); Close sends GOAWAY naming the last stream
  received (connection.go:766-792).
- k8s.io/apimachinery/pkg/util/httpstream/spdy/connection.go (1.20): each new stream is handed
  to the handler, then answered with an empty SYN_REPLY (newSpdyStream, :150-165); closing the
  connection resets every stream first (RST_STREAM CANCEL for a stream not yet finished,
  stream.go:183-208) and then closes spdystream's connection (:102-117).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import zlib
from dataclasses import dataclass

log = logging.getLogger(__name__)

VERSION = 3

# Control frame types (spdy/types.go:21-33).
SYN_STREAM = 0x1
SYN_REPLY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PING = 0x6
GOAWAY = 0x7
HEADERS = 0x8
WINDOW_UPDATE = 0x9

FLAG_FIN = 0x01  # control and data frames alike
FLAG_UNIDIRECTIONAL = 0x02  # SYN_STREAM

# RST_STREAM statuses (spdy/types.go:102-114) and GOAWAY's OK (:170-174).
PROTOCOL_ERROR = 1
CANCEL = 5
GOAWAY_OK = 0
CLOSE_WAIT_S = 10.0
"""How long a closing session reads on, waiting for the client to end the connection."""

MAX_DATA_LENGTH = (1 << 24) - 1  # spdy/types.go:52
MAX_STREAM_ID = 0x7FFFFFFF

# The SPDY/3 header dictionary, byte for byte as spdy/dictionary.go has it (1423 bytes, Adler-32
# 0xe3c6a7c2, which zlib writes into the stream header and checks on the other side).
DICTIONARY = bytes.fromhex(
    "000000076f7074696f6e73000000046865616400000004706f7374000000037075740000000664656c657465"
    "000000057472616365000000066163636570740000000e6163636570742d636861727365740000000f616363"
    "6570742d656e636f64696e670000000f6163636570742d6c616e67756167650000000d6163636570742d7261"
    "6e6765730000000361676500000005616c6c6f770000000d617574686f72697a6174696f6e0000000d636163"
    "68652d636f6e74726f6c0000000a636f6e6e656374696f6e0000000c636f6e74656e742d6261736500000010"
    "636f6e74656e742d656e636f64696e6700000010636f6e74656e742d6c616e67756167650000000e636f6e74"
    "656e742d6c656e67746800000010636f6e74656e742d6c6f636174696f6e0000000b636f6e74656e742d6d64"
    "350000000d636f6e74656e742d72616e67650000000c636f6e74656e742d7479706500000004646174650000"
    "0004657461670000000665787065637400000007657870697265730000000466726f6d00000004686f737400"
    "00000869662d6d617463680000001169662d6d6f6469666965642d73696e63650000000d69662d6e6f6e652d"
    "6d617463680000000869662d72616e67650000001369662d756e6d6f6469666965642d73696e63650000000d"
    "6c6173742d6d6f646966696564000000086c6f636174696f6e0000000c6d61782d666f727761726473000000"
    "06707261676d610000001270726f78792d61757468656e7469636174650000001370726f78792d617574686f"
    "72697a6174696f6e0000000572616e676500000007726566657265720000000b72657472792d616674657200"
    "00000673657276657200000002746500000007747261696c6572000000117472616e736665722d656e636f64"
    "696e6700000007757067726164650000000a757365722d6167656e7400000004766172790000000376696100"
    "0000077761726e696e67000000107777772d61757468656e746963617465000000066d6574686f6400000003"
    "6765740000000673746174757300000006323030204f4b0000000776657273696f6e00000008485454502f31"
    "2e310000000375726c000000067075626c69630000000a7365742d636f6f6b69650000000a6b6565702d616c"
    "697665000000066f726967696e31303031303132303132303232303532303633303033303233303333303433"
    "3035333036333037343032343035343036343037343038343039343130343131343132343133343134343135"
    "343136343137353032353034353035323033204e6f6e2d417574686f726974617469766520496e666f726d61"
    "74696f6e323034204e6f20436f6e74656e74333031204d6f766564205065726d616e656e746c793430302042"
    "6164205265717565737434303120556e617574686f72697a656434303320466f7262696464656e343034204e"
    "6f7420466f756e6435303020496e7465726e616c20536572766572204572726f72353031204e6f7420496d70"
    "6c656d656e746564353033205365727669636520556e617661696c61626c654a616e20466562204d61722041"
    "7072204d6179204a756e204a756c204175672053657074204f6374204e6f76204465632030303a30303a3030"
    "204d6f6e2c205475652c205765642c205468752c204672692c205361742c2053756e2c20474d546368756e6b"
    "65642c746578742f68746d6c2c696d6167652f706e672c696d6167652f6a70672c696d6167652f6769662c61"
    "70706c69636174696f6e2f786d6c2c6170706c69636174696f6e2f7868746d6c2b786d6c2c746578742f706c"
    "61696e2c746578742f6a6176617363726970742c7075626c6963707269766174656d61782d6167653d677a69"
    "702c6465666c6174652c73646368636861727365743d7574662d38636861727365743d69736f2d383835392d"
    "312c7574662d2c2a2c656e713d302e"
)

Headers = dict[str, list[str]]
"""A header block: lowercase names, each with its values in order (Go's http.Header)."""


@dataclass(frozen=True)
class SynStream:
    stream_id: int
    headers: Headers
    flags: int = 0
    associated_to: int = 0
    priority: int = 0  # 3 bits
    slot: int = 0


@dataclass(frozen=True)
class SynReply:
    stream_id: int
    headers: Headers
    flags: int = 0


@dataclass(frozen=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True)
class Settings:
    entries: tuple[tuple[int, int, int], ...] = ()  # (flag, id, value)
    flags: int = 0


@dataclass(frozen=True)
class Ping:
    id: int


@dataclass(frozen=True)
class GoAway:
    last_good_stream_id: int
    status: int = GOAWAY_OK


@dataclass(frozen=True)
class HeadersFrame:
    stream_id: int
    headers: Headers
    flags: int = 0


@dataclass(frozen=True)
class WindowUpdate:
    stream_id: int
    delta: int


@dataclass(frozen=True)
class Data:
    stream_id: int
    data: bytes
    flags: int = 0


Frame = (SynStream | SynReply | RstStream | Settings | Ping | GoAway | HeadersFrame
         | WindowUpdate | Data)


class SpdyError(Exception):
    """A frame spdystream's reader refuses (spdy/types.go:209-219 names the cases); the
    connection's read loop ends on it, as Serve's does on any read error."""


class Framer:
    """One end's framer: a zlib compressor for the header blocks it writes and a decompressor
    for those it reads, each kept for the whole connection (spdy/types.go:264-277 NewFramer,
    read.go:131-144). Pure: `encode` returns bytes, `decode` takes them from a buffer."""

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zdict=DICTIONARY)
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)

    # ---- writing (spdy/write.go) ----

    def encode(self, frame: Frame) -> bytes:
        match frame:
            case Data(stream_id, data, flags):
                # write.go:298-320: no stream 0, at most 2^24-1 bytes.
                if not 0 < stream_id <= MAX_STREAM_ID or len(data) > MAX_DATA_LENGTH:
                    raise SpdyError("invalid data frame")
                return struct.pack(">II", stream_id, flags << 24 | len(data)) + data
            case SynStream(stream_id, headers, flags, associated_to, priority, slot):
                block = self._header_block(headers)
                body = struct.pack(">IIBB", stream_id, associated_to, priority << 5, slot)
                return self._control(SYN_STREAM, flags, body + block)
            case SynReply(stream_id, headers, flags):
                return self._control(SYN_REPLY, flags,
                                     struct.pack(">I", stream_id) + self._header_block(headers))
            case HeadersFrame(stream_id, headers, flags):
                return self._control(HEADERS, flags,
                                     struct.pack(">I", stream_id) + self._header_block(headers))
            case RstStream(stream_id, status):
                return self._control(RST_STREAM, 0, struct.pack(">II", stream_id, status))
            case Settings(entries, flags):
                body = struct.pack(">I", len(entries)) + b"".join(
                    struct.pack(">II", flag << 24 | ident, value)
                    for flag, ident, value in entries)
                return self._control(SETTINGS, flags, body)
            case Ping(ident):
                return self._control(PING, 0, struct.pack(">I", ident))
            case GoAway(last_good, status):
                return self._control(GOAWAY, 0, struct.pack(">II", last_good, status))
            case WindowUpdate(stream_id, delta):
                return self._control(WINDOW_UPDATE, 0, struct.pack(">II", stream_id, delta))
        raise TypeError(f"not a SPDY frame: {frame!r}")

    @staticmethod
    def _control(frame_type: int, flags: int, body: bytes) -> bytes:
        # write.go:141-153 writeControlFrameHeader.
        return struct.pack(">HHI", 0x8000 | VERSION, frame_type, flags << 24 | len(body)) + body

    def _header_block(self, headers: Headers) -> bytes:
        # write.go:155-182 writeHeaderValueBlock, then one sync flush per frame (:196-198).
        raw = [struct.pack(">I", len(headers))]
        for name, values in headers.items():
            key, value = name.lower().encode(), "\x00".join(values).encode()
            raw += [struct.pack(">I", len(key)), key, struct.pack(">I", len(value)), value]
        return self._deflate.compress(b"".join(raw)) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    # ---- reading (spdy/read.go) ----

    def decode(self, buffer: bytearray) -> Frame | None:
        """The first whole frame in `buffer`, removed from it; None until one has arrived."""
        if len(buffer) < 8:
            return None
        first, second = struct.unpack_from(">II", buffer)
        flags, length = second >> 24, second & 0xFFFFFF
        if len(buffer) < 8 + length:
            return None
        body = bytes(buffer[8:8 + length])
        del buffer[:8 + length]
        if not first & 0x80000000:
            # read.go:331-346 parseDataFrame.
            if first == 0:
                raise SpdyError("stream id zero is disallowed")
            return Data(first, body, flags)
        return self._control_frame(first & 0xFFFF, flags, body)

    def _control_frame(self, frame_type: int, flags: int, body: bytes) -> Frame:
        # read.go:159-175; the version is not checked there either. Each reader below reads
        # the fields read.go reads and refuses what it refuses.
        def words(count: int) -> tuple[int, ...]:
            if len(body) < 4 * count:
                raise SpdyError(f"short control frame of type {frame_type}")
            return struct.unpack_from(f">{count}I", body)

        if frame_type == SYN_STREAM:  # read.go:219-259
            if len(body) < 10:
                raise SpdyError("short SYN_STREAM")
            stream_id, associated, priority, slot = struct.unpack_from(">IIBB", body)
            headers = self._read_headers(body[10:])
            if stream_id == 0:
                raise SpdyError("stream id zero is disallowed")
            return SynStream(stream_id, headers, flags, associated, priority >> 5, slot)
        if frame_type in (SYN_REPLY, HEADERS):  # read.go:261-329
            (stream_id,) = words(1)
            headers = self._read_headers(body[4:])
            if stream_id == 0:
                raise SpdyError("stream id zero is disallowed")
            if frame_type == SYN_REPLY:
                return SynReply(stream_id, headers, flags)
            return HeadersFrame(stream_id, headers, flags)
        if frame_type == RST_STREAM:  # read.go:23-38
            stream_id, status = words(2)
            if status == 0 or stream_id == 0:
                raise SpdyError("invalid RST_STREAM")
            return RstStream(stream_id, status)
        if frame_type == SETTINGS:  # read.go:40-58
            (count,) = words(1)
            pairs = words(1 + 2 * count)[1:]
            entries = tuple((pairs[i] >> 24, pairs[i] & 0xFFFFFF, pairs[i + 1])
                            for i in range(0, len(pairs), 2))
            return Settings(entries, flags)
        if frame_type == PING:  # read.go:60-72
            (ident,) = words(1)
            if ident == 0 or flags:
                raise SpdyError("invalid PING")
            return Ping(ident)
        if frame_type == GOAWAY:  # read.go:74-89
            if flags or len(body) != 8:
                raise SpdyError("invalid GOAWAY")
            last_good, status = words(2)
            return GoAway(last_good, status)
        if frame_type == WINDOW_UPDATE:  # read.go:95-110
            if flags or len(body) != 8:
                raise SpdyError("invalid WINDOW_UPDATE")
            stream_id, delta = words(2)
            return WindowUpdate(stream_id, delta)
        raise SpdyError(f"invalid control frame type {frame_type}")  # read.go:112-118

    def _read_headers(self, compressed: bytes) -> Headers:
        # read.go:177-217 parseHeaderValueBlock, through the connection's one decompressor.
        try:
            raw = self._inflate.decompress(compressed)
        except zlib.error as err:
            raise SpdyError(f"header block: {err}") from err
        try:
            (count,) = struct.unpack_from(">I", raw)
            offset, headers = 4, {}
            for _ in range(count):
                (size,) = struct.unpack_from(">I", raw, offset)
                name = raw[offset + 4:offset + 4 + size].decode()
                offset += 4 + size
                (size,) = struct.unpack_from(">I", raw, offset)
                value = raw[offset + 4:offset + 4 + size].decode()
                offset += 4 + size
                if name != name.lower():
                    raise SpdyError("header was not lowercased")
                if name in headers:
                    raise SpdyError("multiple headers with same name")
                headers[name] = value.split("\x00")
        except (struct.error, UnicodeDecodeError) as err:
            raise SpdyError(f"header block: {err}") from err
        return headers




class ServerSession:
    """The server end of one upgraded connection, as the kubelet's streaming server holds it:
    spdystream's Connection (server=true) under apimachinery's httpstream/spdy connection.

    `next_stream()` hands over each stream the client opens, once its SYN_REPLY is out;
    `write()` sends data on one; `close()` resets every stream still open, sends GOAWAY and
    closes the socket. A task reads frames until the client's GOAWAY, end of file or a frame
    spdystream would refuse.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._framer = Framer()
        # Whether new streams are still answered. The kubelet stops taking them once it has
        # the ones it waits for: a later stream's handler blocks on an unbuffered channel and
        # never replies (remotecommand/httpstream.go:132-137 and :207-251, httpstream/spdy
        # connection.go:150-165).
        self.accepting = True
        self._order: list[int] = []  # the answered streams, as httpstream/spdy registers them
        # Streams this side is done with: it sent FIN or RST, the client reset them, or opened
        # them unidirectional (stream.go's `finished`).
        self._finished: set[int] = set()
        self._next_remote_id = 1  # a server's receivedStreamId (connection.go:226-245)
        self._writable = True
        self._new: asyncio.Queue[SynStream | None] = asyncio.Queue()
        self._reading = asyncio.create_task(self._serve())

    async def next_stream(self) -> SynStream | None:
        """The next stream the client opened (already answered); None once it can open none."""
        return await self._new.get()

    async def wait_closed(self) -> None:
        """Until the client has ended the connection (GOAWAY, end of file, a bad frame)."""
        await asyncio.wait({self._reading})

    async def write(self, stream_id: int, data: bytes) -> None:
        """Stream.Write (stream.go:57-89): data frames whatever the peer did with the stream, at
        most 32 KiB each as the runtime's io.Copy writes them."""
        for start in range(0, len(data), 32 * 1024):
            self._send(Data(stream_id, data[start:start + 32 * 1024]))
        await self._drain()

    async def finish(self, stream_id: int) -> None:
        """Stream.Close (stream.go:171-181): an empty data frame with FIN."""
        if stream_id in self._order and stream_id not in self._finished:
            self._finished.add(stream_id)
            self._send(Data(stream_id, b"", FLAG_FIN))
            await self._drain()

    async def reset(self, stream_id: int) -> None:
        """Stream.Reset (stream.go:183-208): RST_STREAM CANCEL unless this side has finished."""
        if stream_id in self._order and stream_id not in self._finished:
            self._finished.add(stream_id)
            self._send(RstStream(stream_id, CANCEL))
            await self._drain()

    async def close(self) -> None:
        """httpstream/spdy connection.Close (connection.go:102-117): reset every stream, then
        spdystream's Close sends GOAWAY naming the last stream received (spdystream
        connection.go:766-792), and its shutdown closes the socket while Serve goes on reading.

        The read loop runs until the client has gone (its GOAWAY or end of file, at most
        CLOSE_WAIT_S): a socket closed with the client's last frames unread (the stdin of
        `kubectl exec -i`, still arriving) answers them with a TCP reset, which can discard
        the output and status sent just before, and kubectl then reports a success with no
        output (an empty error stream is a success: remotecommand v4's error decoder). This
        side's FIN goes first, so the client reads everything and ends the connection."""
        for stream_id in self._order:
            await self.reset(stream_id)
        last_good = self._next_remote_id - 2 if self._next_remote_id > 2 else 0
        self._send(GoAway(last_good, GOAWAY_OK))
        await self._drain()
        self._writable = False
        try:
            if self._writer.can_write_eof() and not self._writer.is_closing():
                self._writer.write_eof()
            await asyncio.wait_for(asyncio.shield(self._reading), CLOSE_WAIT_S)
        except (TimeoutError, OSError):
            pass
        finally:
            self._writer.close()
            self._reading.cancel()

    # ---- internals ----

    def _send(self, frame: Frame) -> None:
        # Once the read loop has ended, spdystream's framer refuses every write with io.EOF
        # (connection.go:108-139 closes resetChan; :150-163 then returns io.EOF), which the
        # kubelet ignores.
        if self._writable and not self._writer.is_closing():
            self._writer.write(self._framer.encode(frame))

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except ConnectionError:
            self._writable = False

    async def _serve(self) -> None:
        # spdystream's Serve (connection.go:314-415). It hands frames to five workers by stream
        # id, each stream's in order; here all are handled in arrival order.
        buffer = bytearray()
        try:
            while True:
                frame = self._framer.decode(buffer)
                if frame is None:
                    chunk = await self._reader.read(64 * 1024)
                    if not chunk:
                        return
                    buffer += chunk
                elif isinstance(frame, GoAway):
                    # Serve stops reading at GOAWAY (:384-387), forgets its streams (:405-414),
                    # and the shutdown that GOAWAY starts, finding none, closes the socket.
                    self._writable = False
                    self._writer.close()
                    return
                else:
                    await self._handle(frame)
        except SpdyError as err:
            log.info("SPDY connection ends on a frame spdystream refuses: %s", err)
        except OSError as err:
            log.debug("SPDY connection lost: %s", err)
        finally:
            self._writable = False
            self._new.put_nowait(None)

    async def _handle(self, frame: Frame) -> None:
        match frame:
            case SynStream(stream_id, _, flags):
                # checkStreamFrame and validateStreamId (connection.go:487-504, :941-947).
                if stream_id > MAX_STREAM_ID or stream_id < self._next_remote_id:
                    self._send(RstStream(stream_id, PROTOCOL_ERROR))
                    await self._drain()
                    return
                self._next_remote_id = stream_id + 2
                if flags & FLAG_UNIDIRECTIONAL:  # addStreamFrame (connection.go:458-485)
                    self._finished.add(stream_id)
                if self.accepting:
                    self._order.append(stream_id)
                    self._send(SynReply(stream_id, {}))
                    await self._drain()
                    self._new.put_nowait(frame)
            case RstStream(stream_id, _):
                # handleResetFrame (connection.go:541-561): finished both ways.
                self._finished.add(stream_id)
            case Ping(ident) if ident % 2 == 1:
                # handlePingFrame (connection.go:619-632): a server's own pings are even, so an
                # odd one is the client's, sent back as it came.
                self._send(frame)
                await self._drain()
            case _:
                # Data (the simulated containers read no stdin, so it is dropped), a reply to
                # nothing, SETTINGS and WINDOW_UPDATE (unhandled, connection.go:417-447),
                # HEADERS (kept for a ReceiveHeader the kubelet never calls, :563-586).
                pass
