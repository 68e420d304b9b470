// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hpmount/hpmount/test/qemu"
)

// qmpTimeout bounds one QMP exchange with a launcher's QEMU: it answers in
// milliseconds, so a stall is a hung QEMU, reported as an error.
const qmpTimeout = time.Minute

// launcherQEMU is a launcher's QEMU (test/qemu): started in the launcher's
// mount namespace, as 107:107, in its compute container's cgroup, as
// virt-launcher's libvirt runs it. A disk is opened with blockdev-add, as
// libvirt opens a hotplugged disk, so a target that is missing or a
// device the cgroup refuses shows up as QEMU's own error.
type launcherQEMU struct {
	q *qemu.QEMU
	// held are the nodes of the domain's disks, by volume name.
	held map[string]bool
}

func startLauncherQEMU(t *testing.T, cgroup string, launcher *pod) *launcherQEMU {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), qmpTimeout)
	defer cancel()
	q, err := qemu.Start(ctx, qemu.Options{MountNamespaceOf: launcher.pid(), UID: 107, GID: 107, Cgroups: []string{cgroup}})
	if err != nil {
		t.Fatalf("the launcher's QEMU: %v", err)
	}
	t.Cleanup(q.Kill)
	return &launcherQEMU{q: q, held: map[string]bool{}}
}

// attach opens the disk of volume name at path (as the launcher sees it)
// and holds it, as the domain holds an attached disk.
func (l *launcherQEMU) attach(name, path string, block bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), qmpTimeout)
	defer cancel()
	if err := l.q.BlockdevAdd(ctx, "hp-"+name, qemu.File{Path: path, Block: block}); err != nil {
		return err
	}
	l.held[name] = true
	return nil
}

// detach closes the disk of volume name.
func (l *launcherQEMU) detach(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), qmpTimeout)
	defer cancel()
	delete(l.held, name)
	return l.q.BlockdevDel(ctx, "hp-"+name)
}

// probe asks QEMU to open path read-write again, as a node of its own
// without image locking (the domain's node holds the lock), and closes
// it: whether QEMU could open the disk now.
func (l *launcherQEMU) probe(name, path string, block bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), qmpTimeout)
	defer cancel()
	node := "probe-" + name
	if err := l.q.BlockdevAdd(ctx, node, qemu.File{Path: path, Block: block, NoLock: true}); err != nil {
		return err
	}
	return l.q.BlockdevDel(ctx, node)
}

// openStats is what a probeLoop saw of one disk: how many of QEMU's opens,
// how many were refused, and each stretch of refusals, from the first
// refused open to the first that succeeded again (or to the end).
type openStats struct {
	Opens   int
	Refused int
	Windows []time.Duration
	// Errors are QEMU's distinct errors of the refused opens.
	Errors []string
}

// probeInterval is how often a probeLoop asks QEMU to open each disk:
// QEMU opens a disk when it is attached and when libvirt reopens it; this
// samples the device cgroup's answer far more often than either.
const probeInterval = 2 * time.Millisecond

// probeLoop has a QEMU of its own in the launcher's cgroup open block
// disks again and again (blockdev-add, then blockdev-del), every
// probeInterval, until stop.
type probeLoop struct {
	stopped chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	stats   map[string]*openStats
	err     error
}

// startProbeLoop starts QEMU's opens of the block disks of names (under
// launcherView) and returns once each was asked once.
func startProbeLoop(t *testing.T, cgroup string, launcher *pod, names []string) *probeLoop {
	t.Helper()
	q := startLauncherQEMU(t, cgroup, launcher)
	p := &probeLoop{stopped: make(chan struct{}), done: make(chan struct{}), stats: map[string]*openStats{}}
	first := make(chan struct{})
	go p.run(q, names, first)
	t.Cleanup(func() { p.stopOnce() })
	select {
	case <-first:
	case <-p.done:
	}
	return p
}

func (p *probeLoop) run(q *launcherQEMU, names []string, first chan struct{}) {
	defer close(p.done)
	since := map[string]time.Time{}
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for round := 0; ; round++ {
		for _, name := range names {
			now := time.Now()
			err := q.probe(name, launcherView+"/"+name, true)
			if err != nil && !strings.Contains(err.Error(), "Operation not permitted") {
				p.mu.Lock()
				p.err = fmt.Errorf("QEMU's open of %s: %w", name, err)
				p.mu.Unlock()
				return
			}
			p.record(name, now, err, since)
		}
		if round == 0 {
			close(first)
		}
		select {
		case <-p.stopped:
			p.mu.Lock()
			for name, t := range since {
				p.stats[name].Windows = append(p.stats[name].Windows, time.Since(t))
			}
			p.mu.Unlock()
			return
		case <-tick.C:
		}
	}
}

// record counts one open of name at now; since holds, per disk, when its
// current stretch of refusals began.
func (p *probeLoop) record(name string, now time.Time, err error, since map[string]time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats[name]
	if s == nil {
		s = &openStats{}
		p.stats[name] = s
	}
	s.Opens++
	if err == nil {
		if t, ok := since[name]; ok {
			s.Windows = append(s.Windows, now.Sub(t))
			delete(since, name)
		}
		return
	}
	s.Refused++
	if _, ok := since[name]; !ok {
		since[name] = now
	}
	if e := err.Error(); !slices.Contains(s.Errors, e) {
		s.Errors = append(s.Errors, e)
	}
}

func (p *probeLoop) stopOnce() {
	select {
	case <-p.stopped:
	default:
		close(p.stopped)
	}
	<-p.done
}

// stop ends the loop and returns what it saw, by volume name.
func (p *probeLoop) stop(t *testing.T) map[string]openStats {
	t.Helper()
	p.stopOnce()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		t.Fatal(p.err)
	}
	out := map[string]openStats{}
	for name, s := range p.stats {
		out[name] = *s
	}
	return out
}
