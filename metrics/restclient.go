// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// RESTBuckets are the buckets of the REST client's latency histograms,
// those component-base gives client-go in Kubernetes components.
var RESTBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}

// restFamilies are client-go's REST client families.
type restFamilies struct {
	requests             *prometheus.CounterVec
	latency, rateLimiter *prometheus.HistogramVec
}

func newRESTFamilies() restFamilies {
	hist := func(d Description) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: RESTBuckets}, d.Labels)
	}
	return restFamilies{requests: counterVec(descRESTRequests), latency: hist(descRESTLatency), rateLimiter: hist(descRESTRateLimiter)}
}

func (f restFamilies) collectors() []prometheus.Collector {
	return []prometheus.Collector{f.requests, f.latency, f.rateLimiter}
}

// clientMetrics is the Metrics that client-go's REST client reports to.
// client-go takes its hooks once per process (tools/metrics.Register), so
// they report to whichever Metrics called RegisterClientMetrics last.
var (
	clientMetrics  atomic.Pointer[Metrics]
	registerClient sync.Once
)

// RegisterClientMetrics has client-go's REST client report its requests
// to m: rest_client_requests_total, rest_client_request_duration_seconds
// and rest_client_rate_limiter_duration_seconds. Call it before the first
// client is made.
func (m *Metrics) RegisterClientMetrics() {
	clientMetrics.Store(m)
	registerClient.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency:     restLatency{},
			RateLimiterLatency: restLatency{rateLimiter: true},
			RequestResult:      restResult{},
		})
	})
}

// restLatency observes a request's latency, or with rateLimiter its wait
// for client-go's rate limiter, by host and verb.
type restLatency struct{ rateLimiter bool }

func (l restLatency) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	m := clientMetrics.Load()
	if m == nil {
		return
	}
	h := m.rest.latency
	if l.rateLimiter {
		h = m.rest.rateLimiter
	}
	h.WithLabelValues(u.Host, verb).Observe(latency.Seconds())
}

// restResult counts requests by status code, method and host.
type restResult struct{}

func (restResult) Increment(_ context.Context, code, method, host string) {
	if m := clientMetrics.Load(); m != nil {
		m.rest.requests.WithLabelValues(code, host, method).Inc()
	}
}

var (
	_ clientmetrics.LatencyMetric = restLatency{}
	_ clientmetrics.ResultMetric  = restResult{}
)
