#!/usr/bin/env bash
# Check a built .deb without installing it on this machine:
#  1. its control data: name, dependencies, conffiles (config and pages), maintainer scripts;
#  2. its files: binary, man pages, completions, config, pages, unit, sysusers.d;
#  3. an install into a throwaway root (dpkg --root --force-script-chrootless: the postinst
#     makes the user and a key ring there), then the installed files: the binary validates the
#     installed config with the installed ring, the man page renders, the bash completion parses;
#  4. the unit with `systemd-analyze verify` against that root;
#  5. lintian, with the tags we accept listed below, each with its reason.
# Under CI=true a missing tool is a failure.
#
#   packaging/check-deb.sh path/to/vestibule_*.deb
set -euo pipefail
deb=$(realpath "$1")
fail() { echo "check-deb: $*" >&2; exit 1; }
need() {
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "${CI:-}" = true ]; then fail "$1 is missing ($2); under CI=true that is a failure"; fi
    echo "!! SKIPPED: $1 is missing ($2)" >&2
    return 1
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. Control data.
info=$(dpkg-deb --info "$deb")
grep -q '^ Package: vestibule$' <<<"$info" || fail "not the vestibule package: $info"
grep -Eq '^ Depends: .*libc6' <<<"$info" || fail "Depends lacks libc6 (\$auto): $info"
grep -Eq '^ Depends: .*systemd \| systemd-standalone-sysusers' <<<"$info" || fail "Depends lacks systemd-sysusers: $info"
dpkg-deb --control "$deb" "$work/control"
for f in etc/vestibule/conf/vestibule.toml etc/vestibule/pages/startwaiting.html etc/vestibule/pages/i18n/en.toml; do
    grep -qx "/$f" "$work/control/conffiles" || fail "/$f is not a conffile"
done
! grep -q keys.toml "$work/control/conffiles" || fail "a key ring must never ship"
for script in postinst postrm prerm; do
    [ -x "$work/control/$script" ] || fail "no $script"
    sh -n "$work/control/$script" || fail "$script does not parse"
    ! grep -q '#DEBHELPER#' "$work/control/$script" || fail "$script still holds #DEBHELPER#"
done

# 2. The files it ships.
contents=$(dpkg-deb --contents "$deb" | awk '{ print $NF }' | sed 's|^\./|/|')
for f in /usr/bin/vestibule /usr/share/man/man1/vestibule.1.gz /usr/share/man/man1/vestibule-init.1.gz \
    /usr/share/man/man1/vestibule-probe.1.gz /usr/share/man/man1/vestibule-token-inspect.1.gz \
    /usr/share/bash-completion/completions/vestibule /usr/share/zsh/vendor-completions/_vestibule \
    /usr/share/fish/vendor_completions.d/vestibule.fish /etc/vestibule/conf/vestibule.toml \
    /etc/vestibule/pages/startwaiting.html /usr/lib/systemd/system/vestibule.service \
    /usr/lib/sysusers.d/vestibule.conf /usr/share/doc/vestibule/copyright; do
    grep -qx "$f" <<<"$contents" || fail "$f is not in the package"
done

# 3. Install into a throwaway root. dpkg needs its database there; the dependencies (libc6,
# systemd-sysusers) are the host's, hence --force-depends.
root="$work/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/etc"
: > "$root/var/lib/dpkg/status"
: > "$root/etc/passwd"
: > "$root/etc/group"
need systemd-sysusers "Debian: systemd; the postinst makes the user with it" || true
dpkg --root="$root" --force-script-chrootless --force-depends --force-not-root \
    --log=/dev/null -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i into $root failed"; }
grep -q '^vestibule:' "$root/etc/passwd" || fail "the postinst made no vestibule user"
ring="$root/etc/vestibule/conf/keys.toml"
[ "$(stat -c %a "$ring")" = 600 ] || fail "the key ring is $(stat -c %a "$ring"), not 600"
[ "$(stat -c %u "$ring")" = "$(awk -F: '$1 == "vestibule" { print $3 }' "$root/etc/passwd")" ] ||
    fail "the key ring is not the vestibule user's"
grep -q 'PUBLISHED DEMO KEY' "$ring" && fail "the installed ring is the demo key"
bin="$root/usr/bin/vestibule"
"$bin" --version | grep -q '^vestibule ' || fail "the installed binary does not run"
config="$root/etc/vestibule/conf/vestibule.toml"
grep -q '^state_file = "/var/lib/vestibule/overrides.json"' "$config" ||
    fail "the packaged config keeps overrides outside the unit's StateDirectory"
grep -q '^audit_file = "/var/lib/vestibule/audit.jsonl"' "$config" ||
    fail "the packaged config keeps the audit log outside the unit's StateDirectory"
