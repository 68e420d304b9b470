// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// TestAgentAsDeployed is issue #12's scenario 6: the agent runs as a pod
// made from the DaemonSet of deploy/ (kustomize render), with the
// manifests' hostPath mounts, securityContext, args, ServiceAccount and
// RBAC, its token projected by the ServiceAccount admission plugin, and
// only the AgentOverrides this node needs (logged). No controller turns the
// DaemonSet into pods here, so the test creates the pod from its template
// with spec.nodeName set. The seed case (scenario 1) then runs with that
// agent: an ext4 and a block volume, read and written by the launcher
// container; /readyz and /metrics are read from the pod on the node's
// network.
func TestAgentAsDeployed(t *testing.T) {
	e := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stopHostAgent()
	bin, err := harness.Binary()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	a, err := e.node.DeployAgent(ctx, bin)
	if a != nil {
		t.Cleanup(func() {
			if err := a.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	if err != nil {
		t.Fatalf("deploy the agent: %v\n%s", err, e.node.Logs(30))
	}
	t.Logf("agent pod %s/%s Ready (its readiness probe passed) %v after create", a.Pod.Namespace, a.Pod.Name, time.Since(began).Round(time.Millisecond))
	for _, o := range a.Overrides {
		t.Logf("override of deploy/: %s (%s)", o.What, o.Why)
	}
	e.agentLog = a.Log
	checkProjectedToken(t, a.Pod)
	if body, err := a.Get(ctx, a.Site.HealthAddr, "/readyz"); err != nil {
		t.Fatalf("/readyz of the agent pod: %v", err)
	} else {
		t.Logf("/readyz on %s: %q", a.Site.HealthAddr, strings.TrimSpace(body))
	}

	v := e.newVM(t, ctx, "deployed", "vm6")
	fs := v.addVolume(t, ctx, "fs", "ext4", 64*mib)
	blk := v.addVolume(t, ctx, "blk", "", 64*mib)
	began = time.Now()
	pod := v.attach(t, ctx, []simnode.Volume{fs, blk}, []simnode.Volume{fs, blk})
	v.importDiskImage(t, ctx, pod, fs)
	v.apply(t, ctx)
	for _, vol := range []simnode.Volume{fs, blk} {
		v.waitReadWrite(t, ctx, vol, "deployed-"+vol.Name)
	}
	t.Logf("the launcher container reads and writes both volumes %v after the attachment pod was created", time.Since(began).Round(time.Millisecond))
	checkAttachMetrics(t, ctx, a)
}

// checkProjectedToken checks the pod carries the token volume the
// ServiceAccount admission plugin adds (serviceAccountToken, the
// kube-root-ca.crt ConfigMap, the namespace), mounted where in-cluster
// config reads it.
func checkProjectedToken(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	for _, vol := range pod.Spec.Volumes {
		if vol.Projected == nil || !strings.HasPrefix(vol.Name, "kube-api-access-") {
			continue
		}
		var token, ca bool
		for _, src := range vol.Projected.Sources {
			token = token || src.ServiceAccountToken != nil
			ca = ca || src.ConfigMap != nil && src.ConfigMap.Name == RootCAConfigMap
		}
		if !token || !ca {
			t.Fatalf("projected volume %s lacks the token (%t) or %s (%t)", vol.Name, token, RootCAConfigMap, ca)
		}
		t.Logf("service account %s, token projected in volume %s by the admission plugin", pod.Spec.ServiceAccountName, vol.Name)
		return
	}
	t.Fatalf("pod %s has no kube-api-access volume: %+v", pod.Name, pod.Spec.Volumes)
}

// checkAttachMetrics reads /metrics from the pod and wants the two
// attaches counted.
func checkAttachMetrics(t *testing.T, ctx context.Context, a *DeployedAgent) {
	t.Helper()
	err := harness.Eventually(ctx, "attaches in /metrics", 30*time.Second, func() error {
		body, err := a.Get(ctx, a.Site.MetricsAddr, "/metrics")
		if err != nil {
			return err
		}
		ops, err := harness.Counters(body, "hpmount_mount_operations_total")
		if err != nil {
			return err
		}
		mounted, created := ops[`op="attach",result="mounted"`], ops[`op="attach",result="created"`]
		if mounted < 1 || created < 1 {
			return fmt.Errorf("attach mounted %v (fs) and created %v (block node), want ≥ 1 each", mounted, created)
		}
		t.Logf("/metrics on %s: hpmount_mount_operations_total attach mounted %v, created %v", a.Site.MetricsAddr, mounted, created)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
