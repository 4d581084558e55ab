#!/usr/bin/env python3
"""Data for bench/dnsperf.sh: a synthetic geo database, its gdnsd map, big profiles and
binary dnsperf query files whose every query carries its own EDNS Client Subnet.

Standard library only, deterministic (fixed seeds), so every run and every machine measures
the same thing.

  benchdata.py geo-csv OUT.csv               networks covering the IPv4 unicast space (+ the
                                             repo's sample networks), GeoIP2-City columns
  benchdata.py gdnsd-geo-map                 the gdnsd plugin_geoip `map` equivalent to the
                                             geographic profile GEO_PROFILE below (stdout)
  benchdata.py geo-profile NAME              that geographic profile, for steerdns (stdout)
  benchdata.py subnet-profile NAME N OUT.yaml NETS.txt
                                             a `routing: subnet` profile with N /24 ranges over
                                             100 endpoints + a fallback; NETS.txt lists the /24s
  benchdata.py compare FILE.bin PORT1 PORT2 [-n N]
                                             send the first N queries of FILE.bin to both
                                             servers on 127.0.0.1; exit 1 if any answer differs
  benchdata.py queries OUT.bin SPEC... [--count N] [--ecs MODE] [--ecs-nets FILE]
                                             [--ecs-nets-share F] [--seed S]
      SPEC is NAME[:TYPE[:WEIGHT]] (TYPE A, WEIGHT 1 by default). The output is dnsperf's
      `-B` format (RFC 1035 4.2.2 TCP framing: 2-byte length, then the message), because
      dnsperf's `-E` puts one fixed EDNS option on every query and cannot vary the subnet.
      --ecs none        no OPT record at all
      --ecs edns        OPT record (payload 1232) without an ECS option
      --ecs random24    OPT + ECS with a /24 source: a random /24 of the unicast space
                        (--ecs-nets FILE: that share of the queries takes a /24 of one of
                        the networks listed in FILE instead, default share 0.5)

Why synthetic geo data: the shipped sample database holds about ten IPv4 /24s, so random
client /24s would almost all miss it and measure only the miss path. The generated database
covers every unicast /16 (about 10% of them split further into /20s), roughly the depth and
hit rate of a real GeoLite2 City lookup, and keeps the sample networks (more specific rows win).
"""
import argparse
import ipaddress
import random
import struct
import sys

