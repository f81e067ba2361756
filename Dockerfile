# syntax=docker/dockerfile:1
# The ax image: a static-ish release build of the `ax` binary on a distroless base.
#   docker build -t ax:dev .
# Builder: the Rust toolchain on Debian 12 plus protoc and its well-known types (etcd-client's
# build generates its gRPC
# code). Runtime: distroless cc (glibc, libgcc, CA certificates, no shell, no package manager),
# running as the unprivileged user 65532 that the Helm chart's securityContext expects.

FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The cache mounts keep the crate registry and the target dir between builds (BuildKit); the
# binary is copied out in the same step since the target dir is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p ax --bin ax \
 && install -D -m 0755 target/release/ax /out/ax

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ax /usr/local/bin/ax
# The chart mounts the configuration at /etc/ax/ax.toml, the path ax reads by default.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["ax"]
CMD ["serve"]
