#!/usr/bin/env bash
# The release tarball: the binary, its man pages and completions, the docs, the sample config
# and the files around it (systemd unit, sysusers.d, Prometheus rules, Grafana dashboard), the
# pages, and a SHA256SUMS of every file in it. A SHA256SUMS beside the tarball covers the
# tarball itself.
#
#   packaging/dist.sh [BINARY] [OUTDIR]   (defaults: target/release/vestibule, dist)
# `make dist` builds the release binary first; the tests pack the debug one (with GZIP_LEVEL=1:
# it is large, and how hard it is squeezed is not what they check).
# Prints the tarball's path.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin=$(realpath "${1:-$root/target/release/vestibule}")
out=$(mkdir -p "${2:-$root/dist}" && realpath "${2:-$root/dist}")
[ -x "$bin" ] || { echo "no binary at $bin: build it first (cargo build --release --locked --no-default-features --features mimalloc)" >&2; exit 1; }
cd "$root"

version=$("$bin" --version | awk '{ print $2 }')
arch=$(uname -m)
name="vestibule-$version-$arch-linux"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage="$work/$name"
mkdir -p "$stage/bin" "$stage/share/man/man1" "$stage/share/completions"

install -m 755 "$bin" "$stage/bin/vestibule"
packaging/assets.sh "$bin" "$work/generated"
cp "$work"/generated/man/*.1.gz "$stage/share/man/man1/"
cp "$work/generated/completions/vestibule" "$stage/share/completions/vestibule.bash"
cp "$work/generated/completions/_vestibule" "$work/generated/completions/vestibule.fish" "$stage/share/completions/"
# The sample config without its ring: the published demo key never ships in a release
# (`vestibule init` or `vestibule keygen` makes one).
cp -r conf pages docs README.md "$stage/"
rm "$stage/conf/keys.toml"
mkdir -p "$stage/packaging/sysusers.d" && cp packaging/sysusers.d/vestibule.conf "$stage/packaging/sysusers.d/"

# Reproducible: names sorted, owner root, every time the last commit's.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
(cd "$stage" && find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum > SHA256SUMS)
tarball="$out/$name.tar.gz"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$work" -cf - "$name" |
    gzip -"${GZIP_LEVEL:-9}"n > "$tarball"
(cd "$out" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
echo "$tarball"
