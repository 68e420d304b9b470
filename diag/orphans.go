// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

// wantedVolumes maps a launcher pod UID on this node to the hotplug volume
// names its VMI keeps (kubevirt.VMI.Keeps): a volume on its way out of the
// domain is not an orphan yet.
func wantedVolumes(vmis []*kubevirt.VMI, node string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, vmi := range vmis {
		for _, uid := range kubevirt.ActivePodsOn(vmi, node) {
			names := map[string]bool{}
			for _, name := range vmi.KeptVolumeNames() {
				names[name] = true
			}
			out[string(uid)] = names
		}
	}
	return out
}

// findOrphans lists mounts and block nodes in launchers' hotplug-disks that
// no VMI on this node wants. scope, when not nil, limits the search to those
// launcher UIDs; without the full VMI list (all nil) only launchers of known
// VMIs are searched, so a foreign launcher is never called orphaned. A
// look that got stuck (the pods directory, or one launcher's directory) is
// a warning: the search goes on without it.
func (in *inspector) findOrphans(cl *apiView, scope map[string]bool, warn func(string)) ([]OrphanEntry, error) {
	vmis := cl.all
	if vmis == nil {
		vmis = cl.selected
	}
	wanted := wantedVolumes(vmis, in.opts.NodeName)
	records := in.readHandlerRecords(cl, vmis, warn)
	uids, err := in.launcherDirs()
	if stuck(err) {
		warn(fmt.Sprintf("orphans not searched: %v", err))
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []OrphanEntry
	for _, uid := range uids {
		if scope != nil && !scope[uid] {
			continue
		}
		want, known := wanted[uid]
		if !known && cl.all == nil {
			continue
		}
		found, err := in.orphansIn(uid, want, records)
		if stuck(err) {
			warn(fmt.Sprintf("orphans not searched in launcher pod %s: %v", uid, err))
			continue
		}
		if err != nil {
			return nil, err
		}
		if pod, ok := cl.pods[types.UID(uid)]; ok {
			for i := range found {
				found[i].LauncherPod = pod.Namespace + "/" + pod.Name
			}
		}
		out = append(out, found...)
	}
	return out, nil
}

func (in *inspector) orphansIn(uid string, want map[string]bool, records handlerRecords) ([]OrphanEntry, error) {
	dir := kubelet.HotplugDisksDir(uid)
	var out []OrphanEntry
	imgs, err := in.observeDir(dir)
	if err != nil {
		return nil, err
	}
	for _, o := range imgs {
		if vol, _ := kubelet.FileTargetVolume(o.Name); !o.Mounted || want[vol] {
			continue
		}
		target := in.hostPath(path.Join(dir, o.Name))
		m := in.table.ByID(o.MountID)
		if m == nil {
			m, _ = in.table.Top(target)
		}
		out = append(out, judgeOrphan(OrphanEntry{
			LauncherPodUID: uid, Name: o.Name, Kind: "mount", Target: target, Mount: mountEntry(m, o.Depth), Device: o.Dev,
		}, records))
	}
	nodes, err := in.engine.Nodes(in.table, dir)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if want[n.Name] || strings.HasSuffix(n.Name, ".img") && want[strings.TrimSuffix(n.Name, ".img")] {
			continue
		}
		target := in.hostPath(path.Join(dir, n.Name))
		out = append(out, judgeOrphan(OrphanEntry{
			LauncherPodUID: uid, Name: n.Name, Kind: "block-node", Target: target, Device: majMin(n.Device.Major, n.Device.Minor),
		}, records))
	}
	return out, nil
}

// judgeOrphan gives an entry no VMI wants its verdict and hint: left to
// virt-handler where its record names the entry, else orphan.
func judgeOrphan(o OrphanEntry, records handlerRecords) OrphanEntry {
	if records.leaves(types.UID(o.LauncherPodUID), o.Name) {
		o.Verdict, o.Hint = LeftToHandler, leftToHandlerHint(o.Target)
		return o
	}
	o.Verdict, o.Hint = Orphan, orphanHint(o.Kind, o.Target)
	return o
}

// launcherDirs lists the pod UIDs under <kubelet-root>/pods that have a
// hotplug-disks emptyDir directory.
func (in *inspector) launcherDirs() ([]string, error) {
	uids, err := isolation.Call(in.ns, func() ([]string, error) {
		dirs, err := kubelet.LauncherDirs(in.root)
		var uids []string
		for _, d := range dirs {
			uids = append(uids, d.UID)
		}
		return uids, err
	})
	return uids, lookingAt("list the launchers' hotplug-disks", err)
}
