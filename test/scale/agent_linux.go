// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/hpmount/hpmount/test/harness"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"
)

// agent is one run of the hpmount binary as the scale node's agent.
type agent struct {
	*harness.Agent
	metrics string
	started time.Time
	cmd     *exec.Cmd
	done    <-chan struct{}
}

// startAgent runs the agent with this process's namespace as its host.
func (e *env) startAgent(resync time.Duration) (*agent, error) {
	return e.startAgentWith(e.agentKC, resync)
}

// startAgentWith starts the agent with the kubeconfig kc.
func (e *env) startAgentWith(kc string, resync time.Duration) (*agent, error) {
	log, err := os.OpenFile(e.agentLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	a, err := harness.StartAgent(harness.AgentOptions{Binary: e.opts.binary, Kubeconfig: kc, Node: e.node,
		Resync: resync, Args: e.opts.agentArgs, Log: log})
	if err != nil {
		return nil, err
	}
	return &agent{Agent: a, metrics: a.MetricsAddr, started: a.Started, cmd: a.Cmd, done: a.Done()}, nil
}

// stop ends the agent with SIGTERM, as the kubelet does; mounts stay.
func (a *agent) stop() { a.Stop() }

func (a *agent) ready() bool { return a.Ready() == nil }

// scrapeClient asks for the metrics uncompressed: the harness polls far
// more often than Prometheus, and gzip would cost the agent's CPU, not the
// harness's.
var scrapeClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// scrape reads the agent's metrics.
func (a *agent) scrape() (metrics, error) {
	resp, err := scrapeClient.Get("http://" + a.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.Reader(resp.Body))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return metrics(fams), nil
}

// metrics is one scrape.
type metrics map[string]*dto.MetricFamily

// sum adds the values of the family's series whose labels match.
func (m metrics) sum(name string, labels map[string]string) float64 {
	f := m[name]
	if f == nil {
		return 0
	}
	var total float64
	for _, s := range f.GetMetric() {
		if !matches(s, labels) {
			continue
		}
		switch {
		case s.Gauge != nil:
			total += s.GetGauge().GetValue()
		case s.Counter != nil:
			total += s.GetCounter().GetValue()
		}
	}
	return total
}

func matches(s *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, l := range s.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// hist is a histogram's count, sum and cumulative buckets.
type hist struct {
	count   uint64
	sum     float64
	buckets []*dto.Bucket
}

func (m metrics) hist(name string) hist {
	var h hist
	f := m[name]
	if f == nil {
		return h
	}
	for _, s := range f.GetMetric() {
		x := s.GetHistogram()
		h.count += x.GetSampleCount()
		h.sum += x.GetSampleSum()
		if h.buckets == nil {
			for _, b := range x.GetBucket() {
				h.buckets = append(h.buckets, &dto.Bucket{UpperBound: b.UpperBound, CumulativeCount: new(uint64)})
			}
		}
		for i, b := range x.GetBucket() {
			*h.buckets[i].CumulativeCount += b.GetCumulativeCount()
		}
	}
	return h
}

// minus is the histogram of what happened between an earlier scrape and
// this one.
func (h hist) minus(old hist) hist {
	d := hist{count: h.count - old.count, sum: h.sum - old.sum}
	for i, b := range h.buckets {
		c := b.GetCumulativeCount()
		if i < len(old.buckets) {
			c -= old.buckets[i].GetCumulativeCount()
		}
		d.buckets = append(d.buckets, &dto.Bucket{UpperBound: b.UpperBound, CumulativeCount: &c})
	}
	return d
}

func (h hist) mean() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / float64(h.count)
}

// quantile estimates quantile q by linear interpolation inside the bucket
// that holds it, as Prometheus's histogram_quantile does.
func (h hist) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	rank := q * float64(h.count)
	lower, below := 0.0, 0.0
	for _, b := range h.buckets {
		c := float64(b.GetCumulativeCount())
		if c >= rank {
			if c == below {
				return b.GetUpperBound()
			}
			return lower + (b.GetUpperBound()-lower)*(rank-below)/(c-below)
		}
		lower, below = b.GetUpperBound(), c
	}
	return lower
}

// profile saves the agent's CPU profile over d to path.
func (a *agent) profile(path string, d time.Duration) error {
	return a.save(path, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", a.metrics, int(d.Seconds())))
}

// startProfile saves the agent's CPU profile of its first d, asked for as
// soon as its metrics endpoint answers.
func (a *agent) startProfile(path string, d time.Duration) error {
	for time.Since(a.started) < d {
		if err := a.profile(path, d); err == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("the agent's metrics endpoint did not answer within %s", d)
}

// heapProfile saves the agent's heap profile to path.
func (a *agent) heapProfile(path string) error {
	return a.save(path, fmt.Sprintf("http://%s/debug/pprof/heap", a.metrics))
}

func (a *agent) save(path, url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
