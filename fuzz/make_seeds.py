#!/usr/bin/env python3
"""Writes the seeds of the `responder` and `probe_http` fuzz targets into corpus/<target>/.

Run from anywhere: python3 fuzz/make_seeds.py.

- responder: each seed is one query as it arrives over UDP (no TCP length prefix), for the
  example zone tm.example.test.
- probe_http: each seed is a byte picking the read size, a byte of flags (bit 0: repeat
  the stream without end; the rest: which body limit, 0 = the probe's 5120 bytes), then
  the HTTP response as the server sends it.
"""
import os
import struct

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
TYPES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "MX": 15, "TXT": 16, "AAAA": 28,
         "SRV": 33, "AXFR": 252, "ANY": 255, "HINFO": 13}


def name(text):
    out = b""
    for label in text.rstrip(".").split("."):
        if label:
            out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def ecs(family, source, addr, scope=0):
    return struct.pack(">HBB", family, source, scope) + addr


def opt(payload=1232, version=0, do=False, options=b""):
    ttl = (version << 16) | (0x8000 if do else 0)
    return b"\0" + struct.pack(">HHIH", 41, payload, ttl, len(options)) + options


def option(code, data):
    return struct.pack(">HH", code, len(data)) + data


def query(qid, qname, qtype, edns=None, flags=0x0100, qclass=1, qdcount=1):
    arcount = 1 if edns is not None else 0
    head = struct.pack(">HHHHHH", qid, flags, qdcount, 0, 0, arcount)
    return head + name(qname) + struct.pack(">HH", TYPES.get(qtype, qtype), qclass) + (edns or b"")


