#!/usr/bin/env python3
"""Generate a steerdns configuration with N profiles (for load/reload/RSS scale tests).

usage: bench/gen_profiles.py N OUTDIR [--port 5400] [--files 100]
Profiles cycle through priority, weighted, multivalue and nested; every endpoint is
always_serve so nothing is probed.
"""
import argparse
import os

p = argparse.ArgumentParser()
p.add_argument("n", type=int)
p.add_argument("out")
p.add_argument("--port", type=int, default=5400)
p.add_argument("--admin-port", type=int, default=0)
p.add_argument("--files", type=int, default=100)
a = p.parse_args()

os.makedirs(os.path.join(a.out, "profiles"), exist_ok=True)
admin = f'\n  admin: "127.0.0.1:{a.admin_port}"' if a.admin_port else ""
with open(os.path.join(a.out, "steerdns.yaml"), "w") as f:
    f.write(f"""listen:
  dns: ["127.0.0.1:{a.port}"]{admin}
zones:
  - origin: scale.test.
    ns: [ns1.scale.test.]
    soa: {{ rname: hostmaster.scale.test. }}
    records: ["ns1 A 127.0.0.1"]
profiles: profiles/
""")

def profile(i):
    kind = i % 4
    a, b = f"10.{(i >> 8) & 255}.{i & 255}.1", f"10.{(i >> 8) & 255}.{i & 255}.2"
    if kind == 0:
        return f"name: p{i}\nrouting: priority\nendpoints:\n  - {{ name: a, target: {a}, always_serve: true }}\n  - {{ name: b, target: {b}, always_serve: true }}\n"
    if kind == 1:
        return f"name: p{i}\nrouting: weighted\nendpoints:\n  - {{ name: a, target: {a}, weight: 3, always_serve: true }}\n  - {{ name: b, target: {b}, always_serve: true }}\n"
    if kind == 2:
        return f"name: p{i}\nrouting: multivalue\nmax_return: 2\nendpoints:\n  - {{ name: a, target: {a}, always_serve: true }}\n  - {{ name: b, target: {b}, always_serve: true }}\n"
    return f"name: p{i}\nrouting: priority\nendpoints:\n  - {{ name: n, profile: p{i - 1} }}\n  - {{ name: b, target: {b}, always_serve: true }}\n"

per_file = max(1, a.n // a.files)
for f_i in range(0, a.n, per_file):
    docs = [profile(i) for i in range(f_i, min(a.n, f_i + per_file))]
    with open(os.path.join(a.out, "profiles", f"p{f_i:07d}.yaml"), "w") as f:
        f.write("---\n".join(docs))
