// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// volumeStatusComponent is the folder, under deploy/, of the component that
// turns on --report-volume-status and grants the patch on VMIs it needs.
const volumeStatusComponent = "volume-status"

// componentOverlay writes an overlay outside deploy/ that uses the base and
// the given components of deploy/, as deploy/README.md tells users to.
func componentOverlay(t *testing.T, components ...string) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Rel(dir, deployPath(t))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%q]\ncomponents:\n", base)
	for _, c := range components {
		k += fmt.Sprintf("  - %q\n", filepath.Join(base, c))
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// grantsVMIPatch reports whether a rule of role allows patch on VMIs.
func grantsVMIPatch(role rbacv1.ClusterRole) bool {
	return slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		return (slices.Contains(r.APIGroups, "kubevirt.io") || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, "virtualmachineinstances") || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Verbs, "patch") || slices.Contains(r.Verbs, "*"))
	})
}

// TestVolumeStatusComponent holds the RBAC split of issue #13: the base
// neither sets --report-volume-status nor grants patch on VMIs; the
// volume-status component adds exactly the flag and a role granting only
// that patch, bound to the agent's ServiceAccount. TestRBACMinimal asks the
// apiserver the same questions with SelfSubjectAccessReviews.
func TestVolumeStatusComponent(t *testing.T) {
	base := render(t, deployPath(t))
	for _, role := range base.roles {
		if grantsVMIPatch(role) {
			t.Errorf("base ClusterRole %q grants patch on VMIs; only the %s component may", role.Name, volumeStatusComponent)
		}
	}
	if args := base.daemonSets[0].Spec.Template.Spec.Containers[0].Args; slices.Contains(args, "--report-volume-status") {
		t.Errorf("base DaemonSet sets --report-volume-status without the role it needs: %q", args)
	}

	r := render(t, componentOverlay(t, volumeStatusComponent))
	want := append(base.kinds(), "ClusterRole/hpmount-volume-status", "ClusterRoleBinding/hpmount-volume-status")
	slices.Sort(want)
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Fatalf("volume-status overlay renders %v, want %v", got, want)
	}
	wantArgs := append(slices.Clone(base.daemonSets[0].Spec.Template.Spec.Containers[0].Args), "--report-volume-status")
	if got := r.daemonSets[0].Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, wantArgs) {
		t.Errorf("args %q, want %q", got, wantArgs)
	}
	for _, role := range r.roles {
		if role.Name != "hpmount-volume-status" {
			continue
		}
		wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances"}, Verbs: []string{"patch"}}}
		if !slices.EqualFunc(role.Rules, wantRules, func(a, b rbacv1.PolicyRule) bool {
			return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
				slices.Equal(a.Verbs, b.Verbs) && len(a.ResourceNames) == 0 && len(a.NonResourceURLs) == 0
		}) {
			t.Errorf("ClusterRole hpmount-volume-status rules %+v, want only %+v", role.Rules, wantRules)
		}
	}
	sa := r.accounts[0]
	for _, b := range r.bindings {
		if b.Name != "hpmount-volume-status" {
			continue
		}
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != "hpmount-volume-status" {
			t.Errorf("binding refers to %s %q", b.RoleRef.Kind, b.RoleRef.Name)
		}
		if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != sa.Name || b.Subjects[0].Namespace != sa.Namespace {
			t.Errorf("binding subjects %+v, want only ServiceAccount %s/%s", b.Subjects, sa.Namespace, sa.Name)
		}
	}

	// With the monitoring component too, both apply without conflict.
	both := render(t, componentOverlay(t, "monitoring", volumeStatusComponent))
	if got := both.daemonSets[0].Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, wantArgs) {
		t.Errorf("with monitoring: args %q, want %q", got, wantArgs)
	}
}
