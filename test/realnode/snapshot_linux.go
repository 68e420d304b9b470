// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// HostPaths are where a kubelet, containerd, runc or a CNI plugin writes
// outside the node's Dir whatever their configuration says (or where they
// would, had the configuration not moved them): the device-plugin socket
// dir, pod and container logs, shim sockets and runc state, pinned network
// namespaces, the CNI cache, containerd's defaults and the flexvolume dir.
var HostPaths = []string{
	"/var/lib/kubelet", "/var/log/pods", "/var/log/containers",
	"/run/containerd", "/run/netns", "/var/lib/cni",
	"/var/lib/containerd", "/opt/containerd", "/usr/libexec/kubernetes",
	// The agent DaemonSet's hostPath (DirectoryOrCreate) for old growth mounts.
	"/run/hpmount",
}

// walkDepth bounds the walk of each host path.
const walkDepth = 5

// Snapshot is what exists of HostPaths, the network links, the top-level
// cgroups of every hierarchy, the loop devices and the processes a Stack
// started at one moment.
type Snapshot struct {
	Paths, Links, Cgroups map[string]bool
	// Loops are the backing files of attached loop devices.
	Loops map[string]bool
	// Procs are the live processes marked as a Stack's (etcd,
	// kube-apiserver, containerd, its shims, the kubelet, the CSI plugin,
	// a host agent; harnessDaemons), as "name pid", whichever harness
	// started them.
	Procs map[string]bool
}

// TakeSnapshot records the host's state.
func TakeSnapshot() Snapshot {
	s := Snapshot{Paths: map[string]bool{}, Links: map[string]bool{}, Cgroups: map[string]bool{}, Loops: map[string]bool{},
		Procs: map[string]bool{}}
	for _, d := range harnessDaemons() {
		s.Procs[d.String()] = true
	}
	for _, root := range HostPaths {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			s.Paths[p] = true
			if d.IsDir() && strings.Count(strings.TrimPrefix(p, root), "/") >= walkDepth {
				return filepath.SkipDir
			}
			return nil
		})
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		s.Links[l.Name()] = true
	}
	for _, h := range hierarchies() {
		entries, _ := os.ReadDir(h)
		for _, e := range entries {
			if e.IsDir() {
				s.Cgroups[filepath.Join(h, e.Name())] = true
			}
		}
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, b := range backing {
		if data, err := os.ReadFile(b); err == nil {
			s.Loops[strings.TrimSpace(string(data))] = true
		}
	}
	return s
}

// Added lists what after has and s had not, sorted, each prefixed with
// its kind (path, link, cgroup, loop, process).
func (s Snapshot) Added(after Snapshot) []string {
	var added []string
	for _, kind := range []struct {
		name          string
		before, after map[string]bool
	}{{"path", s.Paths, after.Paths}, {"link", s.Links, after.Links}, {"cgroup", s.Cgroups, after.Cgroups}, {"loop", s.Loops, after.Loops},
		{"process", s.Procs, after.Procs}} {
		for k := range kind.after {
			if !kind.before[k] {
				added = append(added, kind.name+" "+k)
			}
		}
	}
	sort.Strings(added)
	return added
}

// RemoveNew removes every path under HostPaths that exists now and did
// not in s: the highest new path of each branch, with what is below it.
func (s Snapshot) RemoveNew() error {
	now := TakeSnapshot()
	var errs []error
	for _, p := range s.Added(now) {
		path, ok := strings.CutPrefix(p, "path ")
		if !ok || now.Paths[filepath.Dir(path)] && !s.Paths[filepath.Dir(path)] {
			continue // not a path, or its new parent goes with it
		}
		if err := os.RemoveAll(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %q: %w", path, err))
		}
	}
	return errors.Join(errs...)
}

// TeardownReport is what a teardown did: its error, and what it left on
// the host compared with a Snapshot taken before the node started.
type TeardownReport struct {
	Err  string   `json:"error,omitempty"`
	Left []string `json:"left,omitempty"`
}

// Clean says whether the teardown worked and left nothing.
func (r TeardownReport) Clean() bool { return r.Err == "" && len(r.Left) == 0 }

func (r TeardownReport) String() string {
	var b strings.Builder
	if r.Err != "" {
		fmt.Fprintf(&b, "teardown failed: %s\n", r.Err)
	}
	if len(r.Left) > 0 {
		fmt.Fprintf(&b, "teardown left behind:\n  %s\n", strings.Join(r.Left, "\n  "))
	} else {
		fmt.Fprintf(&b, "teardown left nothing behind in %s, the links, the cgroups, the loop devices or the processes\n",
			strings.Join(HostPaths, ", "))
	}
	return b.String()
}

// StopChecked runs stop, a node's teardown, and reports it against before:
// the one check of the tests' TestMain and of make node-down. What other
// programs made on the host meanwhile is reported too.
func StopChecked(before Snapshot, stop func() error) TeardownReport {
	var r TeardownReport
	if err := stop(); err != nil {
		r.Err = err.Error()
	}
	r.Left = before.Added(TakeSnapshot())
	return r
}
