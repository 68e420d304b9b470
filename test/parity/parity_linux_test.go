// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package parity

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/diag"
	"github.com/hpmount/hpmount/engine"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
)

func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }

// world is one case: the API objects and what the kubelet published.
type world struct {
	vmi  *unstructured.Unstructured
	pods []*corev1.Pod
	// symlinkDisk publishes volume hp's disk.img as a symlink to a host
	// file instead of a regular file.
	symlinkDisk bool
	// pending: the volumes are neither refused nor mounted, but wait.
	pending bool
	// decoy adds a claim named like volume hp, bound to pv-2, which the
	// attachment pod also publishes: hp must still be c1's disk (pv-1).
	decoy bool
}

func standard(vols ...kt.Vol) world {
	if len(vols) == 0 {
		vols = []kt.Vol{{Name: "hp", Claim: "c1", AttachUID: kt.AttachUID}}
	}
	return world{vmi: kt.VMIObject(vols...), pods: []*corev1.Pod{kt.Launcher(), kt.AttachmentPod()}}
}

func (w world) with(mut func(*world)) world { mut(&w); return w }

func setActivePods(u *unstructured.Unstructured, pods map[string]any) {
	u.Object["status"].(map[string]any)["activePods"] = pods
}

func cases() map[string]world {
	hp := kt.Vol{Name: "hp", Claim: "c1", AttachUID: kt.AttachUID}
	terminated := kt.Launcher(func(p *corev1.Pod) {
		p.UID, p.Name = "old-launcher", "virt-launcher-vm1-old"
		now := metav1.Now()
		p.DeletionTimestamp = &now
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}
	})
	return map[string]world{
		"valid": standard(),
		"attachment pod of another pod": standard().with(func(w *world) {
			w.pods[1] = kt.AttachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].UID = kt.OtherPodUID })
		}),
		"attachment pod not controller": standard().with(func(w *world) {
			w.pods[1] = kt.AttachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil })
		}),
		"attachment pod unlabelled": standard().with(func(w *world) { w.pods[1] = kt.AttachmentPod(func(p *corev1.Pod) { p.Labels = nil }) }),
		"attachment pod elsewhere":  standard().with(func(w *world) { w.pods[1] = kt.AttachmentPod(func(p *corev1.Pod) { p.Namespace = "tenant-b" }) }),
		"launcher on another node":  standard().with(func(w *world) { w.pods[0] = kt.Launcher(func(p *corev1.Pod) { p.Spec.NodeName = "node2" }) }),
		"launchers all elsewhere": standard().with(func(w *world) {
			w.vmi = kt.VMIObject(hp)
			setActivePods(w.vmi, map[string]any{string(kt.LauncherUID): "node2"})
		}),
		"launcher without hotplug-disks": standard().with(func(w *world) { w.pods[0] = kt.Launcher(func(p *corev1.Pod) { p.Spec.Volumes = nil }) }),
		"launcher of another VMI": standard().with(func(w *world) {
			w.pods[0] = kt.Launcher(func(p *corev1.Pod) { p.Labels[kubevirt.LabelCreatedBy] = "x" })
		}),
		"launcher in another namespace": standard().with(func(w *world) { w.pods[0] = kt.Launcher(func(p *corev1.Pod) { p.Namespace = "tenant-b" }) }),
		"two live launchers": standard().with(func(w *world) {
			w.pods = append(w.pods, kt.Launcher(func(p *corev1.Pod) { p.UID, p.Name = "second", "virt-launcher-vm1-second" }))
			setActivePods(w.vmi, map[string]any{string(kt.LauncherUID): kt.Node, "second": kt.Node})
		}),
		"terminated launcher beside the live one": standard().with(func(w *world) {
			w.pods = append(w.pods, terminated)
			setActivePods(w.vmi, map[string]any{string(kt.LauncherUID): kt.Node, "old-launcher": kt.Node})
		}),
		"unsafe volume name":  standard(kt.Vol{Name: "../../etc", Claim: "c1", AttachUID: kt.AttachUID}),
		"unknown volume mode": standard(kt.Vol{Name: "hp", Claim: "c1", AttachUID: kt.AttachUID, Mode: "Tape"}),
		"symlinked disk.img":  standard().with(func(w *world) { w.symlinkDisk = true }),
		// Hostile API objects of issue #13.
		"attachment pod that does not exist": standard(kt.Vol{Name: "hp", Claim: "c1", AttachUID: "no-such-pod"}).with(func(w *world) { w.pending = true }),
		"volume name with NUL":               standard(kt.Vol{Name: "hp\x00x", Claim: "c1", AttachUID: kt.AttachUID}),
		"volume name with newline":           standard(kt.Vol{Name: "hp\nx", Claim: "c1", AttachUID: kt.AttachUID}),
		"volume name of 300 characters":      standard(kt.Vol{Name: strings.Repeat("h", 300), Claim: "c1", AttachUID: kt.AttachUID}),
		"volume named like another claim":    standard().with(func(w *world) { w.decoy = true }),
	}
}

