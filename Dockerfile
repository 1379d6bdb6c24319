# syntax=docker/dockerfile:1
# The CAPTF image: one static binary, run as /manager by the Deployment
# (config/manager: command ["/manager", "manager"]) and as /runner by every Job's init
# container (`/runner copy /captf/bin/runner`: under the name `runner` the binary is the
# runner). Both names are the same file.
#
#   docker build -t ghcr.io/captf-io/cluster-api-provider-terraform:dev .
#
# The binary is linked statically against musl (no libc in the final image), so it runs on
# distroless/static. TLS is rustls with ring: no OpenSSL. The `dist` profile (Cargo.toml) is
# `release` with whole-program optimisation: less code for the manager to hold in memory.

ARG RUST_VERSION=1.95.0

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
# musl-tools: ring compiles C and assembly for the musl target.
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
# The commit and its date for `captf version` and captf_build_info (the context has no .git):
#   --build-arg CAPTF_COMMIT=$(git rev-parse HEAD) --build-arg CAPTF_DATE=$(git log -1 --format=%cI)
ARG CAPTF_COMMIT=unknown
ARG CAPTF_DATE=unknown
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates crates
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked -p captf --bin captf --target x86_64-unknown-linux-musl \
    && mkdir -p /out \
    && cp target/x86_64-unknown-linux-musl/dist/captf /out/manager \
    && ln /out/manager /out/runner \
    && /out/manager version \
    && /out/runner version

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/manager /out/runner /
# distroless' nonroot user; the Deployment's pod securityContext says the same.
USER 65532:65532
ENTRYPOINT ["/manager"]
CMD ["manager"]
