#!/usr/bin/env bash
# Files generated from a built binary for the .deb and the release tarball: the man pages and
# shell completions (from the clap definition, so they never drift from the parser) and the
# packaged config (the sample, with operator overrides kept in the unit's StateDirectory).
#
#   packaging/assets.sh BINARY OUTDIR
set -euo pipefail
bin=$1
out=$2
root="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$out"
mkdir -p "$out/man" "$out/completions"

# The visible subcommands of `vestibule [SUB] --help`, as clap lists them.
subcommands() {
    "$bin" "$@" --help | awk '/^Commands:/ { on = 1; next } /^[^ ]/ { on = 0 } on && $1 != "help" { print $1 }'
}

"$bin" man > "$out/man/vestibule.1"
for sub in $(subcommands); do
    "$bin" man "$sub" > "$out/man/vestibule-$sub.1"
    for subsub in $(subcommands "$sub"); do
        "$bin" man "$sub" "$subsub" > "$out/man/vestibule-$sub-$subsub.1"
    done
done
# -n: no name or time stamp in the gzip header, so the same binary gives the same bytes.
gzip -9n "$out"/man/*.1

"$bin" completions bash > "$out/completions/vestibule"
"$bin" completions zsh > "$out/completions/_vestibule"
"$bin" completions fish > "$out/completions/vestibule.fish"

sample="$root/conf/vestibule.toml"
# The sample shows state_file with its default, commented out; the package sets it.
grep -Eq '^(# )?state_file = ' "$sample" || { echo "$sample has no state_file line to point at /var/lib/vestibule" >&2; exit 1; }
# The per-minute history and the audit log likewise go to the StateDirectory.
grep -Eq '^(# )?history_dir = ' "$sample" || { echo "$sample has no history_dir line to point at /var/lib/vestibule" >&2; exit 1; }
grep -Eq '^(# )?audit_file = ' "$sample" || { echo "$sample has no audit_file line to point at /var/lib/vestibule" >&2; exit 1; }
sed -E -e 's|^(# )?state_file = "[^"]*"  |state_file = "/var/lib/vestibule/overrides.json"|' \
    -e 's|^(# )?history_dir = "[^"]*"  |history_dir = "/var/lib/vestibule/history"|' \
    -e 's|^(# )?audit_file = "[^"]*"  |audit_file = "/var/lib/vestibule/audit.jsonl"|' "$sample" > "$out/vestibule.toml"
