// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// TestStuckThreads: the gauge is 0 until the engine's count is set, then
// that count at every scrape.
func TestStuckThreads(t *testing.T) {
	m := New("v", "c")
	for _, tc := range []struct {
		set  func() int
		want int
	}{{nil, 0}, {func() int { return 3 }, 3}} {
		if tc.set != nil {
			m.StuckThreads(tc.set)
		}
		want := fmt.Sprintf("# HELP hpmount_stuck_threads %s\n# TYPE hpmount_stuck_threads gauge\nhpmount_stuck_threads %d\n",
			descStuckThreads.Help, tc.want)
		if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "hpmount_stuck_threads"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBuildInfo(t *testing.T) {
	m := New("v1.2.3", "abc1234")
	want := fmt.Sprintf(`
# HELP hpmount_build_info %s
# TYPE hpmount_build_info gauge
hpmount_build_info{goversion=%q,revision="abc1234",version="v1.2.3"} 1
`, descBuildInfo.Help, runtime.Version())
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "hpmount_build_info"); err != nil {
		t.Fatal(err)
	}
}

func TestOpAttempt(t *testing.T) {
	m := New("dev", "none")
	m.OpAttempt("attach", "mounted", 30*time.Microsecond)
	m.OpAttempt("attach", "mounted", 2*time.Millisecond)
	m.OpAttempt("attach", "error", 20*time.Second)
	m.OpAttempt("detach", "removed", 40*time.Microsecond)

	for _, tc := range []struct {
		op, result string
		want       float64
	}{
		{"attach", "mounted", 2},
		{"attach", "error", 1},
		{"detach", "removed", 1},
		{"detach", "error", 0},
	} {
		t.Run(tc.op+"/"+tc.result, func(t *testing.T) {
			if got := testutil.ToFloat64(m.ops.WithLabelValues(tc.op, tc.result)); got != tc.want {
				t.Errorf("hpmount_mount_operations_total{op=%q,result=%q} = %v, want %v", tc.op, tc.result, got, tc.want)
			}
		})
	}

	h := histogramOf(t, m.Registry(), "hpmount_mount_operation_duration_seconds", map[string]string{"op": "attach"})
	if h.GetSampleCount() != 3 {
		t.Errorf("attach sample count = %d, want 3", h.GetSampleCount())
	}
	if want := 20.00203; !near(h.GetSampleSum(), want) {
		t.Errorf("attach sample sum = %v, want %v", h.GetSampleSum(), want)
	}
	// Cumulative counts: 30us falls in le=50us, 2ms in le=2.5ms, 20s only in +Inf.
	wantCum := map[float64]uint64{25e-6: 0, 50e-6: 1, 1e-3: 1, 2.5e-3: 2, 10: 2}
	for _, b := range h.GetBucket() {
		if want, ok := wantCum[b.GetUpperBound()]; ok && b.GetCumulativeCount() != want {
			t.Errorf("attach bucket le=%v = %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if got := len(h.GetBucket()); got != len(DurationBuckets) {
		t.Errorf("%d buckets, want %d", got, len(DurationBuckets))
	}
	// Latency is per operation, never per volume or result: one series
	// per known operation, pre-registered.
	if n := testutil.CollectAndCount(m.opDuration); n != len(outcome.Ops) {
		t.Errorf("%d duration series, want %d (one per operation)", n, len(outcome.Ops))
	}
}

func TestReconciledAndSnapshot(t *testing.T) {
	m := New("dev", "none")
	m.Reconciled(3 * time.Millisecond)
	m.Reconciled(4 * time.Millisecond)
	m.SnapshotTaken(120, 0, 700*time.Microsecond)
	m.SnapshotTaken(87, 0, 600*time.Microsecond)

	if h := histogramOf(t, m.Registry(), "hpmount_reconcile_duration_seconds", nil); h.GetSampleCount() != 2 || !near(h.GetSampleSum(), 0.007) {
		t.Errorf("reconcile histogram count %d sum %v, want 2 and 0.007", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := histogramOf(t, m.Registry(), "hpmount_mountinfo_scan_duration_seconds", nil); h.GetSampleCount() != 2 || !near(h.GetSampleSum(), 0.0013) {
		t.Errorf("scan histogram count %d sum %v, want 2 and 0.0013", h.GetSampleCount(), h.GetSampleSum())
	}
	if got := testutil.ToFloat64(m.mountinfoEntries); got != 87 {
		t.Errorf("hpmount_mountinfo_entries = %v, want 87 (the last scan)", got)
	}
}

type stateEvent struct{ ns, vmi, vol, mode, state string }

func TestVolumeState(t *testing.T) {
	tests := []struct {
		name   string
		events []stateEvent
		forget [][2]string
		want   map[[2]string]float64 // {mode,state} -> value; unlisted known series are 0
	}{
		{
			name:   "one mounted",
			events: []stateEvent{{"ns", "vm", "a", "Filesystem", agent.StateMounted}},
			want:   map[[2]string]float64{{"Filesystem", "mounted"}: 1},
		},
		{
			name: "repeat does not double count",
			events: []stateEvent{
				{"ns", "vm", "a", "Filesystem", agent.StateMounted},
				{"ns", "vm", "a", "Filesystem", agent.StateMounted},
			},
			want: map[[2]string]float64{{"Filesystem", "mounted"}: 1},
		},
		{
			name: "pending then mounted moves the volume",
			events: []stateEvent{
				{"ns", "vm", "a", "Block", agent.StatePending},
				{"ns", "vm", "b", "Block", agent.StatePending},
				{"ns", "vm", "a", "Block", agent.StateMounted},
			},
			want: map[[2]string]float64{{"Block", "mounted"}: 1, {"Block", "pending"}: 1},
		},
		{
			name: "same volume name in two VMIs counts twice",
			events: []stateEvent{
				{"ns", "vm1", "a", "Filesystem", agent.StateFailed},
				{"ns", "vm2", "a", "Filesystem", agent.StateFailed},
				{"other", "vm1", "a", "Filesystem", agent.StateFailed},
			},
			want: map[[2]string]float64{{"Filesystem", "failed"}: 3},
		},
		{
			name: "unknown and empty modes are folded",
			events: []stateEvent{
				{"ns", "vm", "a", "", agent.StatePending},
				{"ns", "vm", "b", "Weird", agent.StateRefused},
			},
			want: map[[2]string]float64{{"unknown", "pending"}: 1, {"unknown", "refused"}: 1},
		},
		{
			name: "forget removes only that VMI",
			events: []stateEvent{
				{"ns", "vm1", "a", "Filesystem", agent.StateMounted},
				{"ns", "vm1", "b", "Block", agent.StateMounted},
				{"ns", "vm2", "a", "Filesystem", agent.StateMounted},
			},
			forget: [][2]string{{"ns", "vm1"}, {"ns", "never-seen"}},
			want:   map[[2]string]float64{{"Filesystem", "mounted"}: 1},
		},
		{
			name: "forgetting twice does not go negative",
			events: []stateEvent{
				{"ns", "vm", "a", "Filesystem", agent.StateUnmounted},
			},
			forget: [][2]string{{"ns", "vm"}, {"ns", "vm"}},
			want:   map[[2]string]float64{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := New("dev", "none")
			for _, e := range tc.events {
				m.VolumeState(e.ns, e.vmi, e.vol, e.mode, e.state)
			}
			for _, f := range tc.forget {
				m.ForgetVMI(f[0], f[1])
			}
			for _, mode := range knownModes {
				for _, state := range knownStates {
					want := tc.want[[2]string{mode, state}]
					if got := testutil.ToFloat64(m.volumes.WithLabelValues(mode, state)); got != want {
						t.Errorf("hpmount_volumes{mode=%q,state=%q} = %v, want %v", mode, state, got, want)
					}
				}
			}
		})
	}
}

func TestVolumeSizesAndForget(t *testing.T) {
	m := New("dev", "none")
	m.VolumeState("ns", "vm1", "data", "Filesystem", agent.StateMounted)
	m.VolumeSizes("ns", "vm1", "data", agent.GrowResult{
		DeviceBytes: 2 << 30, FilesystemBefore: 1 << 30, FilesystemAfter: 2<<30 - 4096,
		DiskImageBefore: 1 << 30, DiskImageAfter: 2<<30 - 1<<20, Grown: true, ImageGrown: true,
	})
	// Before-only values are used when the check learned no after value.
	m.VolumeSizes("ns", "vm1", "logs", agent.GrowResult{DeviceBytes: 1 << 30, FilesystemBefore: 1<<30 - 4096, DiskImageBefore: 1 << 29})
	// Zero means unknown: a block volume has no filesystem or disk.img series.
	m.VolumeSizes("ns", "vm2", "raw", agent.GrowResult{DeviceBytes: 5 << 30})

	want := fmt.Sprintf(`
# HELP hpmount_volume_device_size_bytes %s
# TYPE hpmount_volume_device_size_bytes gauge
hpmount_volume_device_size_bytes{namespace="ns",vmi="vm1",volume="data"} 2.147483648e+09
hpmount_volume_device_size_bytes{namespace="ns",vmi="vm1",volume="logs"} 1.073741824e+09
hpmount_volume_device_size_bytes{namespace="ns",vmi="vm2",volume="raw"} 5.36870912e+09
# HELP hpmount_volume_filesystem_size_bytes %s
# TYPE hpmount_volume_filesystem_size_bytes gauge
hpmount_volume_filesystem_size_bytes{namespace="ns",vmi="vm1",volume="data"} 2.147479552e+09
hpmount_volume_filesystem_size_bytes{namespace="ns",vmi="vm1",volume="logs"} 1.073737728e+09
# HELP hpmount_volume_disk_image_size_bytes %s
# TYPE hpmount_volume_disk_image_size_bytes gauge
hpmount_volume_disk_image_size_bytes{namespace="ns",vmi="vm1",volume="data"} 2.146435072e+09
hpmount_volume_disk_image_size_bytes{namespace="ns",vmi="vm1",volume="logs"} 5.36870912e+08
`, descDeviceSize.Help, descFilesystemSize.Help, descDiskImageSize.Help)
	sizeNames := []string{"hpmount_volume_device_size_bytes", "hpmount_volume_filesystem_size_bytes", "hpmount_volume_disk_image_size_bytes"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), sizeNames...); err != nil {
		t.Fatal(err)
	}

	// Unmounting a volume drops its size series, and only its own.
	m.VolumeState("ns", "vm1", "logs", "Filesystem", agent.StateUnmounted)
	if n, err := testutil.GatherAndCount(m.Registry(), sizeNames...); err != nil || n != 4 {
		t.Fatalf("after unmount of logs: %d size series (err %v), want 4", n, err)
	}

	m.ForgetVMI("ns", "vm1")
	want = fmt.Sprintf(`
# HELP hpmount_volume_device_size_bytes %s
# TYPE hpmount_volume_device_size_bytes gauge
hpmount_volume_device_size_bytes{namespace="ns",vmi="vm2",volume="raw"} 5.36870912e+09
`, descDeviceSize.Help)
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), sizeNames...); err != nil {
		t.Fatalf("after ForgetVMI(ns, vm1): %v", err)
	}
	if got := testutil.ToFloat64(m.volumes.WithLabelValues("Filesystem", "mounted")); got != 0 {
		t.Errorf("forgotten VMI still counted: hpmount_volumes{Filesystem,mounted} = %v", got)
	}
	m.ForgetVMI("ns", "vm2")
	if n, err := testutil.GatherAndCount(m.Registry(), sizeNames...); err != nil || n != 0 {
		t.Fatalf("after forgetting every VMI: %d size series (err %v), want 0", n, err)
	}
}

// TestVolumeStaleOpen: the gauge follows the agent's reports, and goes
// with the volume's unmount and with its VMI.
func TestVolumeStaleOpen(t *testing.T) {
	m := New("dev", "none")
	stale := func(vmi, volume string) float64 {
		return gathered(t, m, "hpmount_volume_stale_open", "ns", vmi, volume)
	}
	m.VolumeStaleOpen("ns", "vm1", "raw", true)
	m.VolumeStaleOpen("ns", "vm1", "data", false)
	m.VolumeStaleOpen("ns", "vm2", "raw", true)
	if stale("vm1", "raw") != 1 || stale("vm1", "data") != 0 {
		t.Fatalf("stale-open raw %v data %v, want 1 and 0", stale("vm1", "raw"), stale("vm1", "data"))
	}
	m.VolumeStaleOpen("ns", "vm1", "raw", false)
	if got := stale("vm1", "raw"); got != 0 {
		t.Fatalf("cleared stale-open = %v, want 0", got)
	}
	m.VolumeState("ns", "vm1", "data", "Filesystem", agent.StateUnmounted)
	if n, err := testutil.GatherAndCount(m.Registry(), "hpmount_volume_stale_open"); err != nil || n != 2 {
		t.Fatalf("%d series after data was unmounted (err %v), want 2", n, err)
	}
	m.ForgetVMI("ns", "vm1")
	want := fmt.Sprintf(`
# HELP hpmount_volume_stale_open %s
# TYPE hpmount_volume_stale_open gauge
hpmount_volume_stale_open{namespace="ns",vmi="vm2",volume="raw"} 1
`, descStaleOpen.Help)
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "hpmount_volume_stale_open"); err != nil {
		t.Fatalf("after ForgetVMI(ns, vm1): %v", err)
	}
}

// gathered is the value of the per-volume series name of one volume, as a
// scrape reads it; -1 when there is none.
func gathered(t *testing.T, m *Metrics, name, namespace, vmi, volume string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"namespace": namespace, "vmi": vmi, "volume": volume}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range s.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, want) {
				return s.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func TestExpansionAndRefusal(t *testing.T) {
	m := New("dev", "none")
	m.Expansion(agent.ExpansionGrown)
	m.Expansion(agent.ExpansionGrown)
	m.Expansion(agent.ExpansionShrinkIgnored)
	m.Refusal(kubevirt.RefusedAttachOwner)
	m.Refusal("unsafe-path")
	m.Refusal("unsafe-path")

	want := fmt.Sprintf(`
# HELP hpmount_filesystem_expansions_total %s
# TYPE hpmount_filesystem_expansions_total counter
hpmount_filesystem_expansions_total{result="failed"} 0
hpmount_filesystem_expansions_total{result="grown"} 2
hpmount_filesystem_expansions_total{result="shrink-ignored"} 1
hpmount_filesystem_expansions_total{result="unchanged"} 0
# HELP hpmount_refusals_total %s
# TYPE hpmount_refusals_total counter
hpmount_refusals_total{reason="attachment-pod-label"} 0
hpmount_refusals_total{reason="attachment-pod-namespace"} 0
hpmount_refusals_total{reason="attachment-pod-owner"} 1
hpmount_refusals_total{reason="launcher-ambiguous"} 0
hpmount_refusals_total{reason="launcher-labels"} 0
hpmount_refusals_total{reason="launcher-namespace"} 0
hpmount_refusals_total{reason="launcher-no-hotplug-disks"} 0
hpmount_refusals_total{reason="launcher-node"} 0
hpmount_refusals_total{reason="unknown-volume-mode"} 0
hpmount_refusals_total{reason="unsafe-content"} 0
hpmount_refusals_total{reason="unsafe-path"} 2
hpmount_refusals_total{reason="unsafe-volume-name"} 0
`, descExpansions.Help, descRefusals.Help)
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "hpmount_filesystem_expansions_total", "hpmount_refusals_total"); err != nil {
		t.Fatal(err)
	}
}