# Country table: code, MaxMind continent (what gdnsd's map keys on), Azure grouping (what
# steerdns's geographic method keys on; from geo-data/regions.yaml), rough coordinates
# (performance routing uses them), MaxMind-style subdivision codes, and a weight (share of
# the address space). TR is AS for MaxMind but GEO-ME for Azure, RU is EU for both: the
# gdnsd map below spells such cases out per country, so both servers give the same answer.
COUNTRIES = [
    ("US", "NA", "GEO-NA", 39.8, -98.6, ["CA", "WA", "OR", "NY", "TX", "VA", "FL", "IL"], 30),
    ("CA", "NA", "GEO-NA", 56.1, -106.3, ["ON", "QC", "BC"], 3),
    ("MX", "NA", "GEO-NA", 23.6, -102.6, [], 2),
    ("BR", "SA", "GEO-SA", -14.2, -51.9, ["SP", "RJ"], 3),
    ("AR", "SA", "GEO-SA", -38.4, -63.6, [], 1),
    ("CL", "SA", "GEO-SA", -35.7, -71.5, [], 1),
    ("FR", "EU", "GEO-EU", 46.2, 2.2, ["IDF"], 4),
    ("DE", "EU", "GEO-EU", 51.2, 10.5, ["BE", "BY"], 5),
    ("GB", "EU", "GEO-EU", 55.4, -3.4, ["ENG", "SCT"], 5),
    ("NL", "EU", "GEO-EU", 52.1, 5.3, [], 2),
    ("IT", "EU", "GEO-EU", 41.9, 12.6, [], 2),
    ("ES", "EU", "GEO-EU", 40.5, -3.7, [], 2),
    ("PL", "EU", "GEO-EU", 51.9, 19.1, [], 1),
    ("SE", "EU", "GEO-EU", 60.1, 18.6, [], 1),
    ("RU", "EU", "GEO-EU", 61.5, 105.3, [], 2),
    ("CN", "AS", "GEO-AS", 35.9, 104.2, ["BJ", "SH", "GD"], 10),
    ("JP", "AS", "GEO-AS", 36.2, 138.3, ["13"], 6),
    ("IN", "AS", "GEO-AS", 20.6, 79.0, [], 3),
    ("KR", "AS", "GEO-AS", 35.9, 127.8, [], 3),
    ("SG", "AS", "GEO-AS", 1.35, 103.8, [], 1),
    ("ID", "AS", "GEO-AS", -0.8, 113.9, [], 1),
    ("VN", "AS", "GEO-AS", 14.1, 108.3, [], 1),
    ("AE", "AS", "GEO-ME", 23.4, 53.8, ["DU"], 1),
    ("SA", "AS", "GEO-ME", 23.9, 45.1, [], 1),
    ("IL", "AS", "GEO-ME", 31.0, 34.9, [], 1),
    ("TR", "AS", "GEO-ME", 39.0, 35.2, [], 1),
    ("AU", "OC", "GEO-AP", -25.3, 133.8, ["NSW", "VIC"], 2),
    ("NZ", "OC", "GEO-AP", -40.9, 174.9, ["AUK"], 1),
    ("ZA", "AF", "GEO-AF", -30.6, 22.9, ["GT"], 1),
    ("NG", "AF", "GEO-AF", 9.1, 8.7, [], 1),
    ("KE", "AF", "GEO-AF", -0.02, 37.9, [], 1),
    ("EG", "AF", "GEO-AF", 26.8, 30.8, [], 1),
]

# The geographic profile (the repo's profiles/geographic.yaml, with a name of our choice):
# endpoint -> (address, region codes). Order matters only for the gdnsd datacenter list.
GEO_PROFILE = [
    ("eu-1", "192.0.2.61", ["GEO-EU", "GEO-ME", "GEO-AF"]),
    ("us-west", "198.51.100.61", ["US-CA", "US-WA", "US-OR"]),
    ("us", "198.51.100.62", ["GEO-NA", "GEO-SA"]),
    ("asia", "203.0.113.61", ["GEO-AS", "GEO-AP"]),
    ("rest", "203.0.113.62", ["WORLD"]),
]

# The repo's geo-data/sample-city.csv rows, kept verbatim (IPv4 and IPv6) so the sample's
# answers still hold inside the generated database. (country, grouping) of each for the map.
SAMPLE_ROWS = """\
192.0.2.0/25,EU,FR,IDF,48.8566,2.3522
192.0.2.128/25,NA,US,CA,37.7749,-122.4194
198.51.100.0/24,AS,CN,BJ,39.9042,116.4074
198.51.100.128/25,AS,CN,SH,31.2304,121.4737
203.0.113.0/24,OC,AU,NSW,-33.8688,151.2093
203.0.113.192/26,OC,NZ,AUK,-36.8485,174.7633
100.64.1.0/24,AS,AE,DU,25.2048,55.2708
100.64.2.0/24,SA,BR,SP,-23.5505,-46.6333
100.64.3.0/24,AF,ZA,GT,-26.2041,28.0473
100.64.4.0/24,EU,GB,SCT,55.9533,-3.1883
100.64.5.0/24,NA,CA,ON,43.6532,-79.3832
100.64.6.0/24,EU,DE,,,
2001:db8:1::/48,EU,GB,ENG,51.5074,-0.1278
2001:db8:2::/48,NA,US,WA,47.6062,-122.3321
2001:db8:3::/48,AS,JP,13,35.6762,139.6503
2001:db8:4::/48,OC,AU,VIC,-37.8136,144.9631
2001:db8:5::/48,AS,SA,01,24.7136,46.6753
2001:db8:6::/48,AS,CN,SH,31.2304,121.4737
"""
# The sample's IPv4 /24s (the /25 and /26 rows lie inside them), for --ecs-nets.
SAMPLE_V4_24S = ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"] + [
    f"100.64.{i}.0/24" for i in range(1, 7)]

