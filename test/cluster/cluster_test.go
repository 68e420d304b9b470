// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const rbacManifest = `
# The namespace comes last on purpose: ApplyManifests applies it first.
apiVersion: v1
kind: ServiceAccount
metadata:
  name: vmi-reader
  namespace: e2e-rbac
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-vmi-reader
rules:
  - apiGroups: ["kubevirt.io"]
    resources: ["virtualmachineinstances"]
    verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: e2e-vmi-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: e2e-vmi-reader
subjects:
  - kind: ServiceAccount
    name: vmi-reader
    namespace: e2e-rbac
---
apiVersion: v1
kind: Namespace
metadata:
  name: e2e-rbac
`

const workloadManifest = `
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: dry-agent
  namespace: e2e-dry
spec:
  selector:
    matchLabels: {app: dry-agent}
  template:
    metadata:
      labels: {app: dry-agent}
    spec:
      hostPID: true
      containers:
        - name: agent
          image: example.invalid/hpmount:dev
          securityContext:
            privileged: true
          volumeMounts:
            - name: pods
              mountPath: /var/lib/kubelet/pods
              mountPropagation: Bidirectional
      volumes:
        - name: pods
          hostPath:
            path: /var/lib/kubelet/pods
            type: Directory
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: dry-web
  namespace: e2e-dry
spec:
  replicas: 2
  selector:
    matchLabels: {app: dry-web}
  template:
    metadata:
      labels: {app: dry-web}
    spec:
      containers:
        - name: web
          image: example.invalid/web:dev
