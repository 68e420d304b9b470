// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"bytes"
	"context"
	"os"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/hpmount/hpmount/test/cluster"
)

const podMonitorGroupVersion = "monitoring.coreos.com/v1"

// TestServerSideDryRun applies every rendered object to a real
// kube-apiserver with dryRun=All: the server validates and defaults the
// DaemonSet, RBAC and namespace exactly as a cluster would, and persists
// nothing. The namespace is created for real first, because admission
// rejects namespaced objects in a namespace that does not exist.
func TestServerSideDryRun(t *testing.T) {
	c := cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := c.AdminConfig()

	r := render(t, deployPath(t))
	nsYAML, err := yaml.Marshal(r.namespaces[0].DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.ApplyManifests(ctx, admin, nsYAML, false); err != nil {
		t.Fatalf("create namespace: %v", err)
	}

	applied, err := cluster.ApplyManifests(ctx, admin, r.raw, true)
	if err != nil {
		t.Fatalf("server-side dry run of deploy/: %v", err)
	}
	if len(applied) != len(r.unstructured) {
		t.Errorf("dry run answered %d objects, rendered %d", len(applied), len(r.unstructured))
	}
	for _, obj := range applied {
		if obj.GetKind() != "DaemonSet" {
			continue
		}
		// Defaults filled in by the server show the object went through
		// the real validation and defaulting path.
		policy, _, _ := unstructured.NestedString(obj.Object, "spec", "template", "spec", "dnsPolicy")
		if policy == "" {
			t.Errorf("dry-run DaemonSet has no defaulted dnsPolicy: %v", obj.Object["spec"])
		}
	}
	// The dry run is not vacuous: the server rejects an invalid DaemonSet.
	broken := bytes.Replace(r.raw, []byte("mountPropagation: HostToContainer"), []byte("mountPropagation: Sideways"), 1)
	if bytes.Equal(broken, r.raw) {
		t.Fatal("rendered base has no HostToContainer mount to break")
	}
	_, err = cluster.ApplyManifests(ctx, admin, broken, true)
	switch {
	case err == nil:
		t.Error("dry run accepted mountPropagation: Sideways")
	case !apierrors.IsInvalid(err):
		t.Errorf("dry run of an invalid DaemonSet failed, but not as Invalid: %v", err)
	}
	// Dry run persisted nothing.
	if _, err := cluster.ApplyManifests(ctx, admin, r.raw, true); err != nil {
		t.Fatalf("second dry run: %v", err)
	}
	assertNoDaemonSet(ctx, t, admin)

	// The volume-status component's role, binding and flag are valid too.
	vs := render(t, componentOverlay(t, volumeStatusComponent))
	if _, err := cluster.ApplyManifests(ctx, admin, vs.raw, true); err != nil {
		t.Fatalf("server-side dry run with the volume-status component: %v", err)
	}

	// The dashboard ConfigMap, and the chart with every value set (the
	// kinds the API server knows), with the base's Namespace first.
	dash := render(t, componentOverlay(t, "dashboards"))
	if _, err := cluster.ApplyManifests(ctx, admin, dash.raw, true); err != nil {
		t.Fatalf("server-side dry run with the dashboards component: %v", err)
	}
	if _, err := cluster.ApplyManifests(ctx, admin, chartWithEveryValue(t), true); err != nil {
		t.Fatalf("server-side dry run of the chart with every value: %v", err)
	}

	// The PodMonitor needs the Prometheus Operator's CRD, which this
	// control plane does not have: dry-run it only when the CRD is served;
	// otherwise TestMonitoringComponent's parse and selector checks are all
	// that can be checked.
	mon := render(t, monitoringOverlay(t))
	if !servesGroupVersion(t, admin, podMonitorGroupVersion) {
		t.Logf("%s is not served (no Prometheus Operator CRDs): PodMonitor only parsed, not dry-run", podMonitorGroupVersion)
		return
	}
	if _, err := cluster.ApplyManifests(ctx, admin, mon.raw, true); err != nil {
		t.Fatalf("server-side dry run with the monitoring component: %v", err)
	}
}

func assertNoDaemonSet(ctx context.Context, t *testing.T, cfg *rest.Config) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := dc.RESTClient().Get().AbsPath("/apis/apps/v1/namespaces", namespace, "daemonsets", name).Do(ctx)
	if err := res.Error(); !apierrors.IsNotFound(err) {
		t.Errorf("after dry runs, GET DaemonSet %s/%s: %v, want NotFound", namespace, name, err)
	}
}

func servesGroupVersion(t *testing.T, cfg *rest.Config, gv string) bool {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = dc.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("discover %s: %v", gv, err)
	}
	return true
}

