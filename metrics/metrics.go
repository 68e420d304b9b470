// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// DurationBuckets are the histogram buckets of every hpmount_*_seconds
// metric: 10us to 10s in 1-2.5-5 steps. The low end separates raw mount
// syscalls (~10-60us) from anything that execs (~3-9ms); the high end
// catches a stuck filesystem or apiserver.
var DurationBuckets = []float64{
	10e-6, 25e-6, 50e-6,
	100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3,
	10e-3, 25e-3, 50e-3,
	100e-3, 250e-3, 500e-3,
	1, 2.5, 5,
	10,
}

// LatencyBuckets are the buckets of hpmount_attach_latency_seconds: 50ms
// to 10 minutes. An attach waits for virt-controller's attachment pod and
// the kubelet's publish, so seconds are normal and minutes a fault.
var LatencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// PhaseBuckets are the buckets of hpmount_attach_phase_seconds: 1ms to 10
// minutes. A mount takes milliseconds; the phases timed by the API
// server's and the kubelet's timestamps, which count whole seconds, take
// seconds, and minutes are a fault.
var PhaseBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// The agent's work queues, by the names the agent gives them.
const (
	QueueReconcile = "hpmount"
	QueueStatus    = "hpmount-status"
)

// Volume mode label values: each kind's mode (hotplug.Kinds). Anything
// the agent reports that is no kind's mode is folded into ModeUnknown so
// the label stays bounded.
const (
	ModeFilesystem = string(kubevirt.Filesystem)
	ModeBlock      = string(kubevirt.Block)
	ModeDirectory  = string(kubevirt.Directory)
	ModeUnknown    = "unknown"
)

var (
	// knownModes are the values the kinds add (hotplug.Kinds), and
	// ModeUnknown.
	knownModes  = append(kindModes(), ModeUnknown)
	knownStates = []string{agent.StateMounted, agent.StatePending, agent.StateRefused, agent.StateFailed, agent.StateUnmounted, agent.StateNotPropagated}
	expansions  = []string{agent.ExpansionGrown, agent.ExpansionUnchanged, agent.ExpansionFailed, agent.ExpansionShrinkIgnored}
)

// Metrics is hpmount's set of collectors on a private registry. It is an
// agent.Observer; all methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	volumes           *prometheus.GaugeVec
	ops               *prometheus.CounterVec
	opDuration        *prometheus.HistogramVec
	reconcileDuration prometheus.Histogram
	scanDuration      prometheus.Histogram
	mountinfoEntries  prometheus.Gauge
	unparsed          prometheus.Gauge
	expansions        *prometheus.CounterVec
	refusals          *prometheus.CounterVec
	attachLatency     *prometheus.HistogramVec
	attachPhase       *prometheus.HistogramVec
	migrations        *prometheus.CounterVec
	goneChecks        *prometheus.CounterVec
	migrationReady    prometheus.Histogram
	// queues and rest are client-go's families (workqueue.go,
	// restclient.go).
	queues queueFamilies
	rest   restFamilies
	// stuckThreads counts hpmount_stuck_threads at each scrape (StuckThreads).
	stuckThreads atomic.Pointer[func() int]

	mu sync.Mutex
	// vmis holds what was last reported of each volume of each VMI: its
	// state, from which hpmount_volumes is kept by increments and
	// decrements, and its per-volume series (volumes.go).
	vmis map[vmiKey]map[string]*volume
	// volumeGauges caches the hpmount_volumes children so that a state
	// change does not hash label values.
	volumeGauges map[modeState]prometheus.Gauge
}

type vmiKey struct{ namespace, name string }

type modeState struct{ mode, state string }

var _ agent.Observer = (*Metrics)(nil)

