// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBlockComputeOnly: a block volume's device is granted to the
// launcher's compute container (QEMU's) and to no other container of the
// pod; after compute restarts under a new ID, in a new cgroup with the
// runtime's defaults, the pod update that names the new container gets the
// device granted again. The resync period is an hour, so the re-grant can
// only come from that update.
func TestBlockComputeOnly(t *testing.T) {
	e := newEnv(t, "--resync-period=1h")
	v := e.newVM("tenant-a", "vm1")
	raw := v.addVolume("raw", "", 32<<20)
	v.newAttachmentPod(raw)
	v.apply()
	var dev string
	granted := e.step("granted to compute only", func(t *testing.T) {
		v.waitNode(raw)
		v.roundTrip(t, raw, "compute-opens-it")
		var st unix.Stat_t
		if err := unix.Stat(v.Target(raw), &st); err != nil {
			t.Fatal(err)
		}
		dev = fmt.Sprintf("b %d:%d rwm", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		if list := devicesList(t, v.L.Cgroup); !strings.Contains(list, dev) {
			t.Fatalf("compute's devices.list lacks %q:\n%s", dev, list)
		}
		if list := devicesList(t, v.L.Sidecar); strings.Contains(list, dev) {
			t.Fatalf("guest-console-log's devices.list has %q:\n%s", dev, list)
		}
		if out, err := v.L.Process.Exec(fmt.Sprintf("echo $$ > %s/cgroup.procs", v.L.Sidecar),
			"head -c 1 "+v.L.ContainerPath(filepath.Base(v.Target(raw)))+" >/dev/null"); err == nil || !strings.Contains(fmt.Sprint(err, out), "not permitted") {
			t.Fatalf("guest-console-log opened the volume: %v %s", err, out)
		}
	})
	if !granted {
		return
	}
	e.step("compute restarts: granted again to the new container", func(t *testing.T) {
		if err := v.L.RestartCompute(); err != nil {
			t.Fatal(err)
		}
		if list := devicesList(t, v.L.Cgroup); strings.Contains(list, dev) {
			t.Fatalf("the new compute container starts with %q:\n%s", dev, list)
		}
		if _, err := e.ctrl.SetComputeRestarts(e.ctx, v.Launcher, v.L.Restarts); err != nil {
			t.Fatal(err)
		}
		e.eventually("device granted to the restarted compute container", 30*time.Second, func() error {
			if list := devicesList(t, v.L.Cgroup); !strings.Contains(list, dev) {
				return fmt.Errorf("compute's devices.list lacks %q", dev)
			}
			return nil
		})
		v.roundTrip(t, raw, "after-compute-restart")
		if list := devicesList(t, v.L.Sidecar); strings.Contains(list, dev) {
			t.Fatalf("guest-console-log's devices.list has %q:\n%s", dev, list)
		}
	})
}

func devicesList(t *testing.T, cgroup string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cgroup, "devices.list"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
