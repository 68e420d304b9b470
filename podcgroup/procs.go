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

// Procs lists the processes in the pod's cgroups, pod level first, at
// most max. more reports that the cgroups hold processes past those: a
// caller for whom a list cut short could mislead (QEMU may be any of them)
// refuses it. A cgroup that went away meanwhile (a container that exited)
// is passed over.
func Procs(c *Cgroups, max int) (pids []int, more bool, err error) {
	for _, dir := range c.TopDown() {
		f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return pids, false, fmt.Errorf("processes of pod %q: %w", c.PodUID, err)
		}
		got, err := ParseProcs(f, max+1-len(pids))
		f.Close()
		if err != nil {
			return pids, false, fmt.Errorf("processes of pod %q in %q: %w", c.PodUID, dir, err)
		}
		if pids = append(pids, got...); len(pids) > max {
			return pids[:max], true, nil
		}
	}
	return pids, false, nil
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
