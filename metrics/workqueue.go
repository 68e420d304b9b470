// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// WorkqueueProvider returns the agent's queues' metrics provider: how deep
// each queue is, how much goes in, how often keys are retried and how long
// they wait. On a busy node these say whether the agent keeps up.
func (m *Metrics) WorkqueueProvider() workqueue.MetricsProvider { return queueMetrics{m} }

type queueMetrics struct{ m *Metrics }

var _ workqueue.MetricsProvider = queueMetrics{}

func (q queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.m.queueDepth.WithLabelValues(name)
}

func (q queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.m.queueAdds.WithLabelValues(name)
}

func (q queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.m.queueWait.WithLabelValues(name)
}

func (q queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.m.queueRetries.WithLabelValues(name)
}

// The work duration is hpmount_reconcile_duration_seconds already; the
// rest is not exported.
func (queueMetrics) NewWorkDurationMetric(string) workqueue.HistogramMetric { return noop{} }

func (queueMetrics) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noop{}
}

func (queueMetrics) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noop{}
}

type noop struct{}

func (noop) Set(float64)     {}
func (noop) Observe(float64) {}

var (
	_ workqueue.GaugeMetric     = prometheus.Gauge(nil)
	_ workqueue.HistogramMetric = prometheus.Observer(nil)
)