// exerciseAll calls every Observer method so that every family has a series.
func exerciseAll(m *Metrics) {
	m.OpAttempt("attach", "mounted", time.Millisecond)
	m.Reconciled(time.Millisecond)
	m.SnapshotTaken(10, 1, time.Millisecond)
	m.VolumeClaim("ns", "vm", "a", "claim-a")
	m.VolumeState("ns", "vm", "a", "Filesystem", agent.StateMounted)
	m.VolumeSizes("ns", "vm", "a", agent.GrowResult{DeviceBytes: 1, FilesystemAfter: 1, DiskImageAfter: 1})
	m.VolumeStaleOpen("ns", "vm", "a", false)
	m.Expansion(agent.ExpansionUnchanged)
	m.Refusal("r")
	m.Migration(agent.MigrationTargetReady, time.Second)
	// client-go's REST client, as its hooks report a request.
	m.rest.requests.WithLabelValues("200", "apiserver:6443", "GET").Inc()
	m.rest.latency.WithLabelValues("apiserver:6443", "GET").Observe(0.01)
	m.rest.rateLimiter.WithLabelValues("apiserver:6443", "GET").Observe(0)
}

// agentFamily reports whether a registered family is the agent's own or
// client-go's, rather than the Go runtime's or the process's.
func agentFamily(name string) bool {
	return strings.HasPrefix(name, "hpmount_") || strings.HasPrefix(name, "workqueue_") || strings.HasPrefix(name, "rest_client_")
}

