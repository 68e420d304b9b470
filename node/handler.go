// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

// HandlerRecord reads virt-handler's record of the VMI's targets in the
// host's namespace, where the record directory is the host's own: no
// volume of the DaemonSet is needed, and nothing is ever written there.
// Whether each recorded target still exists is read from its launcher's
// hotplug-disks listing, never by a stat of the target: a stat of a bound
// target asks the volume's storage, which can hang.
func (e *Engine) HandlerRecord(ctx context.Context, vmi types.UID) (agent.HandlerRecord, error) {
	if e.handlerDir == "" || vmi == "" {
		return agent.HandlerRecord{}, nil
	}
	if err := isolation.ValidName("vmi uid", string(vmi), isolation.MaxNameLen); err != nil {
		return agent.HandlerRecord{}, err
	}
	return isolation.Call(e.ns, func() (agent.HandlerRecord, error) {
		rec, err := e.readHandlerRecord(vmi)
		var unreadable errUnreadableRecord
		if errors.As(err, &unreadable) {
			return agent.HandlerRecord{Stuck: unreadable.Error()}, nil
		}
		if err != nil {
			return agent.HandlerRecord{}, err
		}
		return e.judgeHandlerRecord(rec)
	})
}

// readHandlerRecord reads the record file, beneath the record directory
// and without following a symlink. No directory or no file is an empty
// record; a record that cannot be decoded is an errUnreadableRecord,
// which HandlerRecord reports as stuck: virt-handler's own Unmount fails
// on it too.
func (e *Engine) readHandlerRecord(vmi types.UID) (kubevirt.HandlerRecord, error) {
	dir, err := isolation.OpenRoot(e.handlerDir)
	if errors.Is(err, fs.ErrNotExist) {
		return kubevirt.HandlerRecord{}, nil
	}
	if err != nil {
		return kubevirt.HandlerRecord{}, fmt.Errorf("virt-handler's record directory: %w", err)
	}
	defer dir.Close()
	f, err := isolation.OpenBeneath(dir, string(vmi), isolation.How{Flags: unix.O_RDONLY})
	if errors.Is(err, fs.ErrNotExist) {
		return kubevirt.HandlerRecord{}, nil
	}
	if err != nil {
		return kubevirt.HandlerRecord{}, fmt.Errorf("virt-handler's record: %w", err)
	}
	defer f.Close()
	rec, err := kubevirt.ParseHandlerRecord(f)
	if err != nil {
		return kubevirt.HandlerRecord{}, errUnreadableRecord{fmt.Errorf("%q: %w", f.Name(), err)}
	}
	return rec, nil
}

// errUnreadableRecord is a record virt-handler cannot read either.
type errUnreadableRecord struct{ error }

// judgeHandlerRecord maps each recorded target onto the launcher and
// volume names it can be, and finds a recorded target that is gone. Paths
// are matched by their last components (kubelet.HotplugTargetOf):
// virt-handler spells them in its own view of the pods directory.
func (e *Engine) judgeHandlerRecord(rec kubevirt.HandlerRecord) (agent.HandlerRecord, error) {
	out := agent.HandlerRecord{Volumes: map[types.UID]map[string]bool{}}
	listed := map[types.UID]map[string]bool{}
	for _, p := range rec.Targets {
		uid, name, ok := kubelet.HotplugTargetOf(p)
		if !ok {
			continue // not a hotplug target: nothing hpmount would touch
		}
		l := types.UID(uid)
		if listed[l] == nil {
			names, err := e.listTargets(l)
			if err != nil {
				return agent.HandlerRecord{}, err
			}
			listed[l] = names
		}
		if !listed[l][name] && out.Stuck == "" {
			out.Stuck = p
		}
		if out.Volumes[l] == nil {
			out.Volumes[l] = map[string]bool{}
		}
		out.Volumes[l][name] = true
		if v, ok := kubelet.FileTargetVolume(name); ok {
			out.Volumes[l][v] = true
		}
	}
	return out, nil
}

// listTargets is the set of entry names of the launcher's hotplug-disks;
// empty when the directory is gone.
func (e *Engine) listTargets(launcher types.UID) (map[string]bool, error) {
	root, err := e.root.Open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	dir, err := isolation.OpenBeneath(root, hotplugDisks(launcher), isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	entries, _, err := kubelet.ReadTargets(dir)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", dir.Name(), err)
	}
	names := make(map[string]bool, len(entries))
	for _, en := range entries {
		names[en.Name()] = true
	}
	return names, nil
}
