# syntax=docker/dockerfile:1
# Copyright The hpmount Authors.
# SPDX-License-Identifier: Apache-2.0

# hpmount node agent image, for a builder with a Docker daemon. The
# release's image (make release: dist/image, an OCI layout for linux/amd64
# and linux/arm64, reproducible, see test/release) is built in Go without
# one; this file makes the same image: the static agent at
# /usr/local/bin/hpmount, an empty /tmp, nothing else.
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(git log -1 --format=%cI) -t ghcr.io/hpmount/hpmount:v0.1.0 .

# Build stage: the release's build flags. The builder runs on the build
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
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH GOFLAGS= \
    go build -trimpath -buildvcs=false \
      -ldflags "-s -w -buildid= -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/usr/local/bin/hpmount ./cmd/hpmount \
 && mkdir -m 1777 /out/tmp

# Runtime: nothing but the agent. It runs no tool; `hpmount diag` reads the
# kernel's mountinfo when findmnt is not installed (--mount-source auto).
FROM scratch
ARG VERSION=dev
ARG COMMIT=unknown
ARG CREATED
COPY --from=build /out/ /
LABEL org.opencontainers.image.title="hpmount" \
      org.opencontainers.image.description="Node agent for KubeVirt volume hotplug: mounts hotplugged volumes into virt-launcher pods" \
      org.opencontainers.image.source="https://github.com/hpmount/hpmount" \
      org.opencontainers.image.url="https://github.com/hpmount/hpmount" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${CREATED}"
# The agent needs root (mount, mknod, device cgroups); the DaemonSet also
# runs it privileged.
USER 0:0
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENTRYPOINT ["/usr/local/bin/hpmount"]
CMD ["agent"]