# First octets and /16s that are not ordinary unicast: never in the database, never a client.
SKIP_OCTETS = {0, 10, 127} | set(range(224, 256))
SKIP_16S = ({(100, b) for b in range(64, 128)} | {(169, 254)} | {(172, b) for b in range(16, 32)}
            | {(192, 168)} | {(198, 18), (198, 19)})


def unicast_16s():
    for a in range(1, 224):
        if a in SKIP_OCTETS:
            continue
        for b in range(256):
            if (a, b) not in SKIP_16S:
                yield a, b


def geo_answer(country, subdivision):
    """What GEO_PROFILE answers for a client in country/subdivision (steerdns's rules:
    subdivision, then country, then Azure grouping, then WORLD; first endpoint that lists
    a matching code)."""
    grouping = next(c[2] for c in COUNTRIES if c[0] == country)
    for code in ([f"{country}-{subdivision}"] if subdivision else []) + [country, grouping, "WORLD"]:
        for name, _addr, codes in GEO_PROFILE:
            if code in codes:
                return name
    raise AssertionError("WORLD always matches")


def cmd_geo_csv(a):
    rng = random.Random(6)
    names = [c[0] for c in COUNTRIES]
    weights = [c[6] for c in COUNTRIES]
    by_code = {c[0]: c for c in COUNTRIES}

    def row(net, cc):
        c = by_code[cc]
        sub = rng.choice(c[5]) if c[5] and rng.random() < 0.7 else ""
        lat = c[3] + rng.uniform(-2, 2)
        lon = c[4] + rng.uniform(-2, 2)
        return f"{net},{c[1]},{cc},{sub},{lat:.4f},{lon:.4f}"

    rows = []
    for a_, b_ in unicast_16s():
        cc = rng.choices(names, weights)[0]
        rows.append(row(f"{a_}.{b_}.0.0/16", cc))
        if rng.random() < 0.1:  # split: /20s of other countries inside the /16
            for c_ in range(0, 256, 16):
                if rng.random() < 0.5:
                    rows.append(row(f"{a_}.{b_}.{c_}.0/20", rng.choices(names, weights)[0]))
    with open(a.out, "w") as f:
        f.write("# Generated by bench/benchdata.py geo-csv: synthetic, for benchmarks only.\n")
        f.write("network,continent,country,subdivision,latitude,longitude\n")
        f.write("\n".join(rows) + "\n")
        f.write(SAMPLE_ROWS)
    print(f"{len(rows) + SAMPLE_ROWS.count(chr(10))} networks", file=sys.stderr)


def cmd_gdnsd_geo_map(_a):
    """gdnsd map: continent -> country -> [dc] (US/CA/GB/AU by subdivision where the answer
    differs from the country's), every other place -> rest (steerdns: WORLD)."""
    countries = {c[0]: (c[1], c[5]) for c in COUNTRIES}
    for line in SAMPLE_ROWS.splitlines():  # sample rows use the same countries
        _net, cont, cc, sub = line.split(",")[:4]
        assert countries[cc][0] == cont, line
        if sub and sub not in countries[cc][1]:
            countries[cc] = (cont, countries[cc][1] + [sub])
    out = ["map => {", "  default => [ rest ]"]
    for cont in sorted({v[0] for v in countries.values()}):
        out.append(f"  {cont} => {{")
        out.append("    default => [ rest ]")
        for cc, (c2, subs) in sorted(countries.items()):
            if c2 != cont:
                continue
            base = geo_answer(cc, "")
            special = [s for s in subs if geo_answer(cc, s) != base]
            if special:
                out.append(f"    {cc} => {{ default => [ {base} ]")
                out += [f"      {s} => [ {geo_answer(cc, s)} ]" for s in special]
                out.append("    }")
            else:
                out.append(f"    {cc} => [ {base} ]")
        out.append("  }")
    out.append("}")
    print("\n".join(out))


