# Release recipes. `make dist` and `make deb` build the release binary first; give BIN to pack
# one already built (CI packs the debug binary its tests built: make dist BIN=target/debug/vestibule).
BIN ?= target/release/vestibule
DIST ?= dist

.PHONY: release dist deb check-deb check-deploy

release:
	cargo build --release --locked --bin vestibule --no-default-features --features mimalloc

# The tarball and its SHA256SUMS, in $(DIST)/.
dist: $(if $(filter target/release/vestibule,$(BIN)),release)
	packaging/dist.sh $(BIN) $(DIST)

# The .deb, in target/debian/, then its checks (a throwaway-root install, systemd-analyze, lintian).
deb: $(if $(filter target/release/vestibule,$(BIN)),release)
	packaging/deb.sh $(BIN)

check-deb: deb
	packaging/check-deb.sh target/debian/vestibule_*.deb

# deploy/compose and deploy/kubernetes, offline.
check-deploy:
	deploy/compose/check.py
	deploy/kubernetes/check.py $(BIN)
