// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package release builds a release of hpmount into one folder, offline and
// reproducibly: the same source, version, commit and date give the same
// bytes (TestReproducible builds twice and compares every file).
//
// Build writes:
//
//   - <command>-<os>-<arch>: each main package under cmd/, static
//     (CGO_ENABLED=0), -trimpath, -buildid= and no VCS stamp, version and
//     commit set through -ldflags, for linux/amd64 and linux/arm64, and the
//     kubectl plugin for darwin and windows (.exe) on both too;
//   - <command>-<os>-<arch>.cdx.json: a CycloneDX SBOM of the Go modules
//     linked into that binary, read from the binary itself
//     (debug/buildinfo), so it lists what was built, not what go.mod asks;
//   - image/: a multi-arch OCI image layout (an image index of one manifest
//     per architecture, each with one layer holding the static hpmount at
//     /usr/local/bin/hpmount), with the org.opencontainers.image
//     annotations and labels; no daemon and no base image. findmnt is not
//     in it: diag falls back to the kernel's mountinfo;
//   - chart/: the Helm chart repository of deploy/chart (the .tgz and
//     index.yaml), its version and appVersion set from the release version,
//     with fixed times in the archive and the index;
//   - kubectl-hpmount-<os>-<arch>.tar.gz: the plugin and the LICENSE, as
//     krew installs them;
//   - hpmount.intoto.json: an in-toto statement of SLSA v1 provenance
//     whose subjects are every file above with its sha256: the source
//     commit, the Go toolchain, the version and the fixed build settings,
//     and no times but the source date. It is not signed (offline, there
//     is no key); it can be signed as it is;
//   - SHA256SUMS over every file above, in sha256sum's format;
//   - hpmount.yaml: the krew manifest (deploy/krew/hpmount.yaml) with the
//     version and each archive's sha256 from SHA256SUMS.
//
// Times come from the commit (SOURCE_DATE_EPOCH), never the clock.
//
// It refuses to build a version that is not vMAJOR.MINOR.PATCH (a chart
// version must be SemVer) and a chart whose image.tag names another
// version: the chart would deploy an image the release does not contain.
// It signs nothing and pushes nothing; the README says how to push the
// image layout and serve the chart folder. cmd/release is its command
// (make release).
package release