def cmd_geo_profile(a):
    print(f"name: {a.name}\nrouting: geographic\nttl: 30\nendpoints:")
    for name, addr, codes in GEO_PROFILE:
        print(f"  - {{ name: {name}, target: {addr}, geo: [{', '.join(codes)}], always_serve: true }}")


def cmd_subnet_profile(a):
    rng = random.Random(7)
    space = list(unicast_16s())
    nets = set()
    while len(nets) < a.n:
        x, y = rng.choice(space)
        nets.add((x, y, rng.randrange(256)))
    nets = sorted(nets)
    rng.shuffle(nets)
    n_ep = 100
    with open(a.out, "w") as f:
        f.write(f"# Generated by bench/benchdata.py: {a.n} /24 ranges over {n_ep} endpoints.\n")
        f.write(f"name: {a.name}\nrouting: subnet\nttl: 30\nendpoints:\n")
        for e in range(n_ep):
            mine = nets[e::n_ep]
            f.write(f"  - name: e{e}\n    target: 192.0.2.{e + 1}\n    always_serve: true\n"
                    f"    subnets: [{', '.join(f'{x}.{y}.{z}.0/24' for x, y, z in mine)}]\n")
        f.write("  - { name: fallback, target: 192.0.2.250, always_serve: true }\n")
    with open(a.nets, "w") as f:
        f.write("\n".join(f"{x}.{y}.{z}.0/24" for x, y, z in nets) + "\n")


def wire_name(name):
    out = b""
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


QTYPES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "TXT": 16, "AAAA": 28}


def cmd_queries(a):
    rng = random.Random(a.seed)
    specs = []
    for s in a.spec:
        parts = s.split(":")
        specs.append((parts[0], parts[1] if len(parts) > 1 else "A",
                      float(parts[2]) if len(parts) > 2 else 1.0))
    space = list(unicast_16s())
    listed = []
    if a.ecs_nets:
        src = SAMPLE_V4_24S if a.ecs_nets == "sample" else open(a.ecs_nets).read().split()
        listed = [ipaddress.ip_network(n) for n in src]
    with open(a.out, "wb") as f:
        for i in range(a.count):
            name, qtype, _w = rng.choices(specs, [w for *_x, w in specs])[0]
            msg = struct.pack(">HHHHHH", 0, 0, 1, 0, 0, 0 if a.ecs == "none" else 1)
            msg += wire_name(name) + struct.pack(">HH", QTYPES[qtype], 1)
            if a.ecs != "none":
                opt = b""
                if a.ecs == "random24":
                    if listed and rng.random() < a.ecs_nets_share:
                        net = rng.choice(listed)
                        host = rng.randrange(net.num_addresses) & ~0xFF
                        addr = (int(net.network_address) + host).to_bytes(4, "big")
                    else:
                        x, y = rng.choice(space)
                        addr = bytes([x, y, rng.randrange(256), 0])
                    # ECS option 8: family 1 (IPv4), source /24, scope 0, 3 address bytes.
                    opt = struct.pack(">HHHBB", 8, 7, 1, 24, 0) + addr[:3]
                # OPT RR: root name, type 41, class = UDP payload 1232, TTL 0, rdata.
                msg += b"\0" + struct.pack(">HHIH", 41, 1232, 0, len(opt)) + opt
            f.write(struct.pack(">H", len(msg)) + msg)