// TestRBACMinimal applies deploy/rbac.yaml for real and asks the apiserver,
// as the agent's ServiceAccount (a TokenRequest token), what it may do: what
// the agent needs, and none of the powerful verbs it must not hold.
func TestRBACMinimal(t *testing.T) {
	c := cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := c.AdminConfig()

	if err := c.InstallVMICRD(ctx); err != nil {
		t.Fatal(err)
	}
	r := render(t, deployPath(t))
	nsYAML, err := yaml.Marshal(r.namespaces[0].DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	rbac, err := os.ReadFile(deployPath(t, "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.ApplyManifests(ctx, admin, append(append(nsYAML, "\n---\n"...), rbac...), false); err != nil {
		t.Fatalf("apply namespace and deploy/rbac.yaml: %v", err)
	}
	agent, err := c.ServiceAccountConfig(ctx, namespace, name)
	if err != nil {
		t.Fatal(err)
	}

	const tenant = "tenant-vms" // any namespace VMs run in
	tests := []accessCheck{
		// What the agent needs.
		{"list", "", "pods", "", true},
		{"watch", "", "pods", "", true},
		{"list", "kubevirt.io", "virtualmachineinstances", "", true},
		{"watch", "kubevirt.io", "virtualmachineinstances", "", true},
		{"get", "", "persistentvolumeclaims", tenant, true},
		{"list", "", "persistentvolumeclaims", "", true},
		{"watch", "", "persistentvolumeclaims", "", false},
		{"update", "", "persistentvolumeclaims", tenant, false},
		{"create", "", "events", tenant, true},
		// What it must not be able to do.
		{"delete", "", "pods", tenant, false},
		{"delete", "", "pods", "", false},
		{"create", "", "pods", tenant, false},
		{"get", "", "secrets", tenant, false},
		{"get", "", "secrets", namespace, false},
		{"list", "", "secrets", "", false},
		{"update", "", "nodes", "", false},
		{"list", "", "persistentvolumes", "", false},
		{"delete", "kubevirt.io", "virtualmachineinstances", tenant, false},
		{"update", "kubevirt.io", "virtualmachineinstances", tenant, false},
		// patch only with the volume-status component (below).
		{"patch", "kubevirt.io", "virtualmachineinstances", tenant, false},
		{"patch", "kubevirt.io", "virtualmachineinstances", "", false},
		{"create", "", "pods/exec", tenant, false},
		{"create", "", "serviceaccounts/token", namespace, false},
		{"escalate", "rbac.authorization.k8s.io", "clusterroles", "", false},
		{"bind", "rbac.authorization.k8s.io", "clusterroles", "", false},
	}
	t.Run("base", func(t *testing.T) { checkAccess(ctx, t, agent, tests) })

	// The volume-status component adds patch on VMIs and nothing else.
	vsRBAC, err := os.ReadFile(deployPath(t, volumeStatusComponent, "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.ApplyManifests(ctx, admin, vsRBAC, false); err != nil {
		t.Fatalf("apply deploy/%s/rbac.yaml: %v", volumeStatusComponent, err)
	}
	withStatus := slices.Clone(tests)
	for i, tc := range withStatus {
		if tc.verb == "patch" && tc.resource == "virtualmachineinstances" {
			withStatus[i].want = true
		}
	}
	t.Run("volume-status", func(t *testing.T) { checkAccess(ctx, t, agent, withStatus) })
}

// awaitGrants waits, for at most 30 s, until the API server allows every
// check that tests want allowed. RBAC answers from its own caches of roles
// and bindings, so a review made right after they were applied can still
// be answered from before them: once in CI the storage-view component's
// first grant was denied. RBAC only adds, so once every grant is seen the
// denials are judged on the same roles. A grant that never comes is left to
// its check to report.
func awaitGrants(ctx context.Context, agent *rest.Config, tests []accessCheck) {
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, tc := range tests {
			if !tc.want {
				continue
			}
			if got, err := cluster.CanI(ctx, agent, tc.verb, tc.group, tc.resource, tc.namespace); err != nil || !got {
				return false, nil
			}
		}
		return true, nil
	})
}

// accessCheck is one SelfSubjectAccessReview and its expected answer.
type accessCheck struct {
	verb, group, resource, namespace string
	want                             bool
}

func checkAccess(ctx context.Context, t *testing.T, agent *rest.Config, tests []accessCheck) {
	t.Helper()
	awaitGrants(ctx, agent, tests)
	for _, tc := range tests {
		res := tc.resource
		if tc.group != "" {
			res += "." + tc.group
		}
		where := tc.namespace
		if where == "" {
			where = "cluster"
		}
		t.Run(tc.verb+" "+res+" in "+where, func(t *testing.T) {
			got, err := cluster.CanI(ctx, agent, tc.verb, tc.group, tc.resource, tc.namespace)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("service account %s/%s: can %s %s in %s = %t, want %t", namespace, name, tc.verb, res, where, got, tc.want)
			}
		})
	}
}
