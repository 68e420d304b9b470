// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/engine"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/propagation"
)

// inspector looks at the node for one Run. Everything it does is read-only.
type inspector struct {
	opts *Options
	// timeout bounds each look at the node (Options.CallTimeout); ns
	// carries the same deadline.
	timeout time.Duration
	// root is the kubelet root resolved in the host namespace: the
	// spelling of the host's mountinfo.
	root  kubelet.Root
	table *mountinfo.Table
	ns    *isolation.MountNamespace
	// engine is the engine's read-only view of the node on ns: diag looks
	// through the engine's own parts and judges by its rules.
	engine *engine.View
	// rules is nil when the device cgroups could not be found; rulesErr
	// says why.
	rules    blockdev.DeviceRules
	rulesErr error
	propErr  error
	// view asks a launcher's processes what they see.
	view propagation.LauncherView
	// observedDirs caches observeDir.
	observedDirs map[string]observation
}

// observation is one launcher directory's Observe: its binds, or why they
// are not known (a stuck look is not made again for each volume).
type observation struct {
	all []mount.Observed
	err error
}

func (in *inspector) hostPath(rel string) string { return in.root.Abs(rel) }

// volumeCtx is what one volume's inspection starts from.
type volumeCtx struct {
	vmi      *kubevirt.VMI
	launcher *corev1.Pod
	hv       kubevirt.HotplugVolume
	pvName   string
}

// inspectVMI inspects every hotpluggable volume of vmi. Which volumes the
// agent refuses, and why, is decided by the kubevirt package, exactly as
// the agent decides it.
func (in *inspector) inspectVMI(ctx context.Context, cl *apiView, vmi *kubevirt.VMI) []Volume {
	// The target launcher of a migration is judged against the target
	// attachment pod, as the agent judges it: Place does both.
	p := kubevirt.Place(vmi, in.opts.NodeName, kubevirt.PodMap(cl.pods), nil)
	launcher, lref, vmi, vols := p.Launcher, p.Refusal, p.VMI, p.Volumes
	var out []Volume
	for _, hv := range vols {
		v := Volume{Namespace: vmi.Namespace, VMI: vmi.Name, Volume: hv.Name, Claim: hv.Claim, Mode: string(hv.Mode),
			Migration: p.Migration.String()}
		kind, _ := hotplug.KindOf(hv.Mode)
		f := &findings{block: !kind.Bound}
		vc := volumeCtx{vmi: vmi, launcher: launcher, hv: hv}
		fillStatus(&v, hv.Status)
		v.LastAttach = cl.attaches.of(vmi.UID, hv.Name)
		switch {
		case hv.Refused != nil:
			f.refused = hv.Refused
		case lref != nil:
			f.refused = lref
		case launcher == nil:
			f.notMounted = whyNoLauncher
		default:
			in.inspectVolume(ctx, cl, &v, f, &vc)
		}
		if f.refused == nil && f.err == nil && in.propErr != nil {
			f.propagation = in.propErr
		}
		judge(&v, f)
		explainStorage(&v, cl.storage.Of(cl.claims[vmi.Namespace+"/"+hv.Claim], in.opts.NodeName))
		out = append(out, v)
	}
	return out
}

func fillStatus(v *Volume, st *kubevirt.VolumeStatus) {
	if st == nil {
		return
	}
	v.Phase, v.Reason = st.Phase, st.Reason
	v.Sizes.PVCCapacity = st.PersistentVolumeClaimInfo.CapacityBytes()
}