def read_messages(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        (n,) = struct.unpack_from(">H", data, i)
        yield data[i + 2:i + 2 + n]
        i += 2 + n


def skip_name(m, i):
    while True:
        n = m[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        i += 1 + n


def answer_summary(m):
    """(rcode, sorted A/AAAA/CNAME rdata of the answer section, ECS scope or None)."""
    rcode = m[3] & 0xF
    qd, an, ns, ar = struct.unpack_from(">HHHH", m, 4)
    i = 12
    for _ in range(qd):
        i = skip_name(m, i) + 4
    answers, scope = [], None
    for k in range(an + ns + ar):
        i = skip_name(m, i)
        rtype, _cls, _ttl, rdlen = struct.unpack_from(">HHIH", m, i)
        i += 10
        rdata = m[i:i + rdlen]
        if k < an and rtype == 1:
            answers.append(str(ipaddress.IPv4Address(rdata)))
        elif k < an:
            answers.append(f"type{rtype}")
        if rtype == 41:  # OPT: look for ECS
            j = 0
            while j + 4 <= len(rdata):
                code, olen = struct.unpack_from(">HH", rdata, j)
                if code == 8:
                    scope = rdata[j + 7]
                j += 4 + olen
        i += rdlen
    return rcode, sorted(answers), scope


def ecs_of(q):
    """'a.b.c.0/24' of a query's ECS option, or '-'."""
    k = q.find(struct.pack(">HHHB", 8, 7, 1, 24))
    return "-" if k < 0 else ".".join(str(b) for b in q[k + 8:k + 11]) + ".0/24"


def cmd_compare(a):
    """Sends the first N queries of a -B file to two servers, counts differing answers."""
    import socket
    socks = []
    for port in (a.port1, a.port2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
        socks.append(s)
    same = differ = 0
    scopes = [{}, {}]
    for k, q in enumerate(read_messages(a.file)):
        if k >= a.n:
            break
        q = struct.pack(">H", k & 0xFFFF) + q[2:]
        got = []
        for s, sc in zip(socks, scopes):
            s.send(q)
            r = answer_summary(s.recv(4096))
            sc[r[2]] = sc.get(r[2], 0) + 1
            got.append(r[:2])
        if got[0] == got[1]:
            same += 1
        else:
            differ += 1
            if differ <= 5:
                print(f"   differ: ECS {ecs_of(q)}: {got[0]} vs {got[1]}")
    print(f"   {same} of {same + differ} answers identical; ECS scope prefix lengths seen: "
          f"{dict(sorted(scopes[0].items(), key=str))} vs {dict(sorted(scopes[1].items(), key=str))}")
    sys.exit(1 if differ else 0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("geo-csv"); s.add_argument("out"); s.set_defaults(f=cmd_geo_csv)
    s = sub.add_parser("gdnsd-geo-map"); s.set_defaults(f=cmd_gdnsd_geo_map)
    s = sub.add_parser("geo-profile"); s.add_argument("name"); s.set_defaults(f=cmd_geo_profile)
    s = sub.add_parser("subnet-profile")
    for x in ("name", "n", "out", "nets"):
        s.add_argument(x, type=int if x == "n" else str)
    s.set_defaults(f=cmd_subnet_profile)
    s = sub.add_parser("queries")
    s.add_argument("out"); s.add_argument("spec", nargs="+")
    s.add_argument("--count", type=int, default=200000)
    s.add_argument("--ecs", choices=["none", "edns", "random24"], default="none")
    s.add_argument("--ecs-nets", help="file of networks, or 'sample' for the sample DB's /24s")
    s.add_argument("--ecs-nets-share", type=float, default=0.5)
    s.add_argument("--seed", type=int, default=42)
    s.set_defaults(f=cmd_queries)
    s = sub.add_parser("compare"); s.add_argument("file")
    s.add_argument("port1", type=int); s.add_argument("port2", type=int)
    s.add_argument("-n", type=int, default=2000); s.set_defaults(f=cmd_compare)
    a = p.parse_args()
    a.f(a)


if __name__ == "__main__":
    main()
