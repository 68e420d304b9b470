// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// snapshotMaxAge bounds how long one mount-table read serves reconciles:
// long enough for a resync wave or a burst of new VMIs to share one read,
// short enough that a change made by someone else is seen within a second.
const snapshotMaxAge = time.Second

// snapshots shares one read of the host mount table between reconciles of
// different VMIs. A snapshot is stale for a launcher whose hotplug-disks
// the agent changed after the read began: that launcher's next reconcile
// reads the table again, so it never plans from a table that predates its
// own mounts (which could stack a second mount on a target). Other
// launchers' entries in the table are as good as they were.
type snapshots struct {
	mu sync.Mutex
	// seq counts changes; changed holds the seq of each launcher's last
	// change.
	seq     uint64
	changed map[types.UID]uint64
	// cur was read starting at seq curSeq, at curTime; stored counts the
	// snapshots cached, so that a timer can name one without holding it.
	cur     Snapshot
	curSeq  uint64
	curTime time.Time
	stored  uint64
	// lostSeq is the seq of the last loss of mount changes: no read begun
	// before it is shared (lost).
	lostSeq uint64
}

// fresh returns the cached snapshot if it is young and no launcher of
// launchers changed since its read began.
func (c *snapshots) fresh(now time.Time, launchers []types.UID) (Snapshot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil || now.Sub(c.curTime) > snapshotMaxAge {
		return nil, false
	}
	for _, l := range launchers {
		if c.changed[l] > c.curSeq {
			return nil, false
		}
	}
	return c.cur, true
}

// begin returns the sequence number a read starting now is valid from.
func (c *snapshots) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// store caches a snapshot read from seq start at t, unless a newer read is
// cached already, and forgets the changes it covers.
func (c *snapshots) store(s Snapshot, start uint64, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil && c.curSeq > start || start < c.lostSeq {
		return
	}
	c.cur, c.curSeq, c.curTime = s, start, t
	c.stored++
	// A node's table is megabytes; it is not kept past its use. The timer
	// names it by number: holding it would keep every table of a busy
	// second alive.
	n := c.stored
	time.AfterFunc(snapshotMaxAge, func() { c.expire(n) })
	for l, seq := range c.changed {
		if seq <= start {
			delete(c.changed, l)
		}
	}
}

// expire drops the n-th stored snapshot if it is still the cached one.
func (c *snapshots) expire(n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stored == n {
		c.cur = nil
	}
}

// lost records that the node dropped mount changes: any launcher may have
// changed since any read, so the cached snapshot is dropped, and a read
// that began before is not cached when it ends.
func (c *snapshots) lost() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.lostSeq, c.cur = c.seq, nil
}

// touched records that the agent changed (or may have changed, when a call
// failed) what is in launcher's hotplug-disks.
func (c *snapshots) touched(launcher types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changed == nil {
		c.changed = map[types.UID]uint64{}
	}
	c.seq++
	c.changed[launcher] = c.seq
}

// snapshotRead is one read of the host mount table, for report: the
// mounts read, the lines that could not be parsed and the first reason,
// the time it took.
type snapshotRead struct {
	Entries, Unparsed int
	Why               error
	Took              time.Duration
}

// snapshotFor returns a mount-table snapshot that is current for the
// launchers given: the shared one when it is, a new read otherwise, which
// it returns too unless it read no table (each call then reads its own
// launcher's mounts, and there is no scan to report).
func (a *Agent) snapshotFor(ctx context.Context, launchers ...types.UID) (Snapshot, *snapshotRead, error) {
	if s, ok := a.snaps.fresh(time.Now(), launchers); ok {
		return s, nil, nil
	}
	start, t := a.snaps.begin(), time.Now()
	snap, err := a.engine.Snapshot(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read host mount table: %w", err)
	}
	a.snaps.store(snap, start, t)
	if snap.Entries() == 0 {
		return snap, nil, nil
	}
	read := &snapshotRead{Entries: snap.Entries(), Took: time.Since(t)}
	read.Unparsed, read.Why = snap.Unparsed()
	return snap, read, nil
}
