// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// QueueBuckets are the buckets of the work queues' histograms, those
// component-base gives client-go's queues in Kubernetes components: 10ns
// to 1000s by powers of ten.
var QueueBuckets = prometheus.ExponentialBuckets(10e-9, 10, 12)

// queueFamilies are client-go's work-queue families, by queue name.
type queueFamilies struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	wait, work                 *prometheus.HistogramVec
}

func newQueueFamilies() queueFamilies {
	hist := func(d Description) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.Name, Help: d.Help, Buckets: QueueBuckets}, d.Labels)
	}
	f := queueFamilies{depth: gaugeVec(descQueueDepth), unfinished: gaugeVec(descQueueUnfinished),
		longest: gaugeVec(descQueueLongest), adds: counterVec(descQueueAdds), retries: counterVec(descQueueRetries),
		wait: hist(descQueueWait), work: hist(descQueueWork)}
	// The agent's queues are exposed from the start at 0.
	for _, q := range []string{QueueReconcile, QueueStatus} {
		f.depth.WithLabelValues(q)
		f.unfinished.WithLabelValues(q)
		f.longest.WithLabelValues(q)
		f.adds.WithLabelValues(q)
		f.retries.WithLabelValues(q)
		f.wait.WithLabelValues(q)
		f.work.WithLabelValues(q)
	}
	return f
}

func (f queueFamilies) collectors() []prometheus.Collector {
	return []prometheus.Collector{f.depth, f.adds, f.retries, f.wait, f.work, f.unfinished, f.longest}
}

// WorkqueueProvider returns the agent's queues' metrics provider: how deep
// each queue is, how much goes in, how often keys are retried, how long
// they wait and take. On a busy node these say whether the agent keeps up.
func (m *Metrics) WorkqueueProvider() workqueue.MetricsProvider { return queueMetrics{m.queues} }

type queueMetrics struct{ f queueFamilies }

var _ workqueue.MetricsProvider = queueMetrics{}

func (q queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.f.depth.WithLabelValues(name)
}

func (q queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.f.adds.WithLabelValues(name)
}

func (q queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.f.wait.WithLabelValues(name)
}

func (q queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.f.work.WithLabelValues(name)
}

func (q queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.f.unfinished.WithLabelValues(name)
}

func (q queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.f.longest.WithLabelValues(name)
}

func (q queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.f.retries.WithLabelValues(name)
}

var (
	_ workqueue.GaugeMetric         = prometheus.Gauge(nil)
	_ workqueue.SettableGaugeMetric = prometheus.Gauge(nil)
	_ workqueue.HistogramMetric     = prometheus.Observer(nil)
)