`

func newVMI(namespace, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1",
		"kind":       "VirtualMachineInstance",
		"metadata": map[string]any{
			"name":      name,
			"namespace": namespace,
			"labels":    map[string]any{"kubevirt.io/nodeName": "node-a"},
		},
		"spec": map[string]any{
			"volumes": []any{map[string]any{
				"name":                  "hp1",
				"persistentVolumeClaim": map[string]any{"claimName": "pvc-1", "hotpluggable": true},
			}},
		},
	}}
}

func TestControlPlane(t *testing.T) {
	c := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	admin := c.AdminConfig()
	began := time.Now()
	if err := c.InstallVMICRD(ctx); err != nil {
		t.Fatalf("install VMI CRD: %v\n%s", err, c.Logs(20))
	}
	t.Logf("VMI CRD established in %v", time.Since(began).Round(time.Millisecond))
	// A second install is a no-op apply.
	if err := c.InstallVMICRD(ctx); err != nil {
		t.Fatalf("install VMI CRD again: %v", err)
	}
	dyn, err := dynamic.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyManifests(ctx, admin, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: vms}\n"), false); err != nil {
		t.Fatal(err)
	}
	vmis := dyn.Resource(VMIResource).Namespace("vms")
	if _, err := vmis.Create(ctx, newVMI("vms", "vm1"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VMI: %v", err)
	}

	t.Run("vmi has no status subresource", func(t *testing.T) {
		_, err := vmis.Get(ctx, "vm1", metav1.GetOptions{}, "status")
		if !apierrors.IsNotFound(err) {
			t.Errorf("GET .../vm1/status: got %v, want 404 NotFound", err)
		}
		patch := []byte(`{"status":{"phase":"Running"}}`)
		_, err = vmis.Patch(ctx, "vm1", types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		if !apierrors.IsNotFound(err) {
			t.Errorf("PATCH .../vm1/status: got %v, want 404 NotFound", err)
		}
		// Status is written through the object itself, as KubeVirt does.
		got, err := vmis.Patch(ctx, "vm1", types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("patch VMI status through the object: %v", err)
		}
		if phase, _, _ := unstructured.NestedString(got.Object, "status", "phase"); phase != "Running" {
			t.Errorf("status.phase = %q after patching the object, want Running", phase)
		}
	})

	t.Run("service account rbac", func(t *testing.T) {
		if _, err := ApplyManifests(ctx, admin, []byte(rbacManifest), false); err != nil {
			t.Fatalf("apply RBAC: %v", err)
		}
		sa, err := c.ServiceAccountConfig(ctx, "e2e-rbac", "vmi-reader")
		if err != nil {
			t.Fatalf("service account config: %v", err)
		}
		saDyn, err := dynamic.NewForConfig(sa)
		if err != nil {
			t.Fatal(err)
		}
		list, err := saDyn.Resource(VMIResource).List(ctx, metav1.ListOptions{LabelSelector: "kubevirt.io/nodeName=node-a"})
		if err != nil {
			t.Fatalf("list VMIs as the service account: %v", err)
		}
		if len(list.Items) != 1 || list.Items[0].GetName() != "vm1" {
			t.Errorf("listed %d VMIs, want exactly vm1", len(list.Items))
		}
		w, err := saDyn.Resource(VMIResource).Namespace("vms").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Errorf("watch VMIs as the service account: %v", err)
		} else {
			w.Stop()
		}
		saCS, err := kubernetes.NewForConfig(sa)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := saCS.CoreV1().Secrets("vms").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list secrets as the service account: got %v, want Forbidden", err)
		}
		_, err = saDyn.Resource(VMIResource).Namespace("vms").Patch(ctx, "vm1", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("patch VMI as the service account: got %v, want Forbidden", err)
		}

		tests := []struct {
			verb, group, resource, namespace string
			want                             bool
		}{
			{"list", "kubevirt.io", "virtualmachineinstances", "", true},
			{"watch", "kubevirt.io", "virtualmachineinstances", "vms", true},
			{"get", "kubevirt.io", "virtualmachineinstances", "vms", true},
			{"patch", "kubevirt.io", "virtualmachineinstances", "vms", false},
			{"list", "", "secrets", "vms", false},
			{"get", "", "pods", "", false},
			{"create", "", "events", "vms", false},
		}
		for _, tt := range tests {
			t.Run(tt.verb+" "+tt.resource, func(t *testing.T) {
				got, err := CanI(ctx, sa, tt.verb, tt.group, tt.resource, tt.namespace)
				if err != nil {
					t.Fatal(err)
				}
				if got != tt.want {
					t.Errorf("CanI(%s %s.%s in %q) = %t, want %t", tt.verb, tt.resource, tt.group, tt.namespace, got, tt.want)
				}
			})
		}
		if ok, err := CanI(ctx, admin, "delete", "", "secrets", "kube-system"); err != nil || !ok {
			t.Errorf("CanI as admin = %t, %v; want true", ok, err)
		}
	})

	t.Run("dry run creates nothing", func(t *testing.T) {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "e2e-dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("namespace e2e-dry before the test: %v", err)
		}
		// Admission rejects objects in a namespace that does not exist, even
		// in a dry run that also applies the namespace.
		withNS := "apiVersion: v1\nkind: Namespace\nmetadata: {name: e2e-dry}\n---\n" + workloadManifest
		if _, err := ApplyManifests(ctx, admin, []byte(withNS), true); !apierrors.IsNotFound(err) {
			t.Errorf("dry run into a missing namespace: got %v, want NotFound", err)
		}
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "e2e-dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("namespace e2e-dry after a dry run: got %v, want NotFound", err)
		}

		if _, err := ApplyManifests(ctx, admin, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: e2e-dry}\n"), false); err != nil {
			t.Fatal(err)
		}
		out, err := ApplyManifests(ctx, admin, []byte(workloadManifest), true)
		if err != nil {
			t.Fatalf("dry-run apply: %v", err)
		}
		if len(out) != 2 {
			t.Fatalf("dry run returned %d objects, want 2", len(out))
		}
		// The server defaulted what it would have stored.
		if s, _, _ := unstructured.NestedString(out[0].Object, "spec", "updateStrategy", "type"); s != "RollingUpdate" {
			t.Errorf("dry-run DaemonSet updateStrategy.type = %q, want the server default RollingUpdate", s)
		}
		if _, err := cs.AppsV1().DaemonSets("e2e-dry").Get(ctx, "dry-agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("DaemonSet after dry run: got %v, want NotFound", err)
		}
		if _, err := cs.AppsV1().Deployments("e2e-dry").Get(ctx, "dry-web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Deployment after dry run: got %v, want NotFound", err)
		}
	})

	t.Run("kubeconfig", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := WriteKubeconfig(path, admin); err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatalf("load kubeconfig: %v", err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "vms", metav1.GetOptions{}); err != nil {
			t.Errorf("get namespace through the kubeconfig: %v", err)
		}
	})
}

func TestStartProcessWithoutTools(t *testing.T) {
	dir := t.TempDir()
	_, err := StartProcess(context.Background(), Options{ToolsDir: dir, WorkDir: t.TempDir()})
	if !errors.Is(err, ErrToolsMissing) {
		t.Fatalf("StartProcess with empty tools dir: got %v, want ErrToolsMissing", err)
	}
	if !strings.Contains(err.Error(), "test/tools/build.sh") || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q should name the missing binary and test/tools/build.sh", err)
	}
	t.Setenv(ToolsDirEnv, dir)
	if got := DefaultToolsDir(); got != dir {
		t.Errorf("DefaultToolsDir() = %q, want %q from %s", got, dir, ToolsDirEnv)
	}
}

func TestStartProcessReportsEarlyExit(t *testing.T) {
	if _, _, err := findTools(DefaultToolsDir()); err != nil {
		if os.Getenv(RequireEnv) == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := StartProcess(ctx, Options{WorkDir: t.TempDir(), ExtraAPIServerArgs: []string{"--no-such-flag=1"}})
	if err == nil {
		c.Stop()
		t.Fatal("StartProcess with an unknown apiserver flag succeeded")
	}
	for _, want := range []string{"kube-apiserver exited before it was ready", "last ", "unknown flag: --no-such-flag"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestDecodeManifests(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    []string // kind/name in apply order
		wantErr bool
	}{
		{name: "empty", yaml: "", want: nil},
		{name: "comments and separators only", yaml: "# nothing\n---\n---\n# still nothing\n", want: nil},
		{
			name: "namespace and CRD first, order kept otherwise",
			yaml: "kind: ConfigMap\napiVersion: v1\nmetadata: {name: a}\n---\n" +
				"kind: CustomResourceDefinition\napiVersion: apiextensions.k8s.io/v1\nmetadata: {name: c}\n---\n" +
				"kind: Secret\napiVersion: v1\nmetadata: {name: b}\n---\n" +
				"kind: Namespace\napiVersion: v1\nmetadata: {name: ns1}\n",
			want: []string{"Namespace/ns1", "CustomResourceDefinition/c", "ConfigMap/a", "Secret/b"},
		},
		{
			name: "list is flattened",
			yaml: "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: cm-x}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: cm-y}}\n",
			want: []string{"ConfigMap/cm-x", "ConfigMap/cm-y"},
		},
		{name: "missing name", yaml: "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", wantErr: true},
		{name: "not yaml", yaml: "kind: [unterminated\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := DecodeManifests([]byte(tt.yaml))
			if (err != nil) != tt.wantErr {
				t.Fatalf("DecodeManifests error = %v, wantErr %t", err, tt.wantErr)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("DecodeManifests = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCredentialsWritten(t *testing.T) {
	creds, err := newCredentials(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := creds.write(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := os.ReadFile(files.tokens)
	if err != nil {
		t.Fatal(err)
	}
	if want := creds.adminToken + `,admin,admin,"system:masters"` + "\n"; string(tokens) != want {
		t.Errorf("token file = %q, want %q", tokens, want)
	}
	for _, p := range []string{files.servingKey, files.saKey, files.tokens} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", p, fi.Mode().Perm())
		}
	}
}