func TestDescriptionsMatchRegistry(t *testing.T) {
	m := New("dev", "none")
	exerciseAll(m)
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, f := range families {
		if agentFamily(f.GetName()) {
			got[f.GetName()] = f
		}
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	descs := Descriptions()
	if len(descs) != len(got) {
		t.Errorf("%d descriptions, %d of the agent's and client-go's families registered", len(descs), len(got))
	}
	for _, d := range descs {
		t.Run(d.Name, func(t *testing.T) {
			f, ok := got[d.Name]
			if !ok {
				t.Fatalf("described but not registered")
			}
			if f.GetHelp() != d.Help {
				t.Errorf("help %q, described %q", f.GetHelp(), d.Help)
			}
			if typ := strings.ToLower(f.GetType().String()); typ != d.Type {
				t.Errorf("type %s, described %s", typ, d.Type)
			}
			var labels []string
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
			if want := slices.Sorted(slices.Values(d.Labels)); !slices.Equal(labels, want) {
				t.Errorf("labels %v, described %v", labels, want)
			}
			if d.Type == TypeCounter != strings.HasSuffix(d.Name, "_total") {
				t.Errorf("counters, and only counters, end in _total")
			}
			if !strings.Contains(string(doc), "//\t"+d.Name) {
				t.Errorf("doc.go metrics table lacks %s", d.Name)
			}
		})
	}
	// Descriptions hands out copies.
	descs[0].Labels[0] = "changed"
	if Descriptions()[0].Labels[0] == "changed" {
		t.Error("Descriptions returned shared label slices")
	}
}

func TestLint(t *testing.T) {
	m := New("dev", "none")
	exerciseAll(m)
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestPrivateRegistry(t *testing.T) {
	a, b := New("a", "1"), New("b", "2")
	a.Refusal("x")
	if n := testutil.CollectAndCount(b.refusals); n != len(kubevirt.RefusalReasons) {
		t.Errorf("two instances share series: %d refusal series in the second, want only the %d pre-registered", n, len(kubevirt.RefusalReasons))
	}
	if n, _ := testutil.GatherAndCount(prometheus.DefaultGatherer, "hpmount_build_info"); n != 0 {
		t.Errorf("hpmount_build_info registered on the global registry")
	}
}

func TestHandler(t *testing.T) {
	m := New("v9", "c0ffee")
	exerciseAll(m)
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s: %s", resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want the text exposition format", ct)
	}
	for _, want := range []string{
		"# TYPE hpmount_mount_operations_total counter",
		`hpmount_mount_operations_total{op="attach",result="mounted"} 1`,
		`hpmount_mount_operation_duration_seconds_bucket{op="attach",le="0.001"} 1`,
		"go_goroutines ",
		"process_start_time_seconds ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	want := fmt.Sprintf(`
# HELP hpmount_build_info %s
# TYPE hpmount_build_info gauge
hpmount_build_info{goversion=%q,revision="c0ffee",version="v9"} 1
`, descBuildInfo.Help, runtime.Version())
	if err := testutil.ScrapeAndCompare(srv.URL+"/metrics", strings.NewReader(want), "hpmount_build_info"); err != nil {
		t.Error(err)
	}
	// The handler counts its own scrapes.
	if n, err := testutil.GatherAndCount(m.Registry(), "promhttp_metric_handler_requests_total"); err != nil || n == 0 {
		t.Errorf("promhttp_metric_handler_requests_total missing (err %v)", err)
	}
}

// TestConcurrent runs every method from several goroutines (meaningful
// under -race) and checks that hpmount_volumes adds up.
func TestConcurrent(t *testing.T) {
	m := New("dev", "none")
	const workers, vmis = 8, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range vmis {
				vmi := fmt.Sprintf("vm%d", i)
				vol := fmt.Sprintf("v%d", w)
				m.VolumeState("ns", vmi, vol, "Block", agent.StatePending)
				m.OpAttempt("attach", "created", time.Microsecond)
				m.VolumeState("ns", vmi, vol, "Block", agent.StateMounted)
				m.VolumeSizes("ns", vmi, vol, agent.GrowResult{DeviceBytes: 1 << 20})
				m.Refusal("r")
				if i%2 == 0 {
					m.ForgetVMI("ns", vmi)
				}
			}
		})
	}
	wg.Wait()
	var total float64
	for _, mode := range knownModes {
		for _, state := range knownStates {
			total += testutil.ToFloat64(m.volumes.WithLabelValues(mode, state))
		}
	}
	m.mu.Lock()
	var tracked int
	for _, vols := range m.vmis {
		tracked += len(vols)
	}
	m.mu.Unlock()
	if total != float64(tracked) || total < 0 {
		t.Errorf("hpmount_volumes sums to %v, %d volumes tracked", total, tracked)
	}
	if got := testutil.ToFloat64(m.refusals.WithLabelValues("r")); got != workers*vmis {
		t.Errorf("refusals %v, want %d", got, workers*vmis)
	}
}

// BenchmarkOpAttemptVolumeState is the per-call cost the agent's workers
// pay: one engine call observed plus one unchanged volume state.
func BenchmarkOpAttemptVolumeState(b *testing.B) {
	m := New("dev", "none")
	m.VolumeState("default", "vm", "disk-1", "Filesystem", agent.StateMounted)
	b.ReportAllocs()
	for b.Loop() {
		m.OpAttempt("verify", "unchanged", 42*time.Microsecond)
		m.VolumeState("default", "vm", "disk-1", "Filesystem", agent.StateMounted)
	}
}

// BenchmarkVolumeStateChange is a volume flipping state every call.
func BenchmarkVolumeStateChange(b *testing.B) {
	m := New("dev", "none")
	states := [2]string{agent.StatePending, agent.StateMounted}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.VolumeState("default", "vm", "disk-1", "Block", states[i&1])
		i++
	}
}

func histogramOf(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Histogram {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metric
				}
			}
			return mt.GetHistogram()
		}
	}
	t.Fatalf("no histogram %s%v", name, labels)
	return nil
}

func near(got, want float64) bool {
	d := got - want
	return d < 1e-9 && d > -1e-9
}

// TestVolumeSeriesLabels: the per-volume series share label pairs built
// for volumeLabelNames without NewConstMetric's checks, so each of their
// descriptions must name exactly those labels, in that sorted order.
func TestVolumeSeriesLabels(t *testing.T) {
	if !slices.IsSorted(volumeLabelNames[:]) {
		t.Fatalf("volumeLabelNames %v are not sorted", volumeLabelNames)
	}
	for _, d := range []Description{descDeviceSize, descFilesystemSize, descDiskImageSize, descStaleOpen} {
		if !slices.Equal(d.Labels, volumeLabelNames[:]) {
			t.Errorf("%s has labels %v, want the per-volume labels %v", d.Name, d.Labels, volumeLabelNames)
		}
	}
}

// TestVolumeClaimLabel: a volume's series carry its claim as
// persistentvolumeclaim, the label kubelet's and kube-state-metrics'
// volume series have; a new claim (a volume migration) relabels them, and
// a volume keeps one series per family.
func TestVolumeClaimLabel(t *testing.T) {
	m := New("dev", "none")
	m.VolumeClaim("ns", "vm", "data", "claim-1")
	m.VolumeState("ns", "vm", "data", "Filesystem", agent.StateMounted)
	m.VolumeSizes("ns", "vm", "data", agent.GrowResult{DeviceBytes: 10})
	m.VolumeSizes("ns", "vm", "other", agent.GrowResult{DeviceBytes: 20})
	want := func(claim string) string {
		return fmt.Sprintf(`# HELP hpmount_volume_device_size_bytes %s
# TYPE hpmount_volume_device_size_bytes gauge
hpmount_volume_device_size_bytes{namespace="ns",persistentvolumeclaim=%q,vmi="vm",volume="data"} 10
hpmount_volume_device_size_bytes{namespace="ns",vmi="vm",volume="other"} 20
`, descDeviceSize.Help, claim)
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want("claim-1")), "hpmount_volume_device_size_bytes"); err != nil {
		t.Fatal(err)
	}
	m.VolumeClaim("ns", "vm", "data", "claim-2")
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want("claim-2")), "hpmount_volume_device_size_bytes"); err != nil {
		t.Fatal(err)
	}
}