// New builds the collectors and registers them, with the Go runtime and
// process collectors, on a new private registry. version and revision label
// hpmount_build_info (revision, as kube-state-metrics and the Prometheus
// exporters name the VCS revision).
func New(version, revision string) *Metrics {
	m := &Metrics{
		reg:               prometheus.NewRegistry(),
		volumes:           gaugeVec(descVolumes),
		ops:               counterVec(descOps),
		opDuration:        histogramVec(descOpDuration),
		reconcileDuration: histogram(descReconcileDuration),
		scanDuration:      histogram(descScanDuration),
		mountinfoEntries:  gauge(descMountinfoEntries),
		unparsed:          gauge(descMountinfoUnparsed),
		expansions:        counterVec(descExpansions),
		refusals:          counterVec(descRefusals),
		attachLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: descAttachLatency.Name, Help: descAttachLatency.Help,
			Buckets: LatencyBuckets}, descAttachLatency.Labels),
		attachPhase: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: descAttachPhase.Name, Help: descAttachPhase.Help,
			Buckets: PhaseBuckets}, descAttachPhase.Labels),
		migrations: counterVec(descMigrations),
		goneChecks: counterVec(descGoneChecks),
		migrationReady: prometheus.NewHistogram(prometheus.HistogramOpts{Name: descMigrationReady.Name, Help: descMigrationReady.Help,
			Buckets: LatencyBuckets}),
		queues:       newQueueFamilies(),
		rest:         newRESTFamilies(),
		vmis:         make(map[vmiKey]map[string]*volume),
		volumeGauges: make(map[modeState]prometheus.Gauge),
	}
	buildInfo := gaugeVec(descBuildInfo)
	buildInfo.WithLabelValues(version, revision, runtime.Version()).Set(1)

	// Every known mode/state, expansion result, operation and result, and
	// refusal reason is exposed from the start at 0, so that rate() and alerts see a series before the first
	// event instead of an absent one.
	for _, mode := range knownModes {
		for _, state := range knownStates {
			k := modeState{mode, state}
			m.volumeGauges[k] = m.volumes.WithLabelValues(mode, state)
		}
	}
	for _, r := range expansions {
		m.expansions.WithLabelValues(r)
	}
	for _, op := range outcome.Ops {
		m.opDuration.WithLabelValues(string(op))
		for _, r := range outcome.Results {
			m.ops.WithLabelValues(string(op), string(r))
		}
	}
	for _, r := range kubevirt.RefusalReasons {
		m.refusals.WithLabelValues(r)
	}
	for _, mode := range kindModes() {
		m.attachLatency.WithLabelValues(mode)
	}
	for _, p := range agent.AttachPhases {
		m.attachPhase.WithLabelValues(p)
	}
	for _, e := range agent.MigrationEvents {
		m.migrations.WithLabelValues(e)
	}
	for _, r := range agent.GoneChecks {
		m.goneChecks.WithLabelValues(r)
	}

	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo,
		m.volumes,
		m.ops,
		m.opDuration,
		m.reconcileDuration,
		m.scanDuration,
		m.mountinfoEntries,
		m.unparsed,
		volumeSeries{m},
		m.expansions,
		m.refusals,
		m.attachLatency,
		m.attachPhase,
		m.migrations,
		m.goneChecks,
		m.migrationReady,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: descStuckThreads.Name, Help: descStuckThreads.Help}, m.stuck),
	)
	m.reg.MustRegister(m.queues.collectors()...)
	m.reg.MustRegister(m.rest.collectors()...)
	return m
}

// StuckThreads makes hpmount_stuck_threads count with count at every
// scrape (the node engine's StuckThreads); 0 until it is set.
func (m *Metrics) StuckThreads(count func() int) { m.stuckThreads.Store(&count) }

func (m *Metrics) stuck() float64 {
	if f := m.stuckThreads.Load(); f != nil {
		return float64((*f)())
	}
	return 0
}

// Registry is the private registry holding every collector, for tests and
// for callers that want to gather without HTTP.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats (text
// or protobuf, as negotiated) and counts its own scrapes in
// promhttp_metric_handler_requests_total.
func (m *Metrics) Handler() http.Handler {
	return promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:            m.reg,
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
}

// OpAttempt counts one engine call and observes its duration.
func (m *Metrics) OpAttempt(op, result string, d time.Duration) {
	m.ops.WithLabelValues(op, result).Inc()
	m.opDuration.WithLabelValues(op).Observe(d.Seconds())
}

// Reconciled observes the duration of one reconcile of one VMI.
func (m *Metrics) Reconciled(d time.Duration) {
	m.reconcileDuration.Observe(d.Seconds())
}

// SnapshotTaken records one read of the host mount table.
func (m *Metrics) SnapshotTaken(entries, unparsed int, d time.Duration) {
	m.unparsed.Set(float64(unparsed))
	m.scanDuration.Observe(d.Seconds())
	m.mountinfoEntries.Set(float64(entries))
}

// VolumeState records the current state of one volume and moves it between
// hpmount_volumes series. A volume reported unmounted loses its size and
// stale-open series.
func (m *Metrics) VolumeState(namespace, vmi, volume, mode, state string) {
	now := modeState{normalizeMode(mode), state}
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.volumeOf(namespace, vmi, volume)
	before, known := v.ms, v.counted
	if known && before == now {
		return
	}
	v.ms, v.counted = now, true
	if known {
		m.volumeGauge(before).Dec()
	}
	m.volumeGauge(now).Inc()
	if state == agent.StateUnmounted && !(known && before.state == agent.StateUnmounted) {
		v.dropSeries()
	}
}