// TestDiagRefusesExactlyWhatTheAgentRefuses is the parity table.
func TestDiagRefusesExactlyWhatTheAgentRefuses(t *testing.T) {
	testutil.RequiresRoot(t)
	for name, w := range cases() {
		t.Run(name, func(t *testing.T) {
			root := publish(t, w)
			fromAgent, states := runAgent(t, w, root)
			fromDiag := runDiag(t, w, root)
			for _, v := range volumeNames(w) {
				if fromAgent[v] != fromDiag[v] {
					t.Errorf("volume %q: agent refuses with %q, diag with %q", v, fromAgent[v], fromDiag[v])
				}
				// Agreeing on "no refusal" must not pass because the agent
				// did nothing: what it does not refuse, it mounts.
				want := agent.StateMounted
				if w.pending {
					want = agent.StatePending
				}
				if fromAgent[v] == "" && states[v] != want {
					t.Errorf("volume %q: not refused, the agent left it %q, want %q", v, states[v], want)
				}
			}
			if w.decoy {
				checkClaimNotVolumeName(t, root, fromDiag)
			}
			t.Logf("refusals: %v", fromAgent)
		})
	}
}

func volumeNames(w world) []string {
	vmi := kt.Decode(w.vmi)
	var names []string
	for _, v := range vmi.Spec.Volumes {
		names = append(names, v.Name)
	}
	return names
}

// publish makes a kubelet root where the attachment pod publishes claim
// c1's PV and the launcher has its hotplug-disks directory.
func publish(t *testing.T, w world) string {
	root, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	src := filepath.Join(root, kubelet.VolumesDir(string(kt.AttachUID)), "kubernetes.io~csi", "pv-1", "mount")
	target := filepath.Join(root, kubelet.HotplugDisksDir(string(kt.LauncherUID)))
	for _, d := range []string{src, target} {
		must(t, os.MkdirAll(d, 0o755))
	}
	if w.decoy {
		decoy := filepath.Join(root, kubelet.VolumesDir(string(kt.AttachUID)), "kubernetes.io~csi", "pv-2", "mount")
		must(t, os.MkdirAll(decoy, 0o755))
		must(t, os.WriteFile(filepath.Join(decoy, "disk.img"), make([]byte, 2<<20), 0o644))
	}
	if w.symlinkDisk {
		must(t, os.WriteFile(filepath.Join(root, "host-secret"), []byte("secret"), 0o600))
		must(t, os.Symlink(filepath.Join(root, "host-secret"), filepath.Join(src, "disk.img")))
	} else {
		must(t, os.WriteFile(filepath.Join(src, "disk.img"), make([]byte, 1<<20), 0o644))
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(target, "hp.img"), unix.MNT_DETACH) })
	return root
}

func clients(t *testing.T, w world) (*kubefake.Clientset, *dynamicfake.FakeDynamicClient) {
	objs := []runtime.Object{kt.PVC("c1", "pv-1")}
	if w.decoy {
		objs = append(objs, kt.PVC("hp", "pv-2"))
	}
	for _, p := range w.pods {
		objs = append(objs, p)
	}
	kube := kubefake.NewClientset(objs...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kubevirt.VMIResource: "VirtualMachineInstanceList"}, w.vmi.DeepCopy())
	return kube, dyn
}

