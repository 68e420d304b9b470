// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodRunsAndExecs: a busybox pod really runs on the node, and Exec
// through the API server returns what the container prints.
func TestPodRunsAndExecs(t *testing.T) {
	e := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := e.namespace(t, ctx, "smoke")
	pod := BusyboxPod(ns, "busybox", testNode)
	began := time.Now()
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := WaitRunning(ctx, e.kube, ns, pod.Name); err != nil {
		t.Fatalf("%v\n%s", err, e.node.Logs(30))
	}
	t.Logf("pod running after %v", time.Since(began).Round(time.Millisecond))
	checkMarked(t, e)
	out, err := Exec(ctx, e.admin, ns, pod.Name, "main", "sh", "-c", "echo hello from $(hostname)")
	if err != nil {
		t.Fatalf("%v\n%s", err, e.node.Logs(30))
	}
	if got, want := strings.TrimSpace(out), "hello from busybox"; got != want {
		t.Fatalf("exec printed %q, want %q", got, want)
	}
}
