package blockdev

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestPodDirsRemembersAndRevalidates(t *testing.T) {
	root := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := mk("kubepods/burstable/podabc")
	mk("kubepods/burstable/podabc/ctr1")
	var c podDirs
	cgs, err := c.find(root, "abc")
	if err != nil || cgs.Pod != first || len(cgs.Descendants) != 1 {
		t.Fatalf("find = %+v, %v", cgs, err)
	}
	// A container that appears later is seen: the subtree is walked anew.
	mk("kubepods/burstable/podabc/ctr2")
	if cgs, err = c.find(root, "abc"); err != nil || len(cgs.Descendants) != 2 {
		t.Fatalf("find after a new container = %+v, %v", cgs, err)
	}
	// The pod's cgroup moved (QoS class change on a restart): the
	// remembered directory is gone, so the tree is searched again.
	if err := os.RemoveAll(first); err != nil {
		t.Fatal(err)
	}
	second := mk("kubepods/besteffort/podabc")
	if cgs, err = c.find(root, "abc"); err != nil || cgs.Pod != second {
		t.Fatalf("find after the move = %+v, %v", cgs, err)
	}
	if err := os.RemoveAll(second); err != nil {
		t.Fatal(err)
	}
	if _, err = c.find(root, "abc"); !errors.Is(err, ErrPodCgroupNotFound) {
		t.Fatalf("find of a gone pod = %v, want ErrPodCgroupNotFound", err)
	}
	if _, ok := c.get("abc"); ok {
		t.Fatal("a gone pod stays remembered")
	}
}