func (in *inspector) inspectVolume(ctx context.Context, cl *apiView, v *Volume, f *findings, vc *volumeCtx) {
	v.LauncherPod = &PodRef{Name: vc.launcher.Name, UID: string(vc.launcher.UID)}
	kind, known := hotplug.KindOf(vc.hv.Mode)
	inspect := inspections[vc.hv.Mode]
	if !known || inspect == nil {
		// kubevirt refuses a volume of a mode no kind has: not reached.
		f.err = fmt.Errorf("volume %q: no kind of volume has mode %q", v.Volume, vc.hv.Mode)
		return
	}
	targetDir := kubelet.HotplugDisksDir(string(vc.launcher.UID))
	v.Target = in.hostPath(path.Join(targetDir, kind.Target(v.Volume)))
	f.target = v.Target
	in.checkAttachment(ctx, cl, v, vc)
	inspect(in, v, f, vc, targetDir)
}

// inspections is what diag checks of each kind, by mode: diag's half of
// the kinds table (hotplug.Kinds), one entry for each kind
// (TestInspectionsCoverKinds).
var inspections = map[kubevirt.VolumeMode]func(in *inspector, v *Volume, f *findings, vc *volumeCtx, targetDir string){
	kubevirt.Filesystem: (*inspector).inspectFilesystem,
	kubevirt.Directory:  (*inspector).inspectDirectory,
	kubevirt.Block:      (*inspector).inspectBlock,
}

// checkAttachment names the verified attachment pod and finds the PV name.
func (in *inspector) checkAttachment(ctx context.Context, cl *apiView, v *Volume, vc *volumeCtx) {
	hv := vc.hv
	if hv.AttachPodUID == "" {
		return
	}
	v.AttachmentPod = &PodRef{Name: hv.Status.HotplugVolume.AttachPodName, UID: string(hv.AttachPodUID)}
	if hv.AttachPod == nil {
		return
	}
	v.AttachmentPod.Name = hv.AttachPod.Name
	pv, err := cl.pvName(ctx, vc.vmi.Namespace, v.Claim)
	if err != nil {
		v.Detail = err.Error()
		return
	}
	v.PVName, vc.pvName = pv, pv
}

// notMountedWhy explains an empty target from what is known upstream.
func notMountedWhy(v *Volume, vc *volumeCtx, fallback string) string {
	switch {
	case v.AttachmentPod == nil:
		return whyNoAttachment
	case vc.hv.AttachPod == nil:
		return whyNoAttachPod
	case v.AttachmentPod.Publishes != nil && !*v.AttachmentPod.Publishes:
		return whyUnpublished
	}
	return fallback
}

func (in *inspector) inspectFilesystem(v *Volume, f *findings, vc *volumeCtx, targetDir string) {
	file := kubelet.TargetName(v.Volume)
	img, ok := in.publishedImage(v, f, vc)
	if !ok || targetRefused(f, v.Target, in.engine.CheckFile(in.table, targetDir, file)) {
		return
	}
	obs, err := in.observed(targetDir, file)
	if err != nil {
		f.err = err
		return
	}
	if obs == nil || !obs.Mounted {
		f.notMounted = notMountedWhy(v, vc, whyNotMounted)
		return
	}
	m := in.table.ByID(obs.MountID)
	if m == nil {
		m, _ = in.table.Top(v.Target)
	}
	v.Mount = mountEntry(m, obs.Depth)
	f.stacked = obs.Depth
	switch {
	case obs.SourceGone:
		f.stale = fmt.Sprintf("the mounted file %s was deleted or its device %s is gone", v.Mount.SourceWithRoot(), obs.Dev)
	case img != nil && img.Mount != nil && m != nil && !img.Shows(m):
		f.stale = fmt.Sprintf("mounted %s (%s), but the attachment pod publishes %s[%s] (%s)", v.Mount.SourceWithRoot(), m.Dev(),
			img.Mount.Source, img.Root, img.Mount.Dev())
	default:
		// Each look is made only while the ones before it answered: a
		// volume that got stuck costs one deadline, not one per look.
		in.checkSeen(v, f, string(vc.launcher.UID), targetDir, file)
		if f.err == nil {
			in.checkFileHeld(v, f, string(vc.launcher.UID), targetDir, file)
		}
		if f.err == nil {
			in.measure(v, f, targetDir)
			f.notGrown = notGrownWhy(vc.hv.Status, v.Sizes.BlockDevice, f.needsExpand)
		}
	}
}

