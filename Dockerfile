# Multi-stage build: compile in the Rust image, run as a non-root user in a slim Debian.
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY pages ./pages
COPY benches ./benches
RUN cargo build --release --locked --bin vestibule

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /etc/vestibule --shell /usr/sbin/nologin vestibule
COPY --from=build /src/target/release/vestibule /usr/local/bin/vestibule
COPY conf /etc/vestibule/conf
COPY pages /etc/vestibule/pages
RUN chown -R vestibule /etc/vestibule && chmod 600 /etc/vestibule/conf/keys.toml
USER vestibule
WORKDIR /etc/vestibule
# 8080: the proxy; 9901: the admin endpoint (set admin.listen to 0.0.0.0:9901 and a token to reach it).
EXPOSE 8080 9901
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/vestibule"]
CMD ["--config", "/etc/vestibule/conf/vestibule.toml"]
