// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hpmount/hpmount/test/csiplugin"
)

// ownerEnv marks the processes a Stack starts: set in the harness's own
// environment before the first of them, it is inherited by etcd,
// kube-apiserver, containerd (and through it every containerd shim), the
// kubelet, the CSI plugin and an agent run on the host. Its value names
// the harness process (pid and start time, so a reused pid is not taken
// for it), the node and the Stack's directory. A marked process whose
// harness is gone is a leftover: nothing will ever stop it.
const ownerEnv = "HPMOUNT_REALNODE_OWNER"

// daemons are the programs a Stack runs for as long as it is up, by the
// base name they are started as; "containerd-shim" is a prefix
// (containerd-shim-runc-v2).
var daemons = []string{"etcd", "kube-apiserver", "containerd", "containerd-shim", "kubelet", "hpmount-test-csi", "hpmount"}

// owner is the harness process that started a marked process.
type owner struct {
	Node, Dir string
	PID       int
	Start     uint64 // clock ticks after boot, /proc/<pid>/stat field 22
}

func (o owner) encode() string {
	return url.Values{"node": {o.Node}, "dir": {o.Dir}, "pid": {strconv.Itoa(o.PID)},
		"start": {strconv.FormatUint(o.Start, 10)}}.Encode()
}

func parseOwner(s string) (owner, bool) {
	v, err := url.ParseQuery(s)
	if err != nil {
		return owner{}, false
	}
	pid, err1 := strconv.Atoi(v.Get("pid"))
	start, err2 := strconv.ParseUint(v.Get("start"), 10, 64)
	if err1 != nil || err2 != nil || v.Get("node") == "" {
		return owner{}, false
	}
	return owner{Node: v.Get("node"), Dir: v.Get("dir"), PID: pid, Start: start}, true
}

// alive says whether the owner is still the process it was.
func (o owner) alive() bool {
	st, err := readStat(o.PID)
	return err == nil && !st.zombie && st.start == o.Start
}

// markOwner makes this process the owner, for node in dir, of every
// process it starts from now on.
func markOwner(node, dir string) error {
	st, err := readStat(os.Getpid())
	if err != nil {
		return err
	}
	return os.Setenv(ownerEnv, owner{Node: node, Dir: dir, PID: os.Getpid(), Start: st.start}.encode())
}

// procStat is what the harness reads of /proc/<pid>/stat.
type procStat struct {
	zombie bool
	start  uint64
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The fields after the command name, which may hold spaces: the state
	// is the 3rd field, the start time the 22nd.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat start time: %w", pid, err)
	}
	return procStat{zombie: f[0] == "Z" || f[0] == "X", start: start}, nil
}

// daemon is one live marked process running one of daemons.
type daemon struct {
	PID   int
	Start uint64 // its own start time: a pid reused later is not it
	Name  string
	Owner owner
}

func (d daemon) String() string { return fmt.Sprintf("%s %d", d.Name, d.PID) }

// harnessDaemons lists the live processes a Stack started, of any owner,
// alive or not. A zombie has exited and is not listed.
func harnessDaemons() []daemon {
	entries, _ := os.ReadDir("/proc")
	var out []daemon
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if d, ok := readDaemon(pid); ok {
			out = append(out, d)
		}
	}
	return out
}

func readDaemon(pid int) (daemon, bool) {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(cmdline) == 0 {
		return daemon{}, false
	}
	name := filepath.Base(string(bytes.SplitN(cmdline, []byte{0}, 2)[0]))
	if !isDaemon(name) {
		return daemon{}, false
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return daemon{}, false
	}
	for _, kv := range bytes.Split(environ, []byte{0}) {
		v, ok := bytes.CutPrefix(kv, []byte(ownerEnv+"="))
		if !ok {
			continue
		}
		o, ok := parseOwner(string(v))
		st, err := readStat(pid)
		if !ok || err != nil || st.zombie {
			return daemon{}, false
		}
		return daemon{PID: pid, Start: st.start, Name: name, Owner: o}, true
	}
	return daemon{}, false
}

func isDaemon(name string) bool {
	for _, d := range daemons {
		if name == d || d == "containerd-shim" && strings.HasPrefix(name, d) {
			return true
		}
	}
	return false
}

// clearLeftovers removes what an earlier Stack of node left on the host
// when its harness died without tearing it down (a panic, a SIGKILL): its
// processes (the shims outlive the harness, the rest die with it), the
// processes and cgroups under the node's cgroup root, the CNI bridge,
// mounts and loop devices under its directory and dir, and that
// directory. A bridge left behind made the next start fail at once with
// "File exists". A Stack of node whose harness is alive is refused, not
// cleared: it is in use.
func clearLeftovers(node, dir string) error {
	var stale []daemon
	dirs := []string{dir}
	for _, d := range harnessDaemons() {
		if d.Owner.Node != node {
			continue
		}
		// This process's own earlier Stack of node was stopped: two Stacks
		// of one node cannot run at once.
		if d.Owner.PID != os.Getpid() && d.Owner.alive() {
			return fmt.Errorf("node %q is up already: %s belongs to the harness with pid %d (%q); stop that first (make node-down)",
				node, d, d.Owner.PID, d.Owner.Dir)
		}
		stale = append(stale, d)
		if isStackDir(d.Owner.Dir) && !slices.Contains(dirs, d.Owner.Dir) {
			dirs = append(dirs, d.Owner.Dir)
		}
	}
	errs := []error{killAll(stale), killCgroupProcs(cgroupRoot(node)), removeCgroups(cgroupRoot(node)), deleteLink(bridgeName(node))}
	for _, d := range dirs {
		errs = append(errs, unmountUnder(d), csiplugin.DetachUnder(d))
		if err := os.RemoveAll(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %q: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// isStackDir says whether a directory named by a mark looks like a Stack's
// (absolute, clean, below the root, holding its cluster or node): the mark
// comes from another process's environment, and what it names is removed.
func isStackDir(dir string) bool {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || filepath.Dir(dir) == "/" {
		return false
	}
	for _, sub := range []string{"cluster", "node"} {
		if st, err := os.Lstat(filepath.Join(dir, sub)); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}

// killAll SIGKILLs ds and waits until each has exited.
func killAll(ds []daemon) error {
	for _, d := range ds {
		_ = syscall.Kill(d.PID, syscall.SIGKILL)
	}
	return waitGone(ds, 15*time.Second)
}

// waitGone waits until none of ds is a live process any more (an exited
// one that nobody reaped yet counts as gone); limit only detects a hang.
func waitGone(ds []daemon, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var left []string
		for _, d := range ds {
			if st, err := readStat(d.PID); err == nil && !st.zombie && st.start == d.Start {
				left = append(left, d.String())
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still running %s after SIGKILL: %s", limit, strings.Join(left, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
