// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openInterval is how often openLoop opens each disk: QEMU opens a disk
// when it is attached and when libvirt reopens it; this samples the
// device cgroup's answer far more often than either.
const openInterval = 2 * time.Millisecond

// openStats is what openLoop saw of one path: how many opens, how many
// were refused, and each stretch of refusals, from the first refused open
// to the first that succeeded again (or to the end).
type openStats struct {
	Path    string          `json:"path"`
	Opens   int             `json:"opens"`
	Refused int             `json:"refused"`
	Windows []time.Duration `json:"windows"`
	// Errors are the distinct errors of the refused opens.
	Errors []string `json:"errors"`
}

// openLoop opens each path beneath root read-write, every openInterval,
// until stdin closes, then prints each path's openStats as JSON. It says
// "ready" once the first round is done.
func openLoop(root int, paths []string) int {
	done := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		close(done)
	}()
	stats := make([]openStats, len(paths))
	since := make([]time.Time, len(paths))
	for round := 0; ; round++ {
		now := time.Now()
		for i, p := range paths {
			s := &stats[i]
			s.Path = p
			s.Opens++
			fd, err := unix.Openat(root, p, unix.O_RDWR|unix.O_CLOEXEC, 0)
			switch {
			case err == nil:
				unix.Close(fd)
				if !since[i].IsZero() {
					s.Windows = append(s.Windows, now.Sub(since[i]))
					since[i] = time.Time{}
				}
			default:
				s.Refused++
				if since[i].IsZero() {
					since[i] = now
				}
				if e := err.Error(); !slices.Contains(s.Errors, e) {
					s.Errors = append(s.Errors, e)
				}
			}
		}
		if round == 0 {
			fmt.Println("ready")
		}
		select {
		case <-done:
			for i := range stats {
				if !since[i].IsZero() {
					stats[i].Windows = append(stats[i].Windows, time.Since(since[i]))
				}
			}
			if err := json.NewEncoder(os.Stdout).Encode(stats); err != nil {
				return 2
			}
			return 0
		case <-time.After(openInterval):
		}
	}
}

// qemuLoop is a running openLoop: QEMU's opens of a launcher's disks, as
// 107 in its compute container's cgroup.
type qemuLoop struct {
	cmd   *exec.Cmd
	stdin *os.File
	out   *bufio.Reader
}

// startQEMULoop starts opening paths (as the launcher sees them) and
// returns once the first round is done.
func startQEMULoop(t *testing.T, cgroup string, launcher *pod, paths []string) *qemuLoop {
	t.Helper()
	var rel []string
	for _, p := range paths {
		rel = append(rel, strings.TrimPrefix(p, "/"))
	}
	r, w, err := os.Pipe()
	must(t, err)
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), roleEnv+"=probe", probeCgroupEnv+"="+cgroup, probeQEMUEnv+"=1", probeLoopEnv+"=1",
		probeRootEnv+"="+fmt.Sprintf("/proc/%d/root", launcher.pid()), probePathsEnv+"="+strings.Join(rel, ";"))
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	r.Close()
	q := &qemuLoop{cmd: cmd, stdin: w, out: bufio.NewReader(out)}
	t.Cleanup(func() { q.stdin.Close(); _ = q.cmd.Wait() })
	if line, err := q.out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("QEMU's open loop: %q %v", line, err)
	}
	return q
}

// stop ends the loop and returns what it saw, by path.
func (q *qemuLoop) stop(t *testing.T) map[string]openStats {
	t.Helper()
	q.stdin.Close()
	var stats []openStats
	must(t, json.NewDecoder(q.out).Decode(&stats))
	must(t, q.cmd.Wait())
	out := map[string]openStats{}
	for _, s := range stats {
		out[s.Path] = s
	}
	return out
}
