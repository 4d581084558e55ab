#!/bin/sh
# Regenerates src/rpc/generated/ from proto/ the way the upstream crate's build script does
# (tonic-prost-build, client only), in a throwaway cargo project, so that steerdns builds
# without protoc. Needs protoc (Debian: protobuf-compiler) and crates.io.
#
#   vendor/etcd-client/regenerate.sh          rewrite src/rpc/generated/, then review `git diff`
#   vendor/etcd-client/regenerate.sh --check  exit 1 if the committed files differ
#
# The generator is pinned to the tonic and prost versions in steerdns's Cargo.lock, so the
# generated code matches the runtime crates it is compiled against.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
lock="$here/../../Cargo.lock"
generated="$here/src/rpc/generated"

locked_version() {
    awk -v name="$1" '$0 == "name = \"" name "\"" { getline; gsub(/version = |"/, ""); print; exit }' "$lock"
}
tonic=$(locked_version tonic)
prost=$(locked_version prost)
[ -n "$tonic" ] && [ -n "$prost" ] || { echo "tonic or prost not in $lock" >&2; exit 1; }
command -v "${PROTOC:-protoc}" >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/out"
cp -r "$here/proto" "$work/proto"
: > "$work/src/lib.rs"
cat > "$work/Cargo.toml" <<TOML
[package]
name = "etcd-client-codegen"
version = "0.0.0"
edition = "2021"
publish = false

[build-dependencies]
tonic-prost-build = "=$tonic"
prost-build = "=$prost"

[workspace]
TOML
# The upstream build.rs with the build-server feature off, writing into a known directory.
cat > "$work/build.rs" <<'RUST'
fn main() {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_server(false)
        .out_dir(env!("CARGO_MANIFEST_DIR").to_owned() + "/out")
        .compile_protos(
            &[
                "proto/etcd/api/authpb/auth.proto",
                "proto/etcd/api/etcdserverpb/rpc.proto",
                "proto/etcd/api/mvccpb/kv.proto",
                "proto/etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
                "proto/etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
            ],
            &["proto"],
        )
        .expect("Failed to compile proto files");
}
RUST
(cd "$work" && CARGO_TARGET_DIR="$work/target" cargo build --quiet)
# src/rpc/pb.rs includes these; the google.api and openapiv2 modules tonic-prost-build also
# writes (for the HTTP annotations in rpc.proto) are unused upstream as well.
modules="authpb etcdserverpb mvccpb v3electionpb v3lockpb"
mkdir -p "$work/keep"
for module in $modules; do cp "$work/out/$module.rs" "$work/keep/"; done

if [ "${1:-}" = "--check" ]; then
    diff -ru "$generated" "$work/keep" && echo "src/rpc/generated/ is up to date (tonic-prost-build $tonic)"
else
    rm -rf "$generated"
    mkdir -p "$generated"
    cp "$work/keep"/*.rs "$generated/"
    echo "regenerated $(ls "$generated" | wc -l) files with tonic-prost-build $tonic, prost-build $prost"
fi
