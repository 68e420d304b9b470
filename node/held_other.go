//go:build !linux

package node

import (
	"errors"
	"fmt"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/propagation"
)

func devNumber(d blockdev.Device) uint64 { return uint64(d.Major)<<32 | uint64(d.Minor) }

func (e *Engine) targetIdent(hotplugDir, target string) (propagation.Ident, error) {
	return propagation.Ident{}, fmt.Errorf("stat target %q in %q: %w", target, hotplugDir, errors.ErrUnsupported)
}
