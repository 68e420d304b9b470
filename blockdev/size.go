// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

// DeviceSize returns the size in bytes of the block device major:minor,
// from sysRoot/dev/block/MAJ:MIN/size (sysRoot is normally "/sys"), which
// counts 512-byte sectors whatever the device's logical block size. It is
// the one measure of a device for growth, for a block volume's reported
// size and for diag.
func DeviceSize(sysRoot string, major, minor uint32) (int64, error) {
	return blockDeviceSize(sysRoot, major, minor)
}
