// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// rssRow is a BENCHMARKS.md row of the agent's measured resident memory,
// e.g. "| agent RSS, 500 VMIs (2000 volumes): high-water mark ... | 70.11 MiB |"
// (the report keeps two decimals below 100).
var rssRow = regexp.MustCompile(`(?m)^\| agent RSS, [^|]*\| (\d+(?:\.\d+)?) MiB \|`)

// memoryFitsBenchmarks holds the agent's memory to what BENCHMARKS.md
// measured: the request covers the largest measured use (so the scheduler
// reserves what a full node takes) and the limit leaves at least as much
// again above it (GOMEMLIMIT follows the limit; an OOM kill drops every
// reconcile in flight).
func memoryFitsBenchmarks(t *testing.T, r corev1.ResourceRequirements) error {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployPath(t), "..", "BENCHMARKS.md"))
	if err != nil {
		return err
	}
	var peak int64
	for _, m := range rssRow.FindAllSubmatch(data, -1) {
		mib, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			return err
		}
		peak = max(peak, int64(math.Ceil(mib*(1<<20))))
	}
	if peak == 0 {
		return fmt.Errorf("BENCHMARKS.md has no %q row", "agent RSS")
	}
	req, limit := r.Requests.Memory(), r.Limits.Memory()
	if req.Value() < peak {
		return fmt.Errorf("memory request %s is below the measured peak %s (BENCHMARKS.md)", req, resource.NewQuantity(peak, resource.BinarySI))
	}
	if limit.Value() < 2*peak {
		return fmt.Errorf("memory limit %s leaves less than the measured peak %s of headroom above it", limit, resource.NewQuantity(peak, resource.BinarySI))
	}
	return nil
}
