// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// maxProcs bounds how many processes Procs returns: a launcher runs a
// handful of containers, and anything a tenant forks past that adds
// nothing to a question about the pod's mount namespaces.
const maxProcs = 256

// Procs lists the processes in the pod's cgroups, pod level first, at
// most maxProcs. A cgroup that went away meanwhile (a container that
// exited) is passed over.
func Procs(c *Cgroups) ([]int, error) {
	var pids []int
	for _, dir := range c.TopDown() {
		f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return pids, fmt.Errorf("processes of pod %q: %w", c.PodUID, err)
		}
		more, err := ParseProcs(f, maxProcs-len(pids))
		f.Close()
		if err != nil {
			return pids, fmt.Errorf("processes of pod %q in %q: %w", c.PodUID, dir, err)
		}
		if pids = append(pids, more...); len(pids) >= maxProcs {
			break
		}
	}
	return pids, nil
}

// ParseProcs reads at most max PIDs from a cgroup.procs file.
func ParseProcs(r io.Reader, max int) ([]int, error) {
	var pids []int
	sc := bufio.NewScanner(r)
	for len(pids) < max && sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil || pid <= 0 {
			return pids, fmt.Errorf("cgroup.procs line %q is not a process id", sc.Text())
		}
		pids = append(pids, pid)
	}
	return pids, sc.Err()
}
