// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

// FindPublished returns the directory, relative to the root, in which the
// kubelet published filesystem volume pvName for pod podUID:
// pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount for a CSI volume, or
// pods/<uid>/volumes/kubernetes.io~<plugin>/<pv> for another plugin. The
// lookup never follows a symlink. When the volume is not there, the error
// wraps ErrNotPublished; malformed names wrap isolation.ErrUnsafePath.
func FindPublished(r Root, podUID, pvName string) (string, error) {
	if err := validPodVolume(podUID, pvName); err != nil {
		return "", fmt.Errorf("find published volume: %w", err)
	}
	root, err := r.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	volumesRel := VolumesDir(podUID)
	notPublished := fmt.Errorf("volume %q of pod %q under %q: %w", pvName, podUID, r.Abs(volumesRel), ErrNotPublished)
	volumes, err := isolation.OpenBeneath(root, volumesRel, isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
	if errors.Is(err, fs.ErrNotExist) {
		return "", notPublished
	}
	if err != nil {
		return "", err
	}
	defer volumes.Close()
	plugins, err := volumes.Readdirnames(-1)
	if err != nil {
		return "", fmt.Errorf("list %q: %w", volumes.Name(), err)
	}
	for _, plugin := range csiFirst(plugins) {
		cand := path.Join(plugin, pvName)
		if plugin == csiPlugin {
			cand = path.Join(cand, "mount")
		}
		d, err := isolation.OpenBeneath(volumes, cand, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		d.Close()
		return path.Join(volumesRel, cand), nil
	}
	return "", notPublished
}

// csiFirst keeps the kubelet's plugin directories, CSI first: that is where
// KubeVirt's hotplug volumes are, and a name found there must not be
// shadowed by another plugin's directory.
func csiFirst(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, "kubernetes.io~") {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ci, cj := out[i] == csiPlugin, out[j] == csiPlugin
		if ci != cj {
			return ci
		}
		return out[i] < out[j]
	})
	return out
}

// OpenPublishedDevice opens, O_PATH, what the kubelet published for pod
// podUID's block volume pvName: pods/<uid>/volumeDevices/<plugin>/<pv> is a
// kubelet-made symlink to the CSI publish file of this very volume and pod
// (CSIPublishFile), on which the driver bind-mounted the device node. A
// link to anything else, even inside the root (another pod's or another
// PV's publish file, a device node), was not made by the kubelet for this
// volume and is refused with isolation.ErrUnsafePath; nothing below the
// link is followed. The caller checks that the file is a block device. A
// volume not there wraps ErrNotPublished.
func OpenPublishedDevice(r Root, podUID, pvName string) (*os.File, error) {
	if err := validPodVolume(podUID, pvName); err != nil {
		return nil, fmt.Errorf("find published device: %w", err)
	}
	root, err := r.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	notPublished := fmt.Errorf("pod %s volume %s: %w", podUID, pvName, ErrNotPublished)
	dir := VolumeDevicesDir(podUID)
	plugins, err := listDir(root, dir)
	if errors.Is(err, unix.ENOENT) {
		return nil, notPublished
	}
	if err != nil {
		return nil, err
	}
	sort.Strings(plugins)
	for _, plugin := range plugins {
		f, err := openPublished(root, r, path.Join(dir, plugin, pvName), CSIPublishFile(pvName, podUID))
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		return f, err
	}
	return nil, notPublished
}

// openPublished follows the kubelet's link at rel, which must point at
// publish (relative to the root). The kubelet spells its target with the
// root as configured; with a symlinked root that differs from the resolved
// Path, and both spellings name the same tree.
func openPublished(root *os.File, r Root, rel, publish string) (*os.File, error) {
	how := isolation.How{Flags: unix.O_PATH}
	spellings := []string{r.Path}
	if r.Configured != "" && r.Configured != r.Path {
		spellings = append(spellings, r.Configured)
	}
	target, err := isolation.ReadLinkBeneath(root, spellings, rel)
	if errors.Is(err, unix.EINVAL) {
		// Not a link: some plugins put the node itself here.
		return isolation.OpenBeneath(root, rel, how)
	}
	if err != nil {
		return nil, err
	}
	if target != publish {
		return nil, fmt.Errorf("link %q points to %q, not to the volume's publish file %q: %w", r.Abs(rel), r.Abs(target), r.Abs(publish), isolation.ErrUnsafePath)
	}
	return isolation.OpenBeneath(root, target, how)
}

// PublishedDevicePath names pod podUID's volumeDevices entry of block
// volume pvName as a host path, for display; "" when there is none.
func PublishedDevicePath(r Root, podUID, pvName string) string {
	if validPodVolume(podUID, pvName) != nil {
		return ""
	}
	root, err := r.open()
	if err != nil {
		return ""
	}
	defer root.Close()
	dir := VolumeDevicesDir(podUID)
	plugins, _ := listDir(root, dir)
	sort.Strings(plugins)
	for _, plugin := range plugins {
		rel := path.Join(dir, plugin, pvName)
		var st unix.Stat_t
		if unix.Fstatat(int(root.Fd()), rel, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return r.Abs(rel)
		}
	}
	return ""
}

func listDir(root *os.File, rel string) ([]string, error) {
	dir, err := isolation.OpenBeneath(root, rel, isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", dir.Name(), err)
	}
	return names, nil
}