// targetRefused records the engine's judgement of a volume's target, err:
// a refusal, or a look that failed or got stuck. It says whether there was
// one; a target that is missing or fine is none.
func targetRefused(f *findings, target string, err error) bool {
	err = lookingAt("look at "+target, err)
	switch r := kubevirt.RefusalOf(err); {
	case r != nil:
		f.refused = r
	case err != nil:
		f.err = err
	default:
		return false
	}
	return true
}

// abandoned records err as the volume's finding when it is a look that got
// stuck, and says so; other errors of the optional looks (the launcher's
// view, QEMU, sizes, the cgroup) are only named in the detail.
func abandoned(f *findings, err error) bool {
	if stuck(err) {
		f.err = err
		return true
	}
	return false
}

// checkSeen asks the launcher whether it sees the bind on target (a file
// or a directory), as the agent does.
func (in *inspector) checkSeen(v *Volume, f *findings, launcher, targetDir, target string) {
	type seen struct {
		look propagation.Look
		why  error
	}
	s, err := isolation.Call(in.ns, func() (seen, error) {
		look, why := in.view.Check(in.root.Path, targetDir, launcher, target)
		return seen{look, why}, nil
	})
	switch {
	case abandoned(f, lookingAt("ask the launcher what it sees at "+target, err)):
	case err != nil:
		v.Detail = joinDetail(v.Detail, "launcher's view not checked: "+err.Error())
	case s.look.Sight == propagation.NotSeen:
		f.notSeen = s.why.Error()
	}
}

// publishedImage finds the disk.img the attachment pod publishes, checked
// as the agent checks it, with the mount it lives on (nil when the volume
// is not published). ok is false once f holds a refusal or an error.
func (in *inspector) publishedImage(v *Volume, f *findings, vc *volumeCtx) (img *mount.Image, ok bool) {
	if vc.hv.AttachPod == nil || vc.pvName == "" {
		return nil, true
	}
	rel, err := in.findPublished(string(vc.hv.AttachPodUID), vc.pvName)
	switch refusal := kubevirt.RefusalOf(err); {
	case errors.Is(err, kubelet.ErrNotPublished):
		v.AttachmentPod.Publishes = ptr(false)
		return nil, true
	case refusal != nil:
		f.refused = refusal
		return nil, false
	case err != nil:
		f.err = err
		return nil, false
	}
	v.AttachmentPod.Publishes = ptr(true)
	v.ExpectedSource = in.hostPath(path.Join(rel, "disk.img"))
	image, err := in.engine.Image(in.table, rel)
	err = lookingAt("check "+v.ExpectedSource, err)
	switch r := kubevirt.RefusalOf(err); {
	case errors.Is(err, fs.ErrNotExist):
		// Deleted after it was mounted: what is mounted is judged by the caller.
		v.Detail = joinDetail(v.Detail, "the published volume has no disk.img")
		return nil, true
	case r != nil:
		f.refused = r
		return nil, false
	case err != nil:
		f.err = err
		return nil, false
	}
	v.Sizes.DiskImage = image.Size
	return &image, true
}

func (in *inspector) observed(targetDir, name string) (*mount.Observed, error) {
	all, err := in.observeDir(targetDir)
	return named(all, name), err
}

// named is the observation of the target name among all, nil if none.
func named(all []mount.Observed, name string) *mount.Observed {
	for i := range all {
		if all[i].Name == name {
			return &all[i]
		}
	}
	return nil
}

// observeDir lists a launcher's file binds once per run: every volume of
// the launcher, and the orphan search, read the same listing.
func (in *inspector) observeDir(targetDir string) ([]mount.Observed, error) {
	if got, ok := in.observedDirs[targetDir]; ok {
		return got.all, got.err
	}
	all, err := in.engine.Files(in.table, targetDir)
	err = lookingAt("list the binds in "+in.hostPath(targetDir), err)
	if err != nil && !stuck(err) {
		return nil, err
	}
	if in.observedDirs == nil {
		in.observedDirs = map[string]observation{}
	}
	in.observedDirs[targetDir] = observation{all, err}
	return all, err
}

