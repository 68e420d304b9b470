// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/mountwatch"
)

var _ hotplug.MountWatcher = (*Engine)(nil)

// WatchMounts reports to changed, from one goroutine and until ctx ends,
// the launchers whose hotplug-disks a mount was attached to or detached
// from in the host namespace, by anyone (hotplug.MountWatcher). It returns
// an error wrapping errors.ErrUnsupported at once on a kernel without
// mount notifications, or when Config.MountEvents is off.
func (e *Engine) WatchMounts(ctx context.Context, changed func(hotplug.MountChange)) error {
	if !e.mountEvents {
		return fmt.Errorf("%w: mount events are off (Config.MountEvents)", errors.ErrUnsupported)
	}
	w, err := mountwatch.Open(e.host, e.root)
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		c, err := w.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		mc := hotplug.MountChange{Lost: c.Lost, Launchers: make([]types.UID, 0, len(c.Launchers))}
		for _, l := range c.Launchers {
			mc.Launchers = append(mc.Launchers, types.UID(l))
		}
		changed(mc)
	}
}
