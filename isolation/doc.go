// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package isolation crosses into other namespaces and paths safely.
//
// Everything beneath a pod's directories, and everything inside a PVC, can be
// shaped by a tenant: a symlink named disk.img, a parent directory swapped for
// a link to /etc, a device node where a file should be. The agent therefore
// never resolves such a path with plain open(2). It opens a trusted root once
// (the kubelet root, given by the operator) and resolves every path beneath it
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), or, on kernels without
// openat2, a component-by-component O_NOFOLLOW walk. The resulting file
// descriptor is what gets checked and then used, through /proc/self/fd/N or the
// fd-based mount API, so nothing can be swapped between check and use.
//
// Mount-changing syscalls must run in the host's mount namespace, not in the
// agent container's slave view. MountNamespace runs functions on an OS thread
// that has joined that namespace (found through Host: a host process in the
// host's procfs). With a timeout set, a call that has not returned in time
// is abandoned on its thread and a new thread serves the calls that follow,
// so one syscall stuck in the kernel never stops the rest; Health says how
// many were abandoned and how long the oldest has been stuck.
//
// An abandoned call keeps running until its syscall returns, possibly long
// after its caller moved on (detached the volume, started a replacement
// call on the same target). DoLive and CallLive hand the call a Live, whose
// Check fails with ErrAbandoned from the moment the caller gave up: a call
// checks it before every syscall that changes something, and hands its
// values back only through CallLive's result, never through memory the
// caller reads. A call given up before it started never starts.
//
// ValidName is the one check that a name about to be resolved beneath a
// directory fd is a single plain path component.
//
// It refuses any knowledge of kubelet layouts, KubeVirt or mounts.
package isolation
