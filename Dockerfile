# syntax=docker/dockerfile:1
#
# hpmount node agent image.
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#                --build-arg COMMIT=$(git rev-parse --short HEAD) -t ghcr.io/hpmount/hpmount:<tag> .
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ...

# Build stage: a static, reproducible binary. The builder runs on the build
# machine's platform and cross-compiles (pure Go, CGO off), so multi-arch
# builds need no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=unknown
WORKDIR /src
# Modules first, so source edits do not invalidate the download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/hpmount ./cmd/hpmount

# Runtime stage. Not distroless/static: `hpmount diag` runs findmnt
# (util-linux), so the image needs it and the shared libraries it links.
# Online filesystem growth runs no tool: the agent makes the filesystem's own
# resize ioctl, so neither xfsprogs nor e2fsprogs is installed.
# debian:bookworm-slim ships util-linux as a maintained package with security
# updates; nothing else is installed (--no-install-recommends) and the apt
# lists are removed.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends util-linux \
 && rm -rf /var/lib/apt/lists/* \
 && findmnt --version
COPY --from=build /out/hpmount /usr/local/bin/hpmount
LABEL org.opencontainers.image.title="hpmount" \
      org.opencontainers.image.description="Node agent for KubeVirt volume hotplug: mounts hotplugged volumes into virt-launcher pods" \
      org.opencontainers.image.source="https://github.com/hpmount/hpmount"
# The agent needs root (mount, mknod, device cgroups); the DaemonSet also
# runs it privileged.
USER 0:0
ENTRYPOINT ["/usr/local/bin/hpmount"]
CMD ["agent"]
