//go:build !linux

package mount

import (
	"errors"
	"fmt"
)

func (g *Grower) grow(t *Table, targetDir, name string, opts GrowOptions) (GrowResult, error) {
	return GrowResult{}, fmt.Errorf("grow %q in %q: %w", name+".img", targetDir, errors.ErrUnsupported)
}

func execResize(fstype, device, mountPoint string) error {
	return fmt.Errorf("resize %s on %q: %w", fstype, device, errors.ErrUnsupported)
}

func (g *Grower) sweep(*Table) (int, error) { return 0, errors.ErrUnsupported }
