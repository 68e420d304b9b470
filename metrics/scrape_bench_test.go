// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hpmount/hpmount/agent"
)

// BenchmarkScrape1000Volumes is one Prometheus scrape of an agent with
// 250 VMIs of four volumes, each with its state and sizes: what a node
// pays every scrape interval.
func BenchmarkScrape1000Volumes(b *testing.B) {
	m := New("dev", "none")
	for v := range 250 {
		vmi := fmt.Sprintf("vm-%03d", v)
		for d := range 4 {
			vol := fmt.Sprintf("disk-%d", d)
			m.VolumeState("default", vmi, vol, "Filesystem", agent.StateMounted)
			m.VolumeSizes("default", vmi, vol, agent.GrowResult{DeviceBytes: 10 << 30, FilesystemAfter: 10 << 30, DiskImageAfter: 9 << 30})
			m.VolumeStaleOpen("default", vmi, vol, false)
		}
	}
	h := m.Handler()
	req := httptest.NewRequest("GET", "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(discardWriter{http.Header{}}, req)
	}
}

// discardWriter is a response that goes nowhere, as a server streams it:
// a recorder would add the growth of its buffer to each scrape.
type discardWriter struct{ h http.Header }

func (w discardWriter) Header() http.Header         { return w.h }
func (w discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w discardWriter) WriteHeader(int)             {}