// measure fills the sizes of a live filesystem mount through the engine's
// Grower, read-only.
func (in *inspector) measure(v *Volume, f *findings, targetDir string) {
	res, err := in.engine.Measure(in.table, targetDir, kubelet.TargetName(v.Volume))
	if abandoned(f, lookingAt("measure sizes", err)) {
		return
	}
	if err != nil {
		v.Detail = joinDetail(v.Detail, "measure sizes: "+err.Error())
		return
	}
	v.Sizes.BlockDevice, v.Sizes.Filesystem = res.DeviceBytes, res.FilesystemBytes
	v.Sizes.FilesystemStatfs, v.Sizes.DiskImage = res.FilesystemBefore, res.DiskImageBefore
	f.needsExpand = res.NeedsGrowth
}

func (in *inspector) inspectBlock(v *Volume, f *findings, vc *volumeCtx, targetDir string) {
	dev := &DeviceCheck{}
	v.Device = dev
	var published *blockdev.Device
	if vc.hv.AttachPod != nil && vc.pvName != "" {
		p, err := in.engine.PublishedDevice(string(vc.hv.AttachPodUID), vc.pvName)
		err = lookingAt("find the published device of "+vc.pvName, err)
		switch refusal := kubevirt.RefusalOf(err); {
		case errors.Is(err, kubelet.ErrNotPublished):
			v.AttachmentPod.Publishes = ptr(false)
		case refusal != nil:
			f.refused = refusal
			return
		case err != nil:
			f.err = err
			return
		default:
			v.AttachmentPod.Publishes = ptr(true)
			published = &p.Device
			dev.Published = majMin(p.Device.Major, p.Device.Minor)
			if v.ExpectedSource, err = in.publishedBlockPath(string(vc.hv.AttachPodUID), vc.pvName); err != nil {
				f.err = err
				return
			}
		}
	}
	n, err := in.engine.Node(in.table, targetDir, v.Volume)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.notMounted = notMountedWhy(v, vc, whyNoNode)
		return
	case targetRefused(f, v.Target, err):
		return
	case n.Covered:
		f.covered = true
		f.wrongDevice = "something is mounted on the node's name: a bind of something else, not the node hpmount made"
		return
	}
	d := n.Device
	dev.Node = majMin(d.Major, d.Minor)
	gone, err := bounded(in.timeout, "look up "+dev.Node+" in sysfs", func() (bool, error) {
		return mount.BlockDeviceGone(in.opts.sysRoot(), d.Major, d.Minor), nil
	})
	switch {
	case err != nil:
		f.err = err
		return
	case gone:
		f.stale = fmt.Sprintf("the node points at %s, which no longer exists", dev.Node)
		return
	}
	size, err := bounded(in.timeout, "read the size of "+dev.Node, func() (int64, error) {
		return blockdev.DeviceSize(in.opts.sysRoot(), d.Major, d.Minor)
	})
	if abandoned(f, err) {
		return
	}
	v.Sizes.BlockDevice = size
	if published != nil && *published != d {
		f.wrongDevice = fmt.Sprintf("the node is %s but the attachment pod's published device is %s", dev.Node, dev.Published)
	}
	if in.checkCgroup(v, f, vc, d); f.err != nil {
		return
	}
	now := d
	if published != nil {
		now = *published
	}
	in.checkHeld(v, f, string(vc.launcher.UID), v.Volume, propagation.Current{Block: true, Device: now.Number()})
}