// checkClaimNotVolumeName: volume hp names claim c1 while a claim named hp
// exists (bound to pv-2, published too). KubeVirt allows a volume and its
// claim to differ; the claim is the claim: the agent bound c1's disk.img
// (pv-1) and diag judged c1 and pv-1.
func checkClaimNotVolumeName(t *testing.T, root string, fromDiag map[string]string) {
	t.Helper()
	var bound, want unix.Stat_t
	must(t, unix.Stat(filepath.Join(root, kubelet.HotplugDisksDir(string(kt.LauncherUID)), "hp.img"), &bound))
	must(t, unix.Stat(filepath.Join(root, kubelet.VolumesDir(string(kt.AttachUID)), "kubernetes.io~csi", "pv-1", "mount", "disk.img"), &want))
	if bound.Ino != want.Ino || bound.Dev != want.Dev || bound.Size != 1<<20 {
		t.Errorf("hp.img is inode %d (%d bytes), want pv-1's disk.img, inode %d", bound.Ino, bound.Size, want.Ino)
	}
	if fromDiag["hp"] != "" {
		t.Errorf("diag refuses hp: %s", fromDiag["hp"])
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// states records the last state the agent reported for each volume.
type states struct {
	agent.NopObserver
	mu  sync.Mutex
	got map[string]string
}

func (s *states) VolumeState(_, _, volume, _, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got[volume] = state
}

func (s *states) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// runAgent runs the agent with the real node engine until it has judged
// every volume, and returns the reason code of each refused volume from
// its HotplugRefused Events. A refusal of the launcher refuses every
// volume.
func runAgent(t *testing.T, w world, root string) (map[string]string, map[string]string) {
	kube, dyn := clients(t, w)
	eng, err := engine.New(engine.Config{Host: isolation.Host{Proc: "/proc", PID: os.Getpid()}, KubeletRoot: root,
		CgroupRoot: "/sys/fs/cgroup", CgroupMode: blockdev.CgroupAuto, SysRoot: "/sys", DevRoot: "/dev", UID: 107, GID: 107})
	must(t, err)
	defer eng.Close()
	obs := &states{got: map[string]string{}}
	cfg := agent.DefaultConfig()
	cfg.NodeName, cfg.HealthAddress, cfg.MetricsAddress, cfg.Observer = kt.Node, "", "", obs
	a, err := agent.New(cfg, kube, dyn, eng)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	want := len(volumeNames(w))
	deadline := time.Now().Add(20 * time.Second)
	for obs.count() < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	refused := eventRefusals(t, kube, volumeNames(w))
	cancel()
	must(t, <-done)
	if obs.count() < want {
		t.Fatalf("the agent judged %d of %d volumes", obs.count(), want)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	return refused, obs.got
}

// eventRefusals reads the agent's HotplugRefused Events: "<reason>:
// volume "<name>": ..." for a volume, "<reason>: ..." for the launcher.
// Events are sent asynchronously, within milliseconds, by the agent's
// broadcaster; it reads them for a second.
func eventRefusals(t *testing.T, kube *kubefake.Clientset, names []string) map[string]string {
	out := map[string]string{}
	for settle := time.Now().Add(time.Second); time.Now().Before(settle); {
		list, err := kube.CoreV1().Events(kt.Namespace).List(context.Background(), metav1.ListOptions{})
		must(t, err)
		for _, e := range list.Items {
			if e.Reason != agent.EventHotplugRefused {
				continue
			}
			reason, rest, _ := strings.Cut(e.Message, ": ")
			for _, n := range names {
				if !strings.HasPrefix(rest, "volume ") || strings.HasPrefix(rest, "volume "+strconv.Quote(n)+": ") {
					out[n] = reason
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return out
}

// runDiag runs diag on the same objects and tree and returns the reason
// code of each volume it reports refused.
func runDiag(t *testing.T, w world, root string) map[string]string {
	kube, dyn := clients(t, w)
	o := diag.DefaultOptions()
	o.NodeName, o.KubeletRoot, o.Host = kt.Node, root, isolation.Host{Proc: "/proc", PID: os.Getpid()}
	o.MountSource = diag.MountSourceMountinfo
	rep, err := diag.Run(context.Background(), o, diag.Clients{Kube: kube, Dyn: dyn})
	must(t, err)
	out := map[string]string{}
	for _, v := range rep.Volumes {
		if v.Verdict == diag.Refused {
			out[v.Volume] = v.RefusalReason
		}
	}
	return out
}
