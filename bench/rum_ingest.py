#!/usr/bin/env python3
"""Reports ingested per CPU-second of the server, and memory per measured network.

Starts `steerdns serve` (release build) on a copy of the example configuration with a
`rum:` block whose listener trusts 127.0.0.0/8 as a proxy, then posts reports over
kept-alive HTTP/1.1 connections, each naming a client in X-Forwarded-For so that
NETWORKS distinct /24s are measured. The figure is the server's own CPU time (utime +
stime from /proc/PID/stat) per report, so it does not depend on how fast this client is;
memory is the growth of the server's resident set over the run, divided by the networks.

usage: bench/rum_ingest.py [BINARY] [REPORTS] [NETWORKS] [CONNECTIONS]
"""
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "target/release/steerdns")
reports = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
networks = int(sys.argv[3]) if len(sys.argv) > 3 else 50_000
conns = int(sys.argv[4]) if len(sys.argv) > 4 else 4


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


work = tempfile.mkdtemp()
for name in os.listdir(root):
    if name not in ("target", "steerdns.yaml"):
        os.symlink(os.path.join(root, name), os.path.join(work, name))
dns, admin, rum = free_port(), free_port(), free_port()
config = open(os.path.join(root, "steerdns.yaml")).read()
config = config.replace("127.0.0.1:5353", f"127.0.0.1:{dns}").replace("127.0.0.1:8053", f"127.0.0.1:{admin}")
config += f"""
rum:
  listen: ["127.0.0.1:{rum}"]
  targets:
    - {{ region: eu-west, url: "http://127.0.0.1:9/eu.gif" }}
    - {{ region: us-east, url: "http://127.0.0.1:9/us.gif" }}
    - {{ region: ap-southeast, url: "http://127.0.0.1:9/ap.gif" }}
  trusted_proxies: ["127.0.0.0/8"]
  max_networks: {networks * 2}
  reports_per_minute: 100000
  burst: 100000
"""
open(os.path.join(work, "steerdns.yaml"), "w").write(config)
server = subprocess.Popen([binary, "serve", "-c", os.path.join(work, "steerdns.yaml")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
try:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", rum), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit("the RUM listener did not open: " + server.stderr.read().decode()[-2000:])
    time.sleep(1)
    cpu0, rss0 = cpu_seconds(server.pid), rss_bytes(server.pid)
    perf = None
    if os.environ.get("PERF"):
        perf = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-o", os.environ["PERF"],
                                 "-p", str(server.pid)], stderr=subprocess.DEVNULL)
    refused = [0]

    def post(first, count):
        c = http.client.HTTPConnection("127.0.0.1", rum)
        for i in range(first, first + count):
            net = i % networks
            client = f"{10 + net // 65536}.{net // 256 % 256}.{net % 256}.{1 + i % 200}"
            body = json.dumps({"v": 1, "m": [{"region": "eu-west", "ms": 20 + i % 7},
                                             {"region": "us-east", "ms": 90 + i % 11}]})
            c.request("POST", "/rum/v1/report", body,
                      {"X-Forwarded-For": client, "Content-Type": "text/plain"})
            r = c.getresponse()
            r.read()
            if r.status >= 300:
                refused[0] += 1
        c.close()

    t0 = time.monotonic()
    per = reports // conns
    threads = [threading.Thread(target=post, args=(k * per, per)) for k in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    if perf:
        perf.send_signal(2)
        perf.wait()
    time.sleep(0.5)
    cpu = cpu_seconds(server.pid) - cpu0
    rss = rss_bytes(server.pid) - rss0
    sent = per * conns
    print(f"reports {sent}, refused {refused[0]}, networks {networks}, connections {conns}")
    print(f"server CPU {cpu:.2f} s: {sent / cpu:,.0f} reports per CPU-second "
          f"({cpu / sent * 1e6:.1f} µs each); wall {wall:.1f} s ({sent / wall:,.0f}/s, client-bound)")
    print(f"resident set grew {rss / 1e6:.1f} MB: {rss / networks:,.0f} bytes per network")
finally:
    server.terminate()
    server.wait()
    shutil.rmtree(work)
