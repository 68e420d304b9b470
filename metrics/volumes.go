// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package metrics

import "github.com/prometheus/client_golang/prometheus"

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
			send := func(d *prometheus.Desc, value float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, value, k.namespace, k.name, name)
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
