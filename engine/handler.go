// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/hotplug"
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
func (e *Engine) HandlerRecord(ctx context.Context, vmi types.UID) (hotplug.HandlerRecord, error) {
	if e.handlerDir == "" || vmi == "" {
		return hotplug.HandlerRecord{}, nil
	}
	if err := isolation.ValidName("vmi uid", string(vmi), isolation.MaxNameLen); err != nil {
		return hotplug.HandlerRecord{}, err
	}
	out, err := isolation.Call(e.ns, func() (handlerRead, error) {
		rec, raw, err := e.readHandlerRecord(vmi)
		var unreadable errUnreadableRecord
		if errors.As(err, &unreadable) {
			return handlerRead{rec: hotplug.HandlerRecord{Stuck: unreadable.Error()}, raw: raw}, nil
		}
		if err != nil {
			return handlerRead{}, err
		}
		judged, err := rec.Judge(func(l types.UID) (map[string]bool, error) { return kubelet.TargetNames(e.root, string(l)) })
		return handlerRead{rec: judged, raw: raw}, err
	})
	if err != nil {
		return hotplug.HandlerRecord{}, err
	}
	out.rec.Stuck = e.stuck.settle(vmi, out.raw, out.rec.Stuck, time.Now())
	return out.rec, nil
}

// handlerRead is one read of a record: what it says, and its bytes.
type handlerRead struct {
	rec hotplug.HandlerRecord
	raw []byte
}

// stuckMemo tells a record virt-handler is stuck on from one it is in the
// middle of working through. Its Unmount removes the targets it no longer
// wants one by one and rewrites its record only at the end, so a read
// meanwhile finds recorded targets that are gone; and a record read while
// virt-handler writes it may not decode. Taking that for stuck would
// remove, under virt-handler's Unmount, targets it is about to remove,
// and make it fail (a run of the peer matrix did). So a record counts as
// stuck only once the same bytes, naming the same gone target, were read
// at least after ago.
type stuckMemo struct {
	after time.Duration
	mu    sync.Mutex
	seen  map[types.UID]stuckSeen
}

type stuckSeen struct {
	digest      [sha256.Size]byte
	stuck       string
	since, last time.Time
}

// stuckForget bounds the memo: a VMI whose record was not read for this
// long (it is gone) is dropped.
const stuckForget = time.Hour

// settle returns stuck once the record raw of vmi has said it, unchanged,
// for at least m.after, and "" until then.
func (m *stuckMemo) settle(vmi types.UID, raw []byte, stuck string, now time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, s := range m.seen {
		if now.Sub(s.last) > stuckForget {
			delete(m.seen, k)
		}
	}
	if stuck == "" {
		delete(m.seen, vmi)
		return ""
	}
	d := sha256.Sum256(raw)
	s, ok := m.seen[vmi]
	if !ok || s.digest != d || s.stuck != stuck {
		s = stuckSeen{digest: d, stuck: stuck, since: now}
	}
	s.last = now
	if m.seen == nil {
		m.seen = map[types.UID]stuckSeen{}
	}
	m.seen[vmi] = s
	if now.Sub(s.since) < m.after {
		return ""
	}
	return stuck
}

// readHandlerRecord reads the record file, beneath the record directory
// and without following a symlink. No directory or no file is an empty
// record; a record that cannot be decoded is an errUnreadableRecord,
// which HandlerRecord reports as stuck (once stuckMemo agrees):
// virt-handler's own Unmount fails on it too.
func (e *Engine) readHandlerRecord(vmi types.UID) (kubevirt.HandlerRecord, []byte, error) {
	raw, err := isolation.ReadFileBeneath(e.handlerDir, string(vmi), kubevirt.MaxHandlerRecord+1)
	if errors.Is(err, fs.ErrNotExist) {
		return kubevirt.HandlerRecord{}, nil, nil
	}
	if err != nil {
		return kubevirt.HandlerRecord{}, nil, fmt.Errorf("virt-handler's record: %w", err)
	}
	rec, err := kubevirt.ParseHandlerRecord(bytes.NewReader(raw))
	if err != nil {
		return kubevirt.HandlerRecord{}, raw, errUnreadableRecord{fmt.Errorf("%q: %w", filepath.Join(e.handlerDir, string(vmi)), err)}
	}
	return rec, raw, nil
}

// errUnreadableRecord is a record virt-handler cannot read either.
type errUnreadableRecord struct{ error }
