# A small static image of the cloud-controller-manager.
#   docker build -t cloud-controller-manager:dev --build-arg FEATURES=fake .
FROM rust:1-bookworm AS build
ARG FEATURES=fake
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl \
      -p cloud-controller-manager --no-default-features --features "jemalloc,${FEATURES}" \
 && cp target/x86_64-unknown-linux-musl/release/cloud-controller-manager /cloud-controller-manager

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /cloud-controller-manager /usr/local/bin/cloud-controller-manager
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cloud-controller-manager"]
