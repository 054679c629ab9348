# Multi-stage build: compile in the Rust image, run as a non-root user in a slim Debian.
#   docker build -t vestibule .
# The config (deploy/container/vestibule.toml) reads its secrets from /run/secrets/vestibule/:
#   keys.toml (the key ring: `vestibule init` writes one) and admin-token (16+ characters).
#   docker run -p 8080:8080 -p 9901:9901 -v "$PWD/secrets:/run/secrets/vestibule:ro" \
#     --read-only --tmpfs /tmp -v vestibule-state:/var/lib/vestibule vestibule
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The whole tree, less what .dockerignore leaves out (target/, .git, node_modules): a Cargo
# workspace's crates/ comes along as it grows, with no COPY line to keep in step.
COPY . .
RUN cargo build --release --locked --bin vestibule --no-default-features --features mimalloc \
 && install -m 755 target/release/vestibule /usr/local/bin/vestibule

FROM debian:bookworm-slim
# tini is PID 1: it forwards SIGTERM/SIGHUP to vestibule and reaps orphans. vestibule handles
# the signals itself (SIGTERM: finish in-flight requests within graceful_shutdown; SIGHUP:
# reload), but a process that is PID 1 gets no default signal actions from the kernel.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/vestibule --shell /usr/sbin/nologin vestibule \
 && install -d -o vestibule -g vestibule -m 750 /var/lib/vestibule
COPY --from=build /usr/local/bin/vestibule /usr/local/bin/vestibule
COPY deploy/container/vestibule.toml /etc/vestibule/conf/vestibule.toml
COPY pages /etc/vestibule/pages
# By number: Kubernetes' runAsNonRoot can only verify a numeric user.
USER 10001:10001
WORKDIR /etc/vestibule
# Operator overrides (pause, message, sold out) survive a new container on this volume. It is
# the only path written: the root file system may be read-only (`--read-only --tmpfs /tmp`).
VOLUME /var/lib/vestibule
# 8080: the proxy; 9901: the admin endpoint (listens on all addresses, behind the admin token).
EXPOSE 8080 9901
# Healthy while /readyz answers 200 (a healthy origin peer). `vestibule probe` reads the admin
# address and token from the config, so the check needs no curl and no token of its own.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/vestibule", "probe", "--config", "/etc/vestibule/conf/vestibule.toml"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/vestibule"]
CMD ["--config", "/etc/vestibule/conf/vestibule.toml"]