check=$("$bin" --check --config "$config" 2>&1) || fail "the installed config does not validate: $check"
[ "$check" = ok ] || fail "the installed config validates with remarks: $check"
if need groff "Debian: groff-base; renders the man page"; then
    warnings=$(zcat "$root/usr/share/man/man1/vestibule.1.gz" | groff -man -Tutf8 -ww 2>&1 >/dev/null)
    [ -z "$warnings" ] || fail "the man page renders with warnings: $warnings"
fi
bash -n "$root/usr/share/bash-completion/completions/vestibule" || fail "the bash completion does not parse"
# A second install (an upgrade) keeps the ring, as it keeps an edited config.
before=$(cat "$ring")
echo "# edited" >> "$config"
dpkg --root="$root" --force-script-chrootless --force-depends --force-not-root --force-confold \
    --log=/dev/null -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "reinstall failed"; }
[ "$(cat "$ring")" = "$before" ] || fail "a reinstall replaced the key ring"
tail -1 "$config" | grep -q '^# edited$' || fail "a reinstall replaced the edited config"

# 3b. The installed binary serves the installed config and reloads an edit of it, as the unit's
# ExecReload asks: run on a copy of /etc/vestibule with loopback ports and paths of its own.
run="$work/run"
cp -a "$root/etc/vestibule" "$run"
ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')
read -r proxy_port admin_port <<<"$ports"
sed -i -E -e "s|^listen = \[[^]]*\]|listen = [\"127.0.0.1:$proxy_port\"]|" \
    -e "s|^listen = \"127.0.0.1:9901\"|listen = \"127.0.0.1:$admin_port\"|" \
    -e "s|^state_file = .*|state_file = \"$run/overrides.json\"|" \
    -e "s|^audit_file = .*|audit_file = \"$run/audit.jsonl\"|" \
    -e "s|^history_dir = .*|history_dir = \"$run/history\"|" \
    -e "s|^pid_file = .*|pid_file = \"$run/vestibule.pid\"|" \
    -e "s|^upgrade_sock = .*|upgrade_sock = \"$run/upgrade.sock\"|" "$run/conf/vestibule.toml"
"$bin" --config "$run/conf/vestibule.toml" >"$run/log" 2>&1 &
served=$!
trap 'kill "$served" 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin" probe --config "$run/conf/vestibule.toml" --path /healthz --wait 20s >/dev/null ||
    { cat "$run/log" >&2; fail "the installed binary did not serve the installed config"; }
sed -i -E 's|^title = .*|title = "Edited by check-deb"|' "$run/conf/vestibule.toml"
for _ in $(seq 1 100); do
    grep -q 'generation 1 -> 2' "$run/log" && break
    sleep 0.1
done
grep -q 'generation 1 -> 2' "$run/log" || { cat "$run/log" >&2; fail "an edit of the installed config was not reloaded"; }
kill "$served"; wait "$served" 2>/dev/null || true

# 4. The unit, against the installed files: its commands must exist there and be executable,
# its man: link must resolve in the root's man pages, and every key must be known (an unknown
# one is only a message, so any output fails). The root gets what a system has beside the
# package: /bin/kill (ExecReload) and systemd's own targets.
if need systemd-analyze "Debian: systemd"; then
    unit="$root/usr/lib/systemd/system/vestibule.service"
    mkdir -p "$root/usr/bin"
    [ -e "$root/bin" ] || ln -s usr/bin "$root/bin"
    cp /usr/bin/kill "$root/usr/bin/kill"
    cp -a /usr/lib/systemd/system/*.target "$root/usr/lib/systemd/system/"
    out=$(MANPATH="$root/usr/share/man" systemd-analyze verify --root="$root" "$unit" 2>&1) ||
        fail "systemd-analyze verify: $out"
    [ -z "$out" ] || fail "systemd-analyze verify: $out"
fi

# 5. lintian, failing on any error or warning. Accepted tags, each for a reason:
#  - unstripped-binary-or-object: CI packs the debug binary its tests built, symbols and all (a
#    release build is stripped by its profile);
#  - no-changelog: cargo-deb writes no changelog.Debian, and the project keeps no Debian
#    packaging history of its own (a Debian changelog records packaging revisions; the
#    software's changes are in the project's release notes).
# lintian runs as root here (CI containers) and says so on stderr: that line is not a finding.
if need lintian "Debian: lintian"; then
    accept=unstripped-binary-or-object,no-changelog
    if ! out=$(lintian --fail-on error,warning --suppress-tags "$accept" "$deb" 2>&1); then
        fail "lintian: $out"
    fi
    out=$(grep -v 'running with root privileges' <<<"$out" || true)
    [ -z "$out" ] || echo "lintian (information only): $out"
fi
echo "check-deb: $(basename "$deb") ok"