// checkFileHeld is checkHeld of a file bind: QEMU should hold the file
// bound on the target, found as the agent finds it (propagation.TargetIdent).
func (in *inspector) checkFileHeld(v *Volume, f *findings, launcher, targetDir, file string) {
	id, err := isolation.Call(in.ns, func() (propagation.Ident, error) {
		return propagation.TargetIdent(in.root.Path, targetDir, file)
	})
	switch err := lookingAt("stat "+in.hostPath(path.Join(targetDir, file)), err); {
	case abandoned(f, err):
	case err != nil:
		v.Detail = joinDetail(v.Detail, "what QEMU holds not checked: "+err.Error())
	default:
		in.checkHeld(v, f, launcher, file, propagation.Current{File: id})
	}
}

// checkHeld asks the launcher's QEMU what it holds of the target, through
// the same propagation.LauncherView.Held the agent asks.
func (in *inspector) checkHeld(v *Volume, f *findings, launcher, name string, cur propagation.Current) {
	type held struct {
		hold   propagation.Hold
		detail string
	}
	// /proc/<qemu>/fd's links are followed to their files: on a hung
	// mount that stat waits like any other.
	h, err := bounded(in.timeout, "read what QEMU holds", func() (held, error) {
		hold, detail, err := in.view.Held(launcher, name, cur)
		return held{hold, detail}, err
	})
	hold, detail := h.hold, h.detail
	switch {
	case abandoned(f, err):
		return
	case err != nil:
		v.Detail = joinDetail(v.Detail, "what QEMU holds not checked: "+err.Error())
		return
	case hold == propagation.StaleOpen:
		f.staleOpen = detail
	case hold == propagation.NotOpen:
		f.notOpen = detail
	}
	v.QEMU, v.QEMUDetail = holdNames[hold], detail
}

var holdNames = map[propagation.Hold]string{
	propagation.NoQEMU: "no QEMU found", propagation.NotOpen: string(NotOpen),
	propagation.Open: "open", propagation.StaleOpen: string(StaleOpen),
}

func (in *inspector) checkCgroup(v *Volume, f *findings, vc *volumeCtx, d blockdev.Device) {
	if in.rules == nil {
		v.Detail = joinDetail(v.Detail, "device cgroup not checked: "+in.rulesErr.Error())
		return
	}
	compute := blockdev.Container{PodUID: string(vc.launcher.UID), ID: kubevirt.ComputeContainerID(vc.launcher)}
	ok, err := bounded(in.timeout, "read the device cgroup", func() (bool, error) { return in.rules.Allowed(compute, d) })
	switch {
	case abandoned(f, err):
	case errors.Is(err, blockdev.ErrAncestorDenies):
		v.Device.CgroupAllowed = ptr(false)
		f.notAllowed = err.Error()
	case err != nil:
		v.Detail = joinDetail(v.Detail, "device cgroup not checked: "+err.Error())
	case !ok:
		v.Device.CgroupAllowed = ptr(false)
		f.notAllowed = fmt.Sprintf("the device cgroup of launcher pod %s's compute container does not allow %s rwm", vc.launcher.UID, d)
	default:
		v.Device.CgroupAllowed = ptr(true)
	}
}

func majMin(maj, min uint32) string { return fmt.Sprintf("%d:%d", maj, min) }

func ptr[T any](v T) *T { return &v }

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// publishedBlockPath names the kubelet's volumeDevices entry of pv for pod
// uid, for display; the error is only a look that got stuck.
func (in *inspector) publishedBlockPath(uid, pv string) (string, error) {
	p, err := isolation.Call(in.ns, func() (string, error) {
		return kubelet.PublishedDevicePath(in.root, uid, pv), nil
	})
	return p, lookingAt("name the published device of "+pv, err)
}

// findPublished finds the directory the kubelet published filesystem
// volume pv in for pod uid, in the host namespace.
func (in *inspector) findPublished(uid, pv string) (string, error) {
	rel, err := isolation.Call(in.ns, func() (string, error) {
		return kubelet.FindPublished(in.root, uid, pv)
	})
	return rel, lookingAt(fmt.Sprintf("find where %s is published for pod %s", pv, uid), err)
}
