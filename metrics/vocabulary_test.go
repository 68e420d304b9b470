// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// lineWith returns the first line of text that contains marker.
func lineWith(t *testing.T, text, marker string) string {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, marker) {
			return l
		}
	}
	t.Fatalf("no line with %q", marker)
	return ""
}

// paragraphWith returns the lines of text from the first that starts with
// marker up to the next blank line or list item: one bullet of a Markdown
// list, however it is wrapped.
func paragraphWith(t *testing.T, text, marker string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, marker) {
			continue
		}
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "" && !strings.HasPrefix(lines[end], "- ") {
			end++
		}
		return strings.Join(lines[i:end], " ")
	}
	t.Fatalf("no line starts with %q", marker)
	return ""
}

// TestVocabularyDocumented holds doc.go's table, the metric table of
// docs/metrics.md and ARCHITECTURE.md's vocabulary to the one vocabulary:
// every op, result and refusal reason the code can report is named where
// operators and developers read about it.
func TestVocabularyDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	arch, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for _, op := range outcome.Ops {
		words = append(words, string(op))
	}
	for _, r := range outcome.Results {
		words = append(words, string(r))
	}
	for _, tc := range []struct {
		where, line, quote string
		words              []string
	}{
		{"doc.go", lineWith(t, string(doc), "//\thpmount_mount_operations_total"), "", words},
		{"docs/metrics.md", lineWith(t, string(readme), "| `hpmount_mount_operations_total`"), "`", words},
		{"docs/metrics.md", lineWith(t, string(readme), "| `hpmount_refusals_total`"), "`", kubevirt.RefusalReasons},
		{"doc.go", lineWith(t, string(doc), "//\thpmount_migration_events_total"), "", agent.MigrationEvents},
		{"docs/metrics.md", lineWith(t, string(readme), "| `hpmount_migration_events_total`"), "`", agent.MigrationEvents},
		{"doc.go", lineWith(t, string(doc), "//\thpmount_attach_phase_seconds"), "", agent.AttachPhases},
		{"docs/metrics.md", lineWith(t, string(readme), "| `hpmount_attach_phase_seconds`"), "`", agent.AttachPhases},
		{"ARCHITECTURE.md", paragraphWith(t, string(arch), "- `outcome.Op` ("), "`", words},
		{"ARCHITECTURE.md", paragraphWith(t, string(arch), "- `kubevirt.RefusalReasons`"), "`", kubevirt.RefusalReasons},
	} {
		for _, w := range tc.words {
			if !strings.Contains(tc.line, tc.quote+w+tc.quote) {
				t.Errorf("%s: the line %q does not name %q", tc.where, tc.line, w)
			}
		}
	}
}

// TestVocabularyPreregistered checks that every op/result pair and every
// refusal reason is a series from the start, so that rate() and alerts see
// 0 before the first event.
func TestVocabularyPreregistered(t *testing.T) {
	m := New("dev", "none")
	if got, want := testutil.CollectAndCount(m.ops), len(outcome.Ops)*len(outcome.Results); got != want {
		t.Errorf("%d hpmount_mount_operations_total series, want %d", got, want)
	}
	if got, want := testutil.CollectAndCount(m.refusals), len(kubevirt.RefusalReasons); got != want {
		t.Errorf("%d hpmount_refusals_total series, want %d", got, want)
	}
	if got, want := testutil.CollectAndCount(m.attachPhase), len(agent.AttachPhases); got != want {
		t.Errorf("%d hpmount_attach_phase_seconds series, want %d", got, want)
	}
	if got, want := testutil.CollectAndCount(m.migrations), len(agent.MigrationEvents); got != want {
		t.Errorf("%d hpmount_migration_events_total series, want %d", got, want)
	}
}

func TestWorkqueueProvider(t *testing.T) {
	m := New("dev", "none")
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: QueueReconcile, MetricsProvider: m.WorkqueueProvider()})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	if got := testutil.ToFloat64(m.queues.depth.WithLabelValues(QueueReconcile)); got != 2 {
		t.Errorf("depth = %v, want 2", got)
	}
	k, _ := q.Get()
	q.AddRateLimited(k)
	q.Done(k)
	if got := testutil.ToFloat64(m.queues.retries.WithLabelValues(QueueReconcile)); got != 1 {
		t.Errorf("retries = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.queues.adds.WithLabelValues(QueueReconcile)); got != 2 {
		t.Errorf("adds = %v, want 2", got)
	}
	if got := histogramCount(t, m.queues.work.WithLabelValues(QueueReconcile)); got != 1 {
		t.Errorf("work durations observed = %d, want 1", got)
	}
}

// TestRESTClientMetrics: a real client-go request to a test server is
// counted under client-go's names, on the registry of the Metrics that
// registered last.
func TestRESTClientMetrics(t *testing.T) {
	old := New("dev", "none")
	old.RegisterClientMetrics()
	m := New("dev", "none")
	m.RegisterClientMetrics()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`))
	}))
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	if got := testutil.ToFloat64(m.rest.requests.WithLabelValues("200", host, "GET")); got != 1 {
		t.Errorf("rest_client_requests_total{code=200,method=GET} = %v, want 1", got)
	}
	if got := histogramCount(t, m.rest.latency.WithLabelValues(host, "GET")); got != 1 {
		t.Errorf("rest_client_request_duration_seconds observed %d requests, want 1", got)
	}
	if got := testutil.CollectAndCount(old.rest.requests); got != 0 {
		t.Errorf("the first Metrics got %d series after another registered", got)
	}
}

// histogramCount is how many observations o (a histogram) holds.
func histogramCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var out dto.Metric
	if err := o.(prometheus.Metric).Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount()
}
