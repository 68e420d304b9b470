// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/mountinfo"
)

// Watcher reports mount changes under launchers' hotplug-disks in one
// mount namespace. Next is called from one goroutine at a time.
type Watcher struct {
	fan *os.File // the fanotify group, non-blocking, in Go's poller
	ns  uint64   // the namespace's id for statmount and listmount
	// podsSlash is the kubelet's pods directory, as mount points spell
	// it, and a slash: the prefix of every mount kept.
	podsSlash string
	// launchers holds the launcher of each mount that concerns one, by
	// unique mount id: a detach event names only the id.
	launchers map[uint64]string
	buf       mountinfo.MountPointBuffer
	events    []byte // fanotify reads
}

// Open starts watching the mount namespace of host for mounts under the
// pods directory of root, and reads which mounts there are now. It fails
// with an error wrapping errors.ErrUnsupported on a kernel without mount
// notifications (before 6.15) or without statmount in another namespace.
func Open(host isolation.Host, root kubelet.Root) (*Watcher, error) {
	ns, err := os.Open(host.MountNamespace())
	if err != nil {
		return nil, fmt.Errorf("open mount namespace %q: %w", host.MountNamespace(), err)
	}
	defer ns.Close()
	w := &Watcher{podsSlash: root.Abs(kubelet.PodsDir) + "/", events: make([]byte, 64<<10)}
	if w.ns, err = mountinfo.NamespaceID(int(ns.Fd())); err != nil {
		return nil, unsupported(fmt.Errorf("mount namespace %q: %w", host.MountNamespace(), err))
	}
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_REPORT_MNT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, 0)
	if err != nil {
		return nil, unsupported(fmt.Errorf("fanotify_init with FAN_REPORT_MNT: %w", err))
	}
	w.fan = os.NewFile(uintptr(fd), "fanotify mount events")
	err = unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_MNTNS, unix.FAN_MNT_ATTACH|unix.FAN_MNT_DETACH, int(ns.Fd()), "")
	if err != nil {
		w.fan.Close()
		return nil, unsupported(fmt.Errorf("fanotify_mark of mount namespace %q: %w", host.MountNamespace(), err))
	}
	// Marked first, then read: a mount made meanwhile is both read and
	// reported, never neither.
	if err := w.seed(); err != nil {
		w.fan.Close()
		return nil, unsupported(err)
	}
	return w, nil
}

// unsupported marks the errors that mean "this kernel has no such
// interface" (an unknown flag, syscall or ioctl) as errors.ErrUnsupported.
func unsupported(err error) error {
	for _, e := range []error{unix.EINVAL, unix.ENOSYS, unix.EOPNOTSUPP, unix.ENOTTY} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", errors.ErrUnsupported, err)
		}
	}
	return err
}

// seed reads the launcher of every mount of the namespace that concerns
// one.
func (w *Watcher) seed() error {
	ids, err := mountinfo.ListMountsIn(w.ns)
	if err != nil {
		return err
	}
	w.launchers = map[uint64]string{}
	for _, id := range ids {
		w.learn(id)
	}
	return nil
}

// learn records the launcher of mount id, if it concerns one, and
// returns it. A mount gone meanwhile is not recorded: its detach event
// follows and names nothing known.
func (w *Watcher) learn(id uint64) (string, bool) {
	mp, err := mountinfo.MountPointIn(w.ns, id, &w.buf)
	if err != nil {
		return "", false
	}
	uid, ok := launcherOf(w.podsSlash, mp)
	if ok {
		w.launchers[id] = uid
	}
	return uid, ok
}

// Tracked is how many mounts the watcher holds a launcher for.
func (w *Watcher) Tracked() int { return len(w.launchers) }

// Next waits for mount events that touch a launcher and returns them,
// everything one read returned at once. It returns ctx's error when ctx
// is done.
func (w *Watcher) Next(ctx context.Context) (Change, error) {
	// A deadline left by an earlier call's context would end this one.
	if err := w.fan.SetReadDeadline(time.Time{}); err != nil {
		return Change{}, fmt.Errorf("clear the deadline of fanotify reads: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = w.fan.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		n, err := w.fan.Read(w.events)
		if err != nil {
			if ctx.Err() != nil {
				return Change{}, ctx.Err()
			}
			return Change{}, fmt.Errorf("read fanotify mount events: %w", err)
		}
		evs, err := parseEvents(w.events[:n])
		c := w.apply(evs)
		if err != nil {
			// The events before the bad one are applied; what followed
			// it is unknown.
			c.Lost = true
		}
		if c.Lost {
			if err := w.seed(); err != nil {
				return c, fmt.Errorf("read the mounts again after lost events: %w", err)
			}
		}
		if !c.Empty() {
			return c, nil
		}
	}
}

// apply updates the map from events and returns the launchers they
// touched. A move is both a detach from the old mount point and an attach
// at the new one.
func (w *Watcher) apply(evs []mountEvent) Change {
	var c Change
	for _, ev := range evs {
		if ev.Mask&unix.FAN_Q_OVERFLOW != 0 {
			c.Lost = true
			continue
		}
		if ev.Mask&unix.FAN_MNT_DETACH != 0 {
			if uid, ok := w.launchers[ev.ID]; ok {
				c.Launchers = append(c.Launchers, uid)
				delete(w.launchers, ev.ID)
			}
		}
		if ev.Mask&unix.FAN_MNT_ATTACH != 0 {
			if uid, ok := w.learn(ev.ID); ok {
				c.Launchers = append(c.Launchers, uid)
			}
		}
	}
	slices.Sort(c.Launchers)
	c.Launchers = slices.Compact(c.Launchers)
	return c
}

// Close stops watching.
func (w *Watcher) Close() error {
	if err := w.fan.Close(); err != nil {
		return fmt.Errorf("close fanotify group: %w", err)
	}
	return nil
}
