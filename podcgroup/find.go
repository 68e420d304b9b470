// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Bounds of the cgroup tree walks. Kubelet's pod cgroups sit at most a few
// levels below the hierarchy root (kubepods/burstable/pod<uid>, or
// kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice
// below an optional --cgroup-root); containers are one level below the pod.
const (
	maxPodSearchDepth = 6     // levels below root searched for the pod cgroup
	maxSubtreeDepth   = 8     // levels below the pod cgroup that are walked
	maxVisitedDirs    = 50000 // directories read by one search
	maxPodUIDLen      = 128
)

// ErrNotFound is wrapped when no cgroup of a pod exists under a root.
var ErrNotFound = errors.New("pod cgroup not found")

// Cgroups is the cgroup of one pod and every cgroup below it.
type Cgroups struct {
	Root   string // where the search started
	PodUID string
	Pod    string // pod-level cgroup directory
	// Descendants are the cgroups below Pod (containers and anything they
	// created), parents before children.
	Descendants []string
}

// TopDown returns Pod followed by Descendants, parents before children.
func (p *Cgroups) TopDown() []string {
	return append([]string{p.Pod}, p.Descendants...)
}

// BottomUp returns the reverse of TopDown: children before parents.
func (p *Cgroups) BottomUp() []string { return reversed(p.TopDown()) }

// Find finds the cgroup of the pod with podUID under root, named as
// the kubelet names it with the cgroupfs driver (pod<uid>) or the systemd
// driver ([<parent>-]kubepods[-<qos>]-pod<uid with _ for ->.slice), and every cgroup
// below it. The walks are bounded in depth and never follow symlinks.
func Find(root, podUID string) (*Cgroups, error) {
	if err := validatePodUID(podUID); err != nil {
		return nil, err
	}
	pod, err := findPodDir(root, podUID)
	if err != nil {
		return nil, err
	}
	desc, err := walkSubtree(pod)
	if err != nil {
		return nil, err
	}
	return &Cgroups{Root: root, PodUID: podUID, Pod: pod, Descendants: desc}, nil
}

func validatePodUID(uid string) error {
	if uid == "" || len(uid) > maxPodUIDLen {
		return fmt.Errorf("pod UID %q: must be 1 to %d characters", uid, maxPodUIDLen)
	}
	for _, r := range uid {
		ok := r == '-' || r == '_' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')
		if !ok {
			return fmt.Errorf("pod UID %q: only letters, digits, '-' and '_' are allowed", uid)
		}
	}
	return nil
}

// podUIDOf returns the pod UID a directory name is the kubelet's cgroup of:
// pod<uid> with the cgroupfs driver; with the systemd driver
// kubepods-pod<uid>.slice, kubepods-burstable-pod<uid>.slice or
// kubepods-besteffort-pod<uid>.slice, '-' in the uid escaped as '_', and
// below a --cgroup-root slice the parents' names prefixed (e.g.
// kubelet-kubepods-pod<uid>.slice).
func podUIDOf(name string) (string, bool) {
	if uid, ok := strings.CutPrefix(name, "pod"); ok && validatePodUID(uid) == nil {
		return uid, true
	}
	if !strings.Contains(name, "kubepods") || !strings.HasSuffix(name, ".slice") {
		return "", false
	}
	i := strings.LastIndex(name, "-pod")
	if i < 0 {
		return "", false
	}
	uid := strings.ReplaceAll(strings.TrimSuffix(name[i+len("-pod"):], ".slice"), "_", "-")
	return uid, validatePodUID(uid) == nil
}

// indexPodDirs walks the tree once, with findPodDir's bounds, and lists the
// cgroup directories of every pod by UID.
func indexPodDirs(root string) (map[string][]string, error) {
	index := map[string][]string{}
	visited := 0
	queue := []queued{{root, 0}}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		subdirs, err := readSubdirs(cur.path)
		if err != nil {
			if cur.path != root && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		if visited++; visited > maxVisitedDirs {
			return nil, fmt.Errorf("index pod cgroups under %q: more than %d directories", root, maxVisitedDirs)
		}
		for _, name := range subdirs {
			p := filepath.Join(cur.path, name)
			if uid, ok := podUIDOf(name); ok {
				index[uid] = append(index[uid], p)
				continue
			}
			if cur.depth+1 < maxPodSearchDepth {
				queue = append(queue, queued{p, cur.depth + 1})
			}
		}
	}
	return index, nil
}

type queued struct {
	path  string
	depth int
}

func findPodDir(root, uid string) (string, error) {
	index, err := indexPodDirs(root)
	if err != nil {
		return "", fmt.Errorf("search cgroup of pod %q: %w", uid, err)
	}
	found := index[uid]
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no cgroup named pod%s or *kubepods*-pod%s.slice within %d levels of %q: %w",
			uid, strings.ReplaceAll(uid, "-", "_"), maxPodSearchDepth, root, ErrNotFound)
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("pod %q has %d cgroups under %q: %q", uid, len(found), root, found)
	}
}

func walkSubtree(pod string) ([]string, error) {
	var out []string
	queue := []queued{{pod, 0}}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		subdirs, err := readSubdirs(cur.path)
		if err != nil {
			if cur.path != pod && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("walk pod cgroup: %w", err)
		}
		if len(subdirs) > 0 && cur.depth >= maxSubtreeDepth {
			return nil, fmt.Errorf("pod cgroup %q: %q has cgroups deeper than %d levels", pod, cur.path, maxSubtreeDepth)
		}
		if len(out)+len(subdirs) > maxVisitedDirs {
			return nil, fmt.Errorf("pod cgroup %q: more than %d descendants", pod, maxVisitedDirs)
		}
		for _, name := range subdirs {
			p := filepath.Join(cur.path, name)
			out = append(out, p)
			queue = append(queue, queued{p, cur.depth + 1})
		}
	}
	return out, nil
}

// readSubdirs lists the directories in dir, sorted by name. Symlinks and
// other non-directories are skipped: the entry type comes from getdents and
// is never resolved.
func readSubdirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read cgroup directory %q: %w", dir, err)
	}
	var out []string
	for _, e := range entries {
		if e.Type()&fs.ModeType == fs.ModeDir {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
