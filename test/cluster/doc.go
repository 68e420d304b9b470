// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package cluster runs a real, minimal Kubernetes control plane for the
// end-to-end tests: an etcd and a kube-apiserver built from upstream sources
// (test/tools/build.sh) and started as child processes on loopback, each with
// its data and logs in a temporary directory.
//
// It owns: starting and stopping those two processes (and kube-apiserver
// alone, for an API outage: StopAPIServer, StartAPIServer), the credentials they
// trust (a generated CA and serving certificate, a static admin token, a
// service-account signing key), and small client helpers the scenarios share:
// server-side apply of multi-document YAML, TokenRequest-based
// service-account credentials, SelfSubjectAccessReview, and installing the
// VirtualMachineInstance CRD from package test/crds.
//
// It refuses to be a cluster: no controller-manager, scheduler or kubelet run.
// Nothing creates default service accounts or their tokens, namespaces are
// never finalized after deletion, Deployments never get pods and garbage
// collection does not happen. Tests create explicitly what they need.
//
// The binaries are looked up in $HPMOUNT_TOOLS_DIR, else
// $HOME/.cache/hpmount/bin; when missing the error says to run
// test/tools/build.sh (or `make tools`).
package cluster
