#!/usr/bin/env bash
# Packs what benches/load.sh needs into one tarball, for a machine that reaches no package
# registry and has no cargo (the 16-core runs of the scaling goals; docs/src/performance.md):
# release builds of vestibule and of the plain Pingora proxy, wrk, nginx (the origin),
# curl and taskset, every shared library they load with the loader itself (so they run on
# whatever C library that machine has), vestibule's pages and the bench scripts.
#
#   benches/bundle.sh                      # -> bench-results/vestibule-bench.tar.gz
#   benches/bundle.sh /tmp/vb.tar.gz
#
# On the other machine (bash, coreutils, awk and python3 are all it needs of its own):
#
#   tar xzf vestibule-bench.tar.gz && cd vestibule-bench
#   CONNECTIONS=256 ./load.sh --threads 1,2,4,8 --cpus 0-7:8-11:12-15 --wrk-threads 4
#
# `./load.sh` takes every option and variable of benches/load.sh; results go to
# vestibule-bench/bench-results/<time>/ (table.md, results.tsv). openssl and h2load (TLS=1)
# are packed too when this machine has them.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARBALL=${1:-$ROOT/bench-results/vestibule-bench.tar.gz}
case $TARBALL in /*) ;; *) TARBALL=$PWD/$TARBALL ;; esac

for tool in wrk nginx curl taskset python3; do
  command -v "$tool" >/dev/null || { echo "bundle.sh needs $tool here (apt-get install -y wrk nginx curl util-linux)" >&2; exit 1; }
done
echo "== building (release)"
(cd "$ROOT" && cargo build --release --quiet --bin vestibule --example plain_proxy)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
STAGE=$WORK/vestibule-bench
mkdir -p "$STAGE/bin" "$STAGE/libexec" "$STAGE/lib" "$STAGE/benches"

cp "$ROOT/target/release/vestibule" "$ROOT/target/release/examples/plain_proxy" "$STAGE/libexec/"
for tool in wrk nginx curl taskset openssl h2load; do
  if path=$(command -v "$tool"); then cp -L "$path" "$STAGE/libexec/$tool"; fi
done

# Every library the programs load, and the loader that loads them.
LOADER=""
for exe in "$STAGE"/libexec/*; do
  while read -r lib; do
    cp -Ln "$lib" "$STAGE/lib/"
    case $(basename "$lib") in ld-linux*) LOADER=$(basename "$lib") ;; esac
  done < <(ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
done
[ -n "$LOADER" ] || { echo "no dynamic loader found in ldd's output" >&2; exit 1; }

# bin/<tool> runs libexec/<tool> through the packed loader, with only the packed libraries
# ahead of the system's. `exec` keeps the pid, so load.sh measures the program itself.
for exe in "$STAGE"/libexec/*; do
  name=$(basename "$exe")
  cat > "$STAGE/bin/$name" <<EOF
#!/usr/bin/env bash
here=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")/.." && pwd)
exec "\$here/lib/$LOADER" --library-path "\$here/lib" "\$here/libexec/$name" "\$@"
EOF
  chmod +x "$STAGE/bin/$name"
done

cp "$ROOT/benches/load.sh" "$ROOT/benches/common.sh" "$ROOT/benches/table.py" "$STAGE/benches/"
cp -r "$ROOT/pages" "$STAGE/pages"
cat > "$STAGE/load.sh" <<'EOF'
#!/usr/bin/env bash
# benches/load.sh with the packed programs (benches/bundle.sh): nothing is built here.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v python3 >/dev/null || { echo "load.sh needs python3 on this machine (ports and tables)" >&2; exit 1; }
export PATH="$here/bin:$PATH"
export VESTIBULE_BIN="$here/bin/vestibule" PLAIN_BIN="$here/bin/plain_proxy"
exec "$here/benches/load.sh" "$@"
EOF
chmod +x "$STAGE/load.sh"
(cd "$ROOT" && git rev-parse HEAD 2>/dev/null || echo unknown) > "$STAGE/COMMIT"
"$STAGE/bin/vestibule" --version > "$STAGE/VERSION" 2>&1 || true

mkdir -p "$(dirname "$TARBALL")"
tar -C "$WORK" -czf "$TARBALL" vestibule-bench
echo "== $TARBALL ($(du -h "$TARBALL" | cut -f1)): $(ls "$STAGE/libexec" | tr '\n' ' ')"
