// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// maxContainerIDLen bounds a container ID: runtimes use 64 hex digits.
const maxContainerIDLen = 128

// ErrContainerNotFound is wrapped when a pod's cgroup has no cgroup for
// the container asked for: it has not started yet, or it was replaced by a
// restart and the pod status still names the old one.
var ErrContainerNotFound = errors.New("container cgroup not found")

// ErrNoContainerID is wrapped when a container is asked for by an empty
// ID: the pod status does not name it yet.
var ErrNoContainerID = errors.New("no container ID")

// Container is the cgroup of one container of a pod and every cgroup below
// it. Pod is its parent, the pod-level cgroup, which belongs to every
// container of the pod.
type Container struct {
	PodUID string
	// ID is the container ID without the runtime prefix.
	ID  string
	Pod string
	Dir string
	// Descendants are the cgroups below Dir, parents before children.
	Descendants []string
}

// TopDown returns Dir followed by Descendants, parents before children.
func (c *Container) TopDown() []string { return append([]string{c.Dir}, c.Descendants...) }

// BottomUp returns the reverse of TopDown: children before parents.
func (c *Container) BottomUp() []string { return reversed(c.TopDown()) }

// ParseContainerID returns the bare ID of a container ID as a pod status
// gives it, "<runtime>://<id>" (containerd://, cri-o://, docker://), or
// already bare. The ID must be letters and digits: it becomes part of a
// cgroup directory name.
func ParseContainerID(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("container ID: %w", ErrNoContainerID)
	}
	id := s
	if _, after, ok := strings.Cut(s, "://"); ok {
		id = after
	}
	if id == "" || len(id) > maxContainerIDLen {
		return "", fmt.Errorf("container ID %q: must be 1 to %d characters after the runtime prefix", s, maxContainerIDLen)
	}
	for _, r := range id {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') {
			return "", fmt.Errorf("container ID %q: only letters and digits are allowed", s)
		}
	}
	return id, nil
}

// ContainerDirNames are the names a container's cgroup directory has below
// its pod cgroup, by runtime and cgroup driver:
//   - containerd (CRI getCgroupsPath): <id> with cgroupfs; with systemd the
//     runc path "<pod slice>:cri-containerd:<id>", the scope
//     cri-containerd-<id>.scope;
//   - cri-dockerd: <id> with cgroupfs, docker-<id>.scope with systemd;
//   - CRI-O: crio-<id> with cgroupfs, crio-<id>.scope with systemd (its
//     conmon's crio-conmon-<id>.scope is not the container's).
func ContainerDirNames(id string) []string {
	return []string{id, "cri-containerd-" + id + ".scope", "docker-" + id + ".scope", "crio-" + id + ".scope", "crio-" + id}
}

// Container finds the cgroup of the pod's container containerID (as the
// pod status gives it, runtime prefix and all) directly below the pod
// cgroup, and every cgroup below it. No cgroup by any of the runtimes'
// names wraps ErrContainerNotFound; two are refused.
func (c *Finder) Container(root, podUID, containerID string) (*Container, error) {
	id, err := ParseContainerID(containerID)
	if err != nil {
		return nil, fmt.Errorf("pod %q: %w", podUID, err)
	}
	cgs, err := c.Find(root, podUID)
	if err != nil {
		return nil, err
	}
	return cgs.container(id)
}

func (p *Cgroups) container(id string) (*Container, error) {
	names := ContainerDirNames(id)
	var found []string
	for _, d := range p.Descendants {
		if filepath.Dir(d) == p.Pod && slices.Contains(names, filepath.Base(d)) {
			found = append(found, d)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("pod %q: no cgroup named %q below %q: %w", p.PodUID, names, p.Pod, ErrContainerNotFound)
	case 1:
	default:
		return nil, fmt.Errorf("pod %q: container %s has %d cgroups below %q: %q", p.PodUID, id, len(found), p.Pod, found)
	}
	ctr := &Container{PodUID: p.PodUID, ID: id, Pod: p.Pod, Dir: found[0]}
	for _, d := range p.Descendants {
		if strings.HasPrefix(d, found[0]+string(filepath.Separator)) {
			ctr.Descendants = append(ctr.Descendants, d)
		}
	}
	return ctr, nil
}

func reversed(all []string) []string {
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return all
}