Z = "tm.example.test."
SEEDS = {
    "www-a": query(1, "www." + Z, "A"),
    "www-aaaa-edns": query(2, "wWw." + Z, "AAAA", opt()),
    "app-ecs-v4": query(3, "app." + Z, "A", opt(4096, options=option(8, ecs(1, 24, bytes([203, 0, 113]))))),
    "geo-ecs-25": query(4, "geo." + Z, "A", opt(options=option(8, ecs(1, 25, bytes([192, 0, 2, 128]))))),
    "office-ecs-32": query(5, "office." + Z, "A", opt(options=option(8, ecs(1, 32, bytes([198, 51, 100, 15]))))),
    "fast-ecs-v6": query(6, "fast." + Z, "AAAA", opt(options=option(8, ecs(2, 48, bytes.fromhex("20010db80001"))))),
    "svc-ecs-zone": query(7, "svc." + Z, "A", opt(options=option(8, ecs(1, 16, bytes([10, 1]))))),
    "ecs-source-0": query(8, "accel." + Z, "A", opt(options=option(8, ecs(1, 0, b"")))),
    "ecs-bad-bits": query(9, "geo." + Z, "A", opt(options=option(8, ecs(1, 8, bytes([192, 1]))))),
    "pool-a-do": query(10, "pool." + Z, "A", opt(512, do=True)),
    "global-a": query(11, "global." + Z, "A"),
    "api-cname": query(12, "api." + Z, "CNAME", opt()),
    "apex-ns": query(13, Z, "NS"),
    "apex-soa": query(14, Z, "SOA", opt()),
    "info-txt": query(15, "info." + Z, "TXT"),
    "mail-mx": query(16, "mail." + Z, "MX"),
    "sip-srv": query(17, "_sip._udp." + Z, "SRV", opt()),
    "docs-a-chain": query(18, "docs." + Z, "A"),
    "any": query(19, "www." + Z, "ANY"),
    "axfr": query(20, Z, "AXFR"),
    "nxdomain": query(21, "nope." + Z, "A"),
    "refused": query(22, "example.org.", "A"),
    "chaos": query(23, "version.bind.", "TXT", qclass=3),
    "badvers": query(24, "www." + Z, "A", opt(version=1)),
    "notify": query(25, Z, "SOA", flags=0x2000),
    "unknown-option": query(26, "eu." + Z, "A", opt(options=option(10, b"cookie12"))),
    "two-questions": query(27, "us." + Z, "A", qdcount=2) + name(Z) + struct.pack(">HH", 1, 1),
    "pointer-loop": struct.pack(">HHHHHH", 28, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c" + struct.pack(">HH", 1, 1),
    "short": b"\x00\x1d\x01\x00\x00",
    "response": query(30, "www." + Z, "A", flags=0x8100),
}


# probe_http: the read size is (1 << (b % 17)) + b // 17 bytes for the first byte b.
ONE_BYTE, SEVEN, KIB, WHOLE = 0, 53, 10, 16
ONCE, ENDLESS = 0, 1
LIMIT_1 = 2 << 1  # the third body limit, 1 byte


def http(read, flags, *parts):
    return bytes([read, flags]) + b"".join(p.encode() if isinstance(p, str) else p for p in parts)


OK = "HTTP/1.1 200 OK\r\n"
CHUNKED = OK + "Transfer-Encoding: chunked\r\n\r\n"
CONTINUE = "HTTP/1.1 100 Continue\r\n\r\n"
PROBE_HTTP = {
    "200-length": http(WHOLE, ONCE, OK, "Content-Length: 2\r\nContent-Type: text/plain\r\n\r\nOK"),
    "200-length-bytewise": http(ONE_BYTE, ONCE, OK, "Content-Length: 5\r\n\r\nhello"),
    "200-limit-1": http(WHOLE, LIMIT_1, OK, "Content-Length: 5\r\n\r\nhello"),
    "204": http(WHOLE, ONCE, "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n"),
    "304": http(SEVEN, ONCE, "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n"),
    "503-close": http(KIB, ONCE, "HTTP/1.0 503 Service Unavailable\r\n\r\ndown for maintenance"),
    "close-endless": http(KIB, ENDLESS, "HTTP/1.0 200 OK\r\n\r\n", "x" * 100),
    "chunked": http(SEVEN, ONCE, CHUNKED, "3;ext=1\r\nall\r\n4\r\n OK!\r\n0\r\nTrailer: t\r\n\r\n"),
    "chunked-over-limit": http(WHOLE, LIMIT_1, CHUNKED, "5\r\nabcde\r\n5\r\nfgh"),
    "chunked-bad-size": http(WHOLE, ONCE, CHUNKED, "zz\r\n"),
    "chunked-and-length": http(WHOLE, ONCE, OK, "Content-Length: 3\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"),
    "gzip-to-close": http(WHOLE, ONCE, OK, "Transfer-Encoding: gzip\r\n\r\n\x1f\x8b"),
    "continue-chain": http(SEVEN, ONCE, CONTINUE * 3, "HTTP/1.1 102 Processing\r\nX: 1\r\n\r\n", OK, "Content-Length: 1\r\n\r\nx"),
    "continue-8": http(WHOLE, ONCE, CONTINUE * 8, OK, "Content-Length: 1\r\n\r\nx"),
    "continue-9": http(WHOLE, ONCE, CONTINUE * 9, OK, "Content-Length: 1\r\n\r\nx"),
    "continue-endless": http(KIB, ENDLESS, CONTINUE),
    "101-switching": http(WHOLE, ONCE, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x00"),
    "head-16384": http(WHOLE, ONCE, OK, "Content-Length: 0\r\nX: ", "a" * (16384 - 43), "\r\n\r\n"),
    "head-16385": http(KIB, ONCE, OK, "Content-Length: 0\r\nX: ", "a" * (16385 - 43), "\r\n\r\n"),
    "head-endless": http(KIB, ENDLESS, "a" * 64),
    "headers-101": http(WHOLE, ONCE, OK, "a: b\r\n" * 101, "\r\n"),
    "length-mismatch": http(WHOLE, ONCE, OK, "Content-Length: 1\r\nContent-Length: 2\r\n\r\nab"),
    "length-bad": http(WHOLE, ONCE, OK, "Content-Length: -1\r\n\r\n"),
    "body-short": http(WHOLE, ONCE, OK, "Content-Length: 9\r\n\r\nshort"),
    "head-cut": http(WHOLE, ONCE, OK, "Content-Le"),
    "empty": http(WHOLE, ONCE),
    "ssh-banner": http(WHOLE, ONCE, "SSH-2.0-OpenSSH_9.6\r\n\r\n"),
    "status-bad": http(WHOLE, ONCE, "HTTP/1.1 2x0 OK\r\n\r\n"),
    "lf-only": http(SEVEN, ONCE, "HTTP/1.1 200 OK\nContent-Length: 2\n\nOK"),
    "garbage": http(SEVEN, ENDLESS, bytes(range(256))),
    # Found by this target: results that depended on how the response was cut into reads
    # (a chunk-size line over 1024 bytes was accepted when one read brought all of it; a
    # 101st header past 16384 bytes beat the head limit when a read brought it along).
    "chunk-line-1500": http(WHOLE, ONCE, CHUNKED, "1;", "x" * 1500, "\r\na\r\n0\r\n\r\n"),
    "chunk-line-1500-bytewise": http(ONE_BYTE, ONCE, CHUNKED, "1;", "x" * 1500, "\r\na\r\n0\r\n\r\n"),
    "headers-past-limit-bytewise": http(ONE_BYTE, ONCE, OK, ("h: " + "a" * 160 + "\r\n") * 101, "\r\n"),
    # A head sent a byte a read is parsed once per line, not once per read.
    "head-16384-bytewise": http(ONE_BYTE, ONCE, OK, "Content-Length: 0\r\nX: ", "a" * (16384 - 43), "\r\n\r\n"),
}


def write(target, seeds):
    out = os.path.join(CORPUS, target)
    os.makedirs(out, exist_ok=True)
    for label, data in seeds.items():
        with open(os.path.join(out, label), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out}")


write("responder", SEEDS)
write("probe_http", PROBE_HTTP)
