// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package crds embeds the CustomResourceDefinitions that the end-to-end
// harness installs into its control plane. The KubeVirt Go modules are not
// available to this project, so the definitions are written here by hand and
// follow upstream's shape where the agent depends on it (for example the
// VirtualMachineInstance CRD has no status subresource).
package crds
