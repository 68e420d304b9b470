// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/propagation"
)

// listing is what Observe finds in a launcher's hotplug-disks, read in one
// call on the launcher's looker. Every call is a hand-off to a thread
// locked in the host namespace and back; the table, the file and
// directory binds, the block nodes and the bound files to probe were five
// such hand-offs per launcher and pass, and on a node of hundreds of
// launchers the hand-offs, not the syscalls, were most of an idle pass.
type listing struct {
	t     *mountinfo.Table
	binds []bind
	nodes []blockdev.Node
	// bound is, by volume, the opened bind of each healthy file or
	// directory volume whose storage is to be asked to answer
	// (answers.go); the probe closes it.
	bound map[string]*os.File
}

// close closes the binds the listing opened.
func (ls listing) close() {
	for _, f := range ls.bound {
		f.Close()
	}
}

// listed, when set, runs at the end of each listing, on its thread: tests
// hold a listing there past its deadline.
var listed func()

// list reads the launcher's listing. hung names the volumes whose storage
// has a probe pending: their binds are not opened again. It is read before
// the call: an abandoned call reads no memo.
func (e *Engine) list(s hotplug.Snapshot, launcher types.UID, hung map[string]bool) (listing, error) {
	l := e.lookerOf(launcher)
	var t *mountinfo.Table
	switch s := s.(type) {
	case tableSnapshot:
		if t = s.t; t == nil {
			return listing{}, fmt.Errorf("snapshot %T holds no mount table", s)
		}
	case *beneathSnapshot:
	default:
		return listing{}, fmt.Errorf("snapshot %T is not a mount table", s)
	}
	// A listing given up on closes the binds it opened: left to the
	// garbage collector, they kept the volumes' mounts busy.
	ls, err := isolation.CallOwned(l.ns, func(*isolation.Live) (listing, error) { return e.listHere(l.here, t, launcher, hung) }, listing.close)
	if bs, ok := s.(*beneathSnapshot); ok && errors.Is(err, errCovered) {
		if t, err = bs.wholeTable(e); err != nil {
			return listing{}, err
		}
		ls, err = isolation.CallOwned(l.ns, func(*isolation.Live) (listing, error) { return e.listHere(l.here, t, launcher, hung) }, listing.close)
	} else if ok && err == nil {
		bs.keep(launcher, ls.t)
	}
	return ls, stuck(err)
}

// listHere is list on the looker's thread; t nil reads the launcher's own
// mounts.
func (e *Engine) listHere(a *mount.Attacher, t *mountinfo.Table, launcher types.UID, hung map[string]bool) (listing, error) {
	dir := hotplugDisks(launcher)
	if t == nil {
		abs := e.root.Abs(dir)
		var err error
		if t, err = readUncovered(abs); err != nil {
			return listing{}, err
		}
	}
	var ls listing
	err := a.WithLauncherDir(t, dir, func(a *mount.Attacher) error {
		var err error
		ls, err = e.listOpened(a, t, dir, hung)
		return err
	})
	return ls, err
}

// listOpened is listHere's looks, through a, which holds the launcher's
// hotplug-disks open (mount.Attacher.WithLauncherDir).
func (e *Engine) listOpened(a *mount.Attacher, t *mountinfo.Table, dir string, hung map[string]bool) (listing, error) {
	ls, err := e.listKinds(a, t, dir)
	if err != nil {
		return listing{}, err
	}
	var names []string
	for _, b := range ls.binds {
		if b.o.Healthy(b.o.Mode) && !hung[b.o.Name] {
			names = append(names, b.target)
		}
	}
	if len(names) == 0 {
		return ls, nil
	}
	// A bind that cannot be opened is not probed: the next pass's listing
	// tells what happened to it.
	files, _ := a.OpenBound(t, dir, names)
	ls.bound = map[string]*os.File{}
	for _, b := range ls.binds {
		if f := files[b.target]; f != nil {
			ls.bound[b.o.Name] = f
		}
	}
	if listed != nil {
		listed()
	}
	return ls, nil
}

// checkBind asks whether the launcher sees a healthy bind and, for a file,
// whether QEMU holds a stale one, both in one call on the launcher's
// looker, and only what the memos do not already know (sight.go,
// held.go). A call stuck past its deadline marks the entry Unchecked.
// needsChecks says which of the bind's checks its memos do not answer:
// whether the launcher sees it, and what QEMU holds of a file.
func (e *Engine) needsChecks(k growKey, b bind) (askSight, askHeld bool) {
	askSight = !e.sight.has(k, b.entry)
	kind, _ := hotplug.KindOf(b.o.Mode)
	askHeld = kind.QEMUOpens && b.entry.mountID != 0 && !e.held.has(k, b.entry)
	return askSight, askHeld
}

func (e *Engine) checkBind(view propagation.LauncherView, launcher types.UID, b bind, o *hotplug.ObservedVolume) {
	k := growKey{launcher, o.Name}
	askSight, askHeld := e.needsChecks(k, b)
	if !askSight && !askHeld {
		return
	}
	former := e.held.binds(k)
	type answers struct {
		seen seen
		held verdict
	}
	got, err := isolation.Call(e.lookerOf(launcher).ns, func() (answers, error) {
		var a answers
		had := former
		if askSight {
			// QEMU's check needs the binds this look finds, as noteSeen
			// will remember them.
			if a.seen = e.seeHere(view, launcher, b.target); a.seen.look.Sight == propagation.Seen {
				had = withBinds(had, a.seen.look.Binds)
			}
		}
		if askHeld {
			a.held = e.heldHere(view, launcher, b.target, b.entry, had)
		}
		return a, nil
	})
	if errors.Is(err, isolation.ErrStuck) {
		o.Unchecked = stuck(err)
		return
	}
	if askSight {
		o.NotPropagated = e.noteSeen(k, b.entry, got.seen) != nil
	}
	if askHeld {
		o.StaleWhy = e.noteHeld(k, b.entry, got.held)
		o.StaleOpen = o.StaleWhy != ""
	}
}
