// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func sampleReport() *Report {
	long := "/var/lib/kubelet/pods/0f6b7e52-3c1d-4b7a-9a55-0123456789ab/volumes/kubernetes.io~empty-dir/hotplug-disks/"
	r := &Report{APIVersion: APIVersion, Node: "node-a", KubeletRoot: "/var/lib/kubelet", MountSource: "findmnt",
		Propagation: PropagationCheck{Path: "/var/lib/kubelet/pods", Shared: true, MountPoint: "/", Mode: "shared"}}
	for _, vd := range []Verdict{OK, NotMounted, Stacked, StaleSource, WrongDevice, NeedsFSExpand, ExpandPending, PropagationBroken, Refused, NotAllowed, Error} {
		v := Volume{Namespace: "tenant-with-a-long-name", VMI: "vm-with-a-rather-long-name", Volume: "volume-" + string(vd),
			Mode: "Filesystem", Phase: "MountedToPod", Target: long + "vol.img", Verdict: vd,
			Mount: &MountEntry{Source: "/dev/mapper/myvg1-2979d232-aaaa-bbbb-cccc-0123456789ab", FSRoot: "/disk.img", MajMin: "253:4", Propagation: "shared", Stacked: 1},
			Sizes: Sizes{PVCCapacity: 10 << 30, BlockDevice: 12 << 30, Filesystem: 10 << 30, DiskImage: 9 << 30}}
		if vd == OK {
			v.LastAttach = &LastAttach{Phases: []AttachPhase{{Phase: "pod-created", Seconds: 1}, {Phase: "mounted", Seconds: 0.012},
				{Phase: "launcher-ready", Seconds: 2, Approximate: true}}, TotalSeconds: 1.012}
		}
		if vd != OK {
			v.Hint = hintFor(vd, &findings{target: v.Target, stacked: 2, propagation: errString("x")})
		}
		r.Volumes = append(r.Volumes, v)
	}
	r.Orphans = []OrphanEntry{{LauncherPodUID: "0f6b7e52-3c1d-4b7a-9a55-0123456789ab", Name: "old.img", Kind: "mount",
		Target: long + "old.img", Verdict: Orphan, Hint: orphanHint("mount", long+"old.img")}}
	r.countProblems()
	return r
}

type errString string

func (e errString) Error() string { return string(e) }

func TestRenderTableFits(t *testing.T) {
	r := sampleReport()
	var b bytes.Buffer
	if err := Render(&b, r, FormatTable); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > TableWidth {
			t.Errorf("line of %d columns: %q", n, line)
		}
	}
	for _, want := range []string{"NAMESPACE/VMI", "SOURCE[FSROOT]", "HINTS", "ORPHANS", "umount", "11 problem(s)", "10Gi"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := Render(&b, r, FormatWide); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TARGET", "MAJ:MIN", "PROPAGATION", "STACKED", "ATTACH-POD", "DEVICE", "LAST-ATTACH", "HINT", "253:4", "12Gi",
		"pod-created 1s, mounted 12ms, launcher-ready ~2s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("wide lacks %q", want)
		}
	}
	if err := Render(&b, r, "xml"); err == nil {
		t.Error("unknown format accepted")
	}
}

func TestRenderJSONSchema(t *testing.T) {
	var b bytes.Buffer
	if err := Render(&b, sampleReport(), FormatJSON); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"apiVersion", "node", "volumes", "orphans", "problems", "propagation", "mountSource"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if doc["apiVersion"] != "hpmount.io/diag/v1" || doc["problems"] != float64(11) {
		t.Errorf("apiVersion %v problems %v", doc["apiVersion"], doc["problems"])
	}
	vol := doc["volumes"].([]any)[0].(map[string]any)
	for _, k := range []string{"namespace", "vmi", "volume", "mode", "phase", "target", "mount", "sizes", "verdict"} {
		if _, ok := vol[k]; !ok {
			t.Errorf("volume lacks %q", k)
		}
	}
	m := vol["mount"].(map[string]any)
	for _, k := range []string{"source", "fsRoot", "fsType", "majMin", "propagation", "stacked"} {
		if _, ok := m[k]; !ok {
			t.Errorf("mount lacks %q", k)
		}
	}
	b.Reset()
	if err := Render(&b, sampleReport(), FormatYAML); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "apiVersion: hpmount.io/diag/v1\n") || !strings.Contains(b.String(), "pvcCapacity: 10737418240") {
		t.Errorf("yaml:\n%s", b.String())
	}
}

func TestJudgeOrderAndExitCode(t *testing.T) {
	v := Volume{}
	judge(&v, &findings{stale: "gone", stacked: 3, needsExpand: true, target: "/t"})
	if v.Verdict != StaleSource || v.Hint == "" {
		t.Errorf("verdict %s hint %q", v.Verdict, v.Hint)
	}
	v = Volume{}
	judge(&v, &findings{stacked: 3, target: "/t"})
	if v.Verdict != Stacked || !strings.Contains(v.Hint, "`umount /t` 2 time(s)") {
		t.Errorf("stacked: %s %q", v.Verdict, v.Hint)
	}
	if ExitCode(&Report{}, nil) != ExitOK || ExitCode(&Report{Problems: 1}, nil) != ExitProblems || ExitCode(nil, cannotRunf("x", "y")) != ExitCannotRun {
		t.Error("exit codes")
	}
	if human(300<<20) != "300Mi" || human(1536<<20) != "1.5Gi" || human(0) != "-" {
		t.Errorf("human: %s %s", human(300<<20), human(1536<<20))
	}
}
