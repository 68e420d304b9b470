// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStat is a process's CPU time and memory from /proc.
type ProcStat struct {
	// CPU is user plus system time; RSS and Peak are VmRSS and VmHWM.
	CPU       time.Duration
	RSS, Peak int64
	// RSSFile is the part of RSS that is pages of mapped files (RssFile):
	// the executable's code and data read so far, which the kernel can
	// drop and read again; the rest is the process's own memory.
	RSSFile int64
}

// ReadProcStat reads it for pid.
func ReadProcStat(pid int) (ProcStat, error) {
	var p ProcStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	// Fields after the command name, which may hold spaces: utime is the
	// 14th field, stime the 15th.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return p, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	p.CPU = time.Duration(ut+st) * time.Second / 100 // USER_HZ
	s, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	defer s.Close()
	sc := bufio.NewScanner(s)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			p.RSS = kb << 10
		case "VmHWM":
			p.Peak = kb << 10
		case "RssFile":
			p.RSSFile = kb << 10
		}
	}
	return p, sc.Err()
}
