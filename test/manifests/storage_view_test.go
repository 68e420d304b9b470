// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/hpmount/hpmount/test/cluster"
)

// storageViewComponent is the folder, under deploy/, of the optional
// component granting diag's storage-side reads.
const storageViewComponent = "storage-view"

// storageViewRules are exactly the reads diag's storage side makes.
var storageViewRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"get", "list"}},
	{APIGroups: []string{"longhorn.io"}, Resources: []string{"volumes", "volumeattachments"}, Verbs: []string{"get", "list"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}},
}

// TestStorageViewComponent renders the base and the storage-view overlay:
// the component adds one ClusterRole with exactly storageViewRules and its
// binding to the agent's ServiceAccount, and changes nothing else (the
// DaemonSet's args stay the base's: the agent never reads these objects).
func TestStorageViewComponent(t *testing.T) {
	base := render(t, deployPath(t))
	r := render(t, componentOverlay(t, storageViewComponent))
	want := append(base.kinds(), "ClusterRole/hpmount-storage-view", "ClusterRoleBinding/hpmount-storage-view")
	slices.Sort(want)
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Fatalf("storage-view overlay renders %v, want %v", got, want)
	}
	baseArgs := base.daemonSets[0].Spec.Template.Spec.Containers[0].Args
	if got := r.daemonSets[0].Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, baseArgs) {
		t.Errorf("args %q, want the base's %q", got, baseArgs)
	}
	for _, role := range r.roles {
		if role.Name != "hpmount-storage-view" {
			continue
		}
		if !slices.EqualFunc(role.Rules, storageViewRules, func(a, b rbacv1.PolicyRule) bool {
			return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
				slices.Equal(a.Verbs, b.Verbs) && len(a.ResourceNames) == 0 && len(a.NonResourceURLs) == 0
		}) {
			t.Errorf("ClusterRole hpmount-storage-view rules %+v, want only %+v", role.Rules, storageViewRules)
		}
	}
	sa := r.accounts[0]
	for _, b := range r.bindings {
		if b.Name != "hpmount-storage-view" {
			continue
		}
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != "hpmount-storage-view" ||
			len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != sa.Name || b.Subjects[0].Namespace != sa.Namespace {
			t.Errorf("binding %+v, want ClusterRole hpmount-storage-view for ServiceAccount %s/%s only", b, sa.Namespace, sa.Name)
		}
	}
	// With the other components too, everything renders side by side.
	all := render(t, componentOverlay(t, "monitoring", volumeStatusComponent, storageViewComponent))
	if got, want := len(all.roles), len(base.roles)+2; got != want {
		t.Errorf("with every component: %d ClusterRoles, want %d", got, want)
	}
}

// TestStorageViewRBAC dry-runs the storage-view overlay against a real
// kube-apiserver and asks it (SelfSubjectAccessReviews as the agent's
// ServiceAccount) what the base and the component allow: the base reads
// none of the storage side, the component exactly get and list, never
// watch or a write.
func TestStorageViewRBAC(t *testing.T) {
	c := cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := c.AdminConfig()

	r := render(t, componentOverlay(t, storageViewComponent))
	nsYAML, err := yaml.Marshal(r.namespaces[0].DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.ApplyManifests(ctx, admin, nsYAML, false); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if _, err := cluster.ApplyManifests(ctx, admin, r.raw, true); err != nil {
		t.Fatalf("server-side dry run with the storage-view component: %v", err)
	}
	rbac, err := os.ReadFile(deployPath(t, "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.ApplyManifests(ctx, admin, rbac, false); err != nil {
		t.Fatalf("apply deploy/rbac.yaml: %v", err)
	}
	agent, err := c.ServiceAccountConfig(ctx, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	var reads, never []accessCheck
	for _, res := range []struct{ group, resource string }{
		{"storage.k8s.io", "volumeattachments"}, {"longhorn.io", "volumes"}, {"longhorn.io", "volumeattachments"},
	} {
		ns := ""
		if res.group == "longhorn.io" {
			ns = "longhorn-system"
		}
		for _, verb := range []string{"get", "list"} {
			reads = append(reads, accessCheck{verb, res.group, res.resource, ns, true})
		}
		for _, verb := range []string{"watch", "create", "update", "patch", "delete"} {
			never = append(never, accessCheck{verb, res.group, res.resource, ns, false})
		}
	}
	never = append(never, accessCheck{"update", "storage.k8s.io", "volumeattachments/status", "", false},
		accessCheck{"list", "longhorn.io", "nodes", "longhorn-system", false},
		accessCheck{"list", "", "persistentvolumes", "", false})
	denied := slices.Clone(reads)
	for i := range denied {
		denied[i].want = false
	}
	t.Run("base", func(t *testing.T) { checkAccess(ctx, t, agent, append(denied, never...)) })

	component, err := os.ReadFile(deployPath(t, storageViewComponent, "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.ApplyManifests(ctx, admin, component, false); err != nil {
		t.Fatalf("apply deploy/%s/rbac.yaml: %v", storageViewComponent, err)
	}
	t.Run("storage-view", func(t *testing.T) { checkAccess(ctx, t, agent, append(reads, never...)) })
}
