package mount

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

// csiPlugin is the kubelet's directory for CSI volumes; it adds a "mount"
// level below the volume name that other plugins do not have.
const csiPlugin = "kubernetes.io~csi"

func (a *Attacher) findPublished(podUID, pvName string) (string, error) {
	if err := checkComponent("pod uid", podUID, 255); err != nil {
		return "", fmt.Errorf("find published volume: %w", err)
	}
	if err := checkComponent("volume name", pvName, 255); err != nil {
		return "", fmt.Errorf("find published volume: %w", err)
	}
	var rel string
	err := a.do(func() error {
		var err error
		rel, err = a.findPublishedHere(podUID, pvName)
		return err
	})
	return rel, err
}

func (a *Attacher) findPublishedHere(podUID, pvName string) (string, error) {
	root, err := openKubeletRoot(a.KubeletRoot)
	if err != nil {
		return "", err
	}
	defer root.Close()
	volumesRel := path.Join("pods", podUID, "volumes")
	notPublished := fmt.Errorf("volume %q of pod %q under %q: %w", pvName, podUID, filepath.Join(a.KubeletRoot, volumesRel), ErrNotPublished)
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
	// CSI first: that is where KubeVirt's hotplug volumes are, and a name
	// found there must not be shadowed by another plugin's directory.
	sort.Slice(plugins, func(i, j int) bool {
		ci, cj := plugins[i] == csiPlugin, plugins[j] == csiPlugin
		if ci != cj {
			return ci
		}
		return plugins[i] < plugins[j]
	})
	for _, plugin := range plugins {
		if !strings.HasPrefix(plugin, "kubernetes.io~") {
			continue
		}
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
