// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package manifests renders and checks the kustomize base in deploy/.
//
// It owns Render (kustomize's Go API, krusty, reading only the local folder,
// never the network) and the tests that hold the manifests to what the agent
// needs: the privileges and host paths of the DaemonSet, its flags agreeing
// with its ports, probes and mounts, a server-side dry run of every object
// against a real kube-apiserver (package test/cluster), and RBAC minimality
// checked with SelfSubjectAccessReviews as the agent's ServiceAccount. It
// also generates the Helm chart from those renders (GenerateChart) and
// packages it as a chart repository (PackageChart), both run by test/chartgen.
//
// It refuses to deploy anything to a real cluster: objects are applied only
// to the throwaway control plane of the test.
package manifests
