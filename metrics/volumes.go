// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The per-volume series (sizes and stale-open) are kept as plain values in
// the one record of each volume and written only when scraped. As
// GaugeVec children, four per volume, each held its label pairs, hash and
// gauge between scrapes: at 2,000 volumes that was a quarter of a settled
// agent's live heap, for values a scrape every 15 s or more reads.

// volume is what the agent last reported of one volume.
type volume struct {
	// counted says the volume is counted in hpmount_volumes under ms: it
	// has had a VolumeState (sizes may come first).
	counted bool
	ms      modeState
	// claim is the volume's PersistentVolumeClaim (VolumeClaim), "" until
	// reported: the persistentvolumeclaim label of its series.
	claim string
	// sizes in bytes; 0 is unknown: no series.
	device, filesystem, diskImage float64
	// stale is hpmount_volume_stale_open once reported (hasStale).
	stale    float64
	hasStale bool
}

// dropSeries drops the volume's size and stale-open series.
func (v *volume) dropSeries() {
	v.device, v.filesystem, v.diskImage, v.stale, v.hasStale = 0, 0, 0, 0, false
}

var (
	deviceSizeDesc     = newDesc(descDeviceSize)
	filesystemSizeDesc = newDesc(descFilesystemSize)
	diskImageSizeDesc  = newDesc(descDiskImageSize)
	staleOpenDesc      = newDesc(descStaleOpen)
)

func newDesc(d Description) *prometheus.Desc {
	return prometheus.NewDesc(d.Name, d.Help, d.Labels, nil)
}

// volumeSeries is the collector of the per-volume series, from m.vmis.
type volumeSeries struct{ m *Metrics }

func (s volumeSeries) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{deviceSizeDesc, filesystemSizeDesc, diskImageSizeDesc, staleOpenDesc} {
		ch <- d
	}
}

func (s volumeSeries) Collect(ch chan<- prometheus.Metric) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	for k, vols := range s.m.vmis {
		for name, v := range vols {
			// The labels are made at the first series sent, so a volume
			// with none (not mounted yet) costs nothing and each value is
			// tested once.
			var labels []*dto.LabelPair
			send := func(d *prometheus.Desc, value float64) {
				if labels == nil {
					labels = newVolumeLabels(k.namespace, v.claim, k.name, name)
				}
				ch <- volumeMetric{desc: d, labels: labels, value: value}
			}
			if v.device > 0 {
				send(deviceSizeDesc, v.device)
			}
			if v.filesystem > 0 {
				send(filesystemSizeDesc, v.filesystem)
			}
			if v.diskImage > 0 {
				send(diskImageSizeDesc, v.diskImage)
			}
			if v.hasStale {
				send(staleOpenDesc, v.stale)
			}
		}
	}
}

// volumeLabelNames are the labels of every per-volume series, sorted, as
// the registry wants a metric's label pairs. persistentvolumeclaim is the
// label name of the kubelet's and kube-state-metrics' volume series, so a
// query joins them on it; a volume keeps one series per family whatever
// its claim, which only a volume migration changes.
var volumeLabelNames = [4]string{"namespace", "persistentvolumeclaim", "vmi", "volume"}

// claimLabel is persistentvolumeclaim's index in volumeLabelNames.
const claimLabel = 1

// newVolumeLabels builds the label pairs of one volume's series in one
// allocation, shared by its series of one scrape. A scrape of 1,000
// volumes built 4,000 label sets through prometheus.NewConstMetric, a
// quarter of what it allocated (BenchmarkScrape1000Volumes). A volume
// whose claim is not known has no persistentvolumeclaim pair, as
// Prometheus reads an empty label.
func newVolumeLabels(namespace, claim, vmi, volume string) []*dto.LabelPair {
	l := &struct {
		values [4]string
		pairs  [4]dto.LabelPair
		ptrs   [4]*dto.LabelPair
	}{values: [4]string{namespace, claim, vmi, volume}}
	out := l.ptrs[:0]
	for i := range l.pairs {
		if i == claimLabel && claim == "" {
			continue
		}
		l.pairs[i].Name, l.pairs[i].Value = &volumeLabelNames[i], &l.values[i]
		out = append(out, &l.pairs[i])
	}
	return out
}

// volumeMetric is one per-volume gauge of one scrape. The registry treats
// what Write gives as immutable, so its label pairs are shared.
type volumeMetric struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
}

func (m volumeMetric) Desc() *prometheus.Desc { return m.desc }

func (m volumeMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	out.Gauge = &dto.Gauge{Value: &m.value}
	return nil
}

// volumeOf is the record of one volume, made if new; m.mu is held.
func (m *Metrics) volumeOf(namespace, vmi, name string) *volume {
	key := vmiKey{namespace, vmi}
	vols := m.vmis[key]
	if vols == nil {
		vols = make(map[string]*volume)
		m.vmis[key] = vols
	}
	v := vols[name]
	if v == nil {
		v = &volume{}
		vols[name] = v
	}
	return v
}
