// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// BlockedOn lists the threads of the agent that wait in uninterruptible
// sleep ('D') in a system call whose first argument is a descriptor on the
// filesystem of device dev: a write, resize or chown waiting for a frozen
// filesystem to thaw. It tells a test that the agent is inside such a call
// without knowing which call the running version makes there.
func (a *Agent) BlockedOn(dev uint64) ([]int, error) {
	return BlockedOn(a.Pid(), dev)
}

// BlockedOn is Agent.BlockedOn for any process.
func BlockedOn(pid int, dev uint64) ([]int, error) {
	task := fmt.Sprintf("/proc/%d/task", pid)
	entries, err := os.ReadDir(task)
	if err != nil {
		return nil, fmt.Errorf("list threads of %d: %w", pid, err)
	}
	var out []int
	for _, e := range entries {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		on, err := threadBlockedOn(task+"/"+e.Name(), dev)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			continue // the thread exited meanwhile
		}
		if err != nil {
			return nil, err
		}
		if on {
			out = append(out, tid)
		}
	}
	return out, nil
}

// threadBlockedOn reads one thread's state and current system call.
func threadBlockedOn(dir string, dev uint64) (bool, error) {
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return false, err
	}
	// The state follows the command name, which may hold spaces and ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false, fmt.Errorf("%s/stat: %q", dir, stat)
	}
	if stat[i+2] != 'D' {
		return false, nil
	}
	sc, err := os.ReadFile(dir + "/syscall")
	if err != nil {
		return false, err
	}
	// "nr arg0 ... sp pc" while in a call; "running" or "-1 sp pc" else.
	f := strings.Fields(string(sc))
	if len(f) < 2 || f[0] == "running" || f[0] == "-1" {
		return false, nil
	}
	fd, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 32)
	if err != nil {
		return false, fmt.Errorf("%s/syscall %q: %w", dir, sc, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("%s/fd/%d", dir, fd), &st); err != nil {
		// The first argument was no descriptor, or it was closed.
		return false, nil
	}
	return st.Dev == dev, nil
}