// VolumeClaim records the PersistentVolumeClaim of one volume: the
// persistentvolumeclaim label of its size and stale-open series.
func (m *Metrics) VolumeClaim(namespace, vmi, volume, claim string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.volumeOf(namespace, vmi, volume).claim = claim
}

// VolumeStaleOpen sets hpmount_volume_stale_open of one volume to 1 or 0.
func (m *Metrics) VolumeStaleOpen(namespace, vmi, volume string, stale bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.volumeOf(namespace, vmi, volume)
	v.stale, v.hasStale = 0, true
	if stale {
		v.stale = 1
	}
}

// volumeGauge returns the cached hpmount_volumes child; m.mu is held.
func (m *Metrics) volumeGauge(k modeState) prometheus.Gauge {
	g, ok := m.volumeGauges[k]
	if !ok {
		g = m.volumes.WithLabelValues(k.mode, k.state)
		m.volumeGauges[k] = g
	}
	return g
}

// VolumeSizes records the sizes a growth check found. A size of 0 means the
// check did not learn it (e.g. no disk.img on a block volume) and leaves
// the series alone; "after" values win over "before" values.
func (m *Metrics) VolumeSizes(namespace, vmi, volume string, r agent.GrowResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.volumeOf(namespace, vmi, volume)
	set := func(to *float64, bytes int64) {
		if bytes > 0 {
			*to = float64(bytes)
		}
	}
	set(&v.device, r.DeviceBytes)
	set(&v.filesystem, firstPositive(r.FilesystemAfter, r.FilesystemBefore))
	set(&v.diskImage, firstPositive(r.DiskImageAfter, r.DiskImageBefore))
}

// Expansion counts one growth check by outcome.
func (m *Metrics) Expansion(result string) {
	m.expansions.WithLabelValues(result).Inc()
}

// AttachLatency observes how long a volume took from desired to usable.
func (m *Metrics) AttachLatency(mode string, d time.Duration) {
	m.attachLatency.WithLabelValues(normalizeMode(mode)).Observe(d.Seconds())
}

// AttachPhase observes one phase of one volume's attach. A phase the
// agent does not know is dropped: the label stays bounded.
func (m *Metrics) AttachPhase(phase string, d time.Duration) {
	if !slices.Contains(agent.AttachPhases, phase) {
		return
	}
	m.attachPhase.WithLabelValues(phase).Observe(d.Seconds())
}

// Migration counts one step of a live migration; the handoff-to-ready
// time of a target-ready step is observed too. An event outside
// agent.MigrationEvents is not counted, so the label stays bounded.
func (m *Metrics) Migration(event string, d time.Duration) {
	if !slices.Contains(agent.MigrationEvents, event) {
		return
	}
	m.migrations.WithLabelValues(event).Inc()
	if event == agent.MigrationTargetReady {
		m.migrationReady.Observe(d.Seconds())
	}
}

// GoneCheck counts one confirmation that a VMI left this node; a result
// outside agent.GoneChecks is not counted, so the label stays bounded.
func (m *Metrics) GoneCheck(result string) {
	if slices.Contains(agent.GoneChecks, result) {
		m.goneChecks.WithLabelValues(result).Inc()
	}
}

// Refusal counts one refusal by reason.
func (m *Metrics) Refusal(reason string) {
	m.refusals.WithLabelValues(reason).Inc()
}

// ForgetVMI deletes every per-volume series of the VMI and stops counting
// its volumes in hpmount_volumes.
func (m *Metrics) ForgetVMI(namespace, vmi string) {
	key := vmiKey{namespace, vmi}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.vmis[key] {
		if v.counted {
			m.volumeGauge(v.ms).Dec()
		}
	}
	delete(m.vmis, key)
}

func normalizeMode(mode string) string {
	if _, ok := hotplug.KindOf(kubevirt.VolumeMode(mode)); ok {
		return mode
	}
	return ModeUnknown
}

// kindModes is the mode label's value of each kind.
func kindModes() []string {
	var out []string
	for _, k := range hotplug.Kinds() {
		out = append(out, string(k.Mode))
	}
	return out
}

func firstPositive(a, b int64) int64 {
	if a > 0 {
		return a
	}
	return b
}

func gauge(d Description) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: d.Name, Help: d.Help})
}

func gaugeVec(d Description) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: d.Name, Help: d.Help}, d.Labels)
}

func counterVec(d Description) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: d.Name, Help: d.Help}, d.Labels)
}

func histogram(d Description) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: DurationBuckets})
}

func histogramVec(d Description) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: DurationBuckets}, d.Labels)
}
