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
	mu   sync.Mutex
	dirs map[string]string // pod UID → pod cgroup directory
}

// Find returns the cgroups of the pod, from the remembered directory when it
// still exists. The zero Finder is ready to use.
func (c *Finder) Find(root, podUID string) (*Cgroups, error) {
	if err := validatePodUID(podUID); err != nil {
		return nil, err
	}
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

// putAll remembers every unambiguous pod directory of an index.
func (c *Finder) putAll(index map[string][]string) {
	for uid, dirs := range index {
		if len(dirs) == 1 {
			c.put(uid, dirs[0])
		}
	}
}

func (c *Finder) get(uid string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.dirs[uid]
	return d, ok
}

func (c *Finder) forget(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dirs, uid)
}

func (c *Finder) put(uid, dir string) {
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
