#!/usr/bin/env python3
"""Writes the DNS query seeds of the `responder` fuzz target into corpus/responder/.

Run from anywhere: python3 fuzz/make_seeds.py. Each seed is one query as it arrives over
UDP (no TCP length prefix), for the example zone tm.example.test.
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "responder")
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

os.makedirs(OUT, exist_ok=True)
for label, data in SEEDS.items():
    with open(os.path.join(OUT, label), "wb") as f:
        f.write(data)
print(f"{len(SEEDS)} seeds in {OUT}")
