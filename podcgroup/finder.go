// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"os"
	"sync"
)

// maxCachedPods bounds Finder; past it, entries whose directory is gone
// are dropped.
const maxCachedPods = 4096

// Finder remembers where each pod's cgroup directory is, so that the
// search through the hierarchy (up to maxVisitedDirs directories) runs once
// for all pods, not on every rule check: a miss indexes every pod cgroup
// of the tree in one walk. A remembered directory is trusted only while it
// still exists; the subtree below it is walked every time, since
// containers come and go.
type Finder struct {
	mu sync.Mutex
	// settled keeps each pod's Cgroups as first found (Settle).
	settled bool
	index   *Finder                // whose pod directories this one uses (Settle)
	dirs    map[string]string      // pod UID → pod cgroup directory
	found   map[string]settled     // pod UID → what Find returned, when settled
	procs   map[*Cgroups]procsRead // what Procs read, when settled
}

// Find returns the cgroups of the pod, from the remembered directory when it
// still exists. The zero Finder is ready to use. The Cgroups returned are
// not to be changed: a settled Finder hands the same ones to every caller.
func (c *Finder) Find(root, podUID string) (*Cgroups, error) {
	if err := validatePodUID(podUID); err != nil {
		return nil, err
	}
	if !c.settled {
		return c.find(root, podUID)
	}
	c.mu.Lock()
	f, ok := c.found[podUID]
	c.mu.Unlock()
	if ok && f.root == root {
		return f.cgs, f.err
	}
	f = settled{root: root}
	f.cgs, f.err = c.find(root, podUID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.found == nil {
		c.found = map[string]settled{}
	}
	c.found[podUID] = f
	return f.cgs, f.err
}

// settled is a settled Finder's answer for one pod, a miss included: a
// pod whose cgroup is not there is not searched for again by every
// question about it.
type settled struct {
	root string
	cgs  *Cgroups
	err  error
}

func (c *Finder) find(root, podUID string) (*Cgroups, error) {
	if dir, ok := c.get(podUID); ok {
		if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
			desc, err := walkSubtree(dir)
			if err == nil {
				return &Cgroups{Root: root, PodUID: podUID, Pod: dir, Descendants: desc}, nil
			}
		}
		c.forget(podUID)
	}
	if dirs, err := indexPodDirs(root); err == nil {
		c.putAll(dirs)
		if dir, ok := c.get(podUID); ok {
			desc, err := walkSubtree(dir)
			if err != nil {
				return nil, err
			}
			return &Cgroups{Root: root, PodUID: podUID, Pod: dir, Descendants: desc}, nil
		}
	}
	// Not indexed (ambiguous, or the index failed): the search says why.
	cgs, err := Find(root, podUID)
	if err != nil {
		return nil, err
	}
	c.put(podUID, cgs.Pod)
	return cgs, nil
}

// Procs is Procs(cgs, max). A settled Finder reads the processes of each
// Cgroups it handed out once, and answers every later call with a bound
// no larger from that read: the checks of one launcher's binds in one pass
// ask about the same pod's processes twice per volume (who sees the
// mount, whether QEMU holds it), and that read was a seventh of the CPU of
// a cold start. The list returned is shared and not to be changed.
func (c *Finder) Procs(cgs *Cgroups, max int) ([]int, bool, error) {
	if !c.settled {
		return Procs(cgs, max)
	}
	c.mu.Lock()
	r, ok := c.procs[cgs]
	c.mu.Unlock()
	if ok && max <= r.max {
		return r.bounded(max)
	}
	r = procsRead{max: max}
	r.pids, r.more, r.err = Procs(cgs, max)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs == nil {
		c.procs = map[*Cgroups]procsRead{}
	}
	c.procs[cgs] = r
	return r.pids, r.more, r.err
}

// procsRead is one read of a pod's processes by a settled Finder, at
// bound max.
type procsRead struct {
	max  int
	pids []int
	more bool
	err  error
}

// bounded answers a bound of at most r.max from r: a list longer than
// the bound is cut, and says there were more.
func (r procsRead) bounded(max int) ([]int, bool, error) {
	if r.err == nil && len(r.pids) > max {
		return r.pids[:max:max], true, nil
	}
	return r.pids, r.more, r.err
}

// Settle returns a settled Finder that shares c's pod directories: it
// keeps each pod's Cgroups as first found, subtree and all, a miss
// included, and answers every later Find of the pod from it. It is for a
// reader that looks once and reports what it found: one pass over a
// launcher (the agent's checks of its binds in one reconcile), or one
// diag run, which asks about each launcher pod twice per volume. A pod
// directory it finds is remembered where c keeps it. c itself walks the
// subtree anew on each Find, as containers come and go under a pod the
// agent watches for days.
func (c *Finder) Settle() *Finder { return &Finder{settled: true, index: c.owner()} }

// owner is the Finder that keeps the pod directories.
func (c *Finder) owner() *Finder {
	if c.index != nil {
		return c.index
	}
	return c
}

// putAll remembers every unambiguous pod directory of an index.
func (c *Finder) putAll(index map[string][]string) {
	for uid, dirs := range index {
		if len(dirs) == 1 {
			c.put(uid, dirs[0])
		}
	}
}

func (c *Finder) get(uid string) (string, bool) {
	c = c.owner()
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.dirs[uid]
	return d, ok
}

func (c *Finder) forget(uid string) {
	c = c.owner()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dirs, uid)
}

func (c *Finder) put(uid, dir string) {
	c = c.owner()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirs == nil {
		c.dirs = map[string]string{}
	}
	if len(c.dirs) >= maxCachedPods {
		for u, d := range c.dirs {
			if _, err := os.Lstat(d); err != nil {
				delete(c.dirs, u)
			}
		}
	}
	c.dirs[uid] = dir
}
