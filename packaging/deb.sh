#!/usr/bin/env bash
# Build the .deb from a binary already built: a release build for publishing
# (`cargo build --release --locked --no-default-features --features mimalloc`: the edge without
# the simulator), or the debug binary the tests built, so CI packs and
# checks the package without paying for a release build.
#
#   packaging/deb.sh [BINARY]        (default target/release/vestibule)
# Prints the path of the .deb.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bin=${1:-target/release/vestibule}
[ -x "$bin" ] || { echo "no binary at $bin: build it first (cargo build --release --locked --no-default-features --features mimalloc)" >&2; exit 1; }
command -v cargo-deb >/dev/null 2>&1 || { echo "cargo-deb is not installed: cargo install cargo-deb --locked" >&2; exit 1; }
staged=target/packaging
packaging/assets.sh "$bin" "$staged"
cp "$bin" "$staged/vestibule"
out=target/debian
rm -rf "$out"
# --no-build: the binary is the one staged above; --no-strip keeps a debug binary's symbols
# (a release build is already stripped by its profile, or strip it before).
cargo deb --no-build --no-strip --locked --fast --output "$out" >&2
ls "$out"/vestibule_*.deb
