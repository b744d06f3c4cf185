# The cloud-controller-manager image, for linux/amd64 and linux/arm64:
#   docker build -t cloud-controller-manager:aws --build-arg FEATURES=aws .
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/cloud-controller-manager:aws \
#     --build-arg FEATURES=aws --push .
# The build stage runs on the build machine's platform and cross-compiles for the target's
# (hack/build-release.sh, which make build-arm64 and the arm64 smoke test of make test run too).
FROM --platform=$BUILDPLATFORM rust:1-bookworm AS build
ARG FEATURES=fake
ARG TARGETARCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN hack/build-release.sh "$TARGETARCH" "$FEATURES" /out/cloud-controller-manager

# glibc and libgcc, nothing else; a non-root user.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/cloud-controller-manager /usr/local/bin/cloud-controller-manager
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cloud-controller-manager"]
