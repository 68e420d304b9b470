// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"fmt"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountwatch"
)

// Features are the kernel interfaces the engine uses where it finds them,
// each nil when found, else why not: the agent's start line reports them,
// so that a log says why a node reads more or polls. Each has a fallback.
type Features struct {
	// Statmount: each launcher's mounts read with statmount(2) and
	// listmount(2) (Linux 6.8); without, the whole mount table is read
	// once per batch.
	Statmount error
	// Openat2: lookups confined beneath a root in one call (Linux 5.6);
	// without, a walk one component at a time.
	Openat2 error
	// MountEvents: mount notifications from fanotify (Linux 6.15), which
	// repair a launcher as soon as its mounts change; without, the
	// periodic resync does.
	MountEvents error
}

// Features asks the kernel once what the engine can use. The mount
// notifications are probed by opening and closing a watcher, as
// WatchMounts opens its own.
func (e *Engine) Features() Features {
	f := Features{Statmount: e.noStatmount, Openat2: isolation.CheckOpenat2()}
	if !e.mountEvents {
		f.MountEvents = fmt.Errorf("%w: mount events are off (--mount-events=false)", errors.ErrUnsupported)
		return f
	}
	w, err := mountwatch.Open(e.host, e.root)
	if err != nil {
		f.MountEvents = err
		return f
	}
	w.Close()
	return f
}
