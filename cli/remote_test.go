// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func agentPod(name, node string, phase corev1.PodPhase, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DefaultNamespace, Labels: map[string]string{
			"app.kubernetes.io/name": "hpmount", "app.kubernetes.io/component": "node-agent"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "hpmount", Args: args,
			Env: []corev1.EnvVar{
				{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				{Name: "ROOT", Value: "/data/kubelet"},
				{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
			},
		}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func TestDiagCommand(t *testing.T) {
	const bin = DefaultEntrypoint
	tests := []struct {
		name    string
		args    []string
		command []string
		extra   []string
		vmis    []string
		want    []string
		wantErr string
	}{
		{name: "shipped args", args: []string{"agent", "--node-name=$(NODE_NAME)", "--kubelet-root=/var/lib/kubelet", "--host-proc=/host/proc", "--metrics-address=:9090"},
			extra: []string{"-A"}, vmis: []string{"vm1"},
			want: []string{bin, "diag", "--node-name=n1", "--kubelet-root=/var/lib/kubelet", "--host-proc=/host/proc", "-A", "--", "vm1"}},
		{name: "separate values and env", args: []string{"agent", "--kubelet-root", "$(ROOT)/x", "--cgroup-mode", "v2", "--host-pid=7", "--workers=4", "--kube-api-qps=20"},
			want: []string{bin, "diag", "--node-name=n1", "--kubelet-root=/data/kubelet/x", "--cgroup-mode=v2", "--host-pid=7", "--kube-api-qps=20"}},
		{name: "command set", command: []string{"/bin/hpmount"}, args: []string{"agent"},
			want: []string{"/bin/hpmount", "diag", "--node-name=n1"}},
		{name: "unresolvable env", args: []string{"--cgroup-root=$(MEM)"}, wantErr: "cannot resolve $(MEM)"},
		{name: "flag without value", args: []string{"--kubelet-root"}, wantErr: "has no value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := agentPod("a", "n1", corev1.PodRunning, tt.args...)
			p.Spec.Containers[0].Command = tt.command
			got, err := DiagCommand(p, &p.Spec.Containers[0], tt.extra, tt.vmis)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, %v\nwant %q", got, err, tt.want)
			}
		})
	}
}

func TestFindAgentPod(t *testing.T) {
	kube := fake.NewSimpleClientset(
		agentPod("a-n1-old", "n1", corev1.PodFailed),
		agentPod("a-n1", "n1", corev1.PodRunning),
		agentPod("a-n2", "n2", corev1.PodPending),
	)
	other := agentPod("x-n3", "n3", corev1.PodRunning)
	other.Labels = map[string]string{"app": "other"}
	_, _ = kube.CoreV1().Pods(DefaultNamespace).Create(context.Background(), other, metav1.CreateOptions{})
	tests := []struct{ node, want, wantErr string }{
		{node: "n1", want: "a-n1"},
		{node: "n2", wantErr: "no running agent pod on node \"n2\""},
		{node: "n3", wantErr: "no agent pod on node \"n3\""},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			p, err := FindAgentPod(context.Background(), kube, DefaultNamespace, DefaultSelector, tt.node)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || p.Name != tt.want {
				t.Fatalf("pod %v, %v; want %s", p, err, tt.want)
			}
		})
	}
}
