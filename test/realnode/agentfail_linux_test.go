// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/hpmount/hpmount/test/harness"
)

// TestDeployAgentRefusesADynamicBinary: a dynamically linked binary (the
// machine's own /bin/true stands for a plain go build with cgo on) is
// refused before anything is applied or started, saying why; the node is
// never touched (a zero Node would fail on first use).
func TestDeployAgentRefusesADynamicBinary(t *testing.T) {
	if err := harness.CheckStatic("/bin/true"); !errors.Is(err, harness.ErrDynamic) {
		t.Fatalf("/bin/true is not dynamically linked here (%v): the test needs a dynamic binary", err)
	}
	a, err := (&Node{}).DeployAgent(context.Background(), "/bin/true")
	if !errors.Is(err, harness.ErrDynamic) || a != nil {
		t.Fatalf("DeployAgent = %v, %v; want no agent and ErrDynamic", a, err)
	}
	if !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("the error does not say how to build a static binary: %v", err)
	}
	t.Log(err)
}

// TestDeployAgentExplainsAPodNeverReady: when the agent's pod never
// becomes Ready, the wait fails with the pod's status (a crash-looping
// container's last exit) and its logs, and the agent still names the pod,
// so the caller can stop it. DeployAgent dereferenced the nil pod the
// wait returned and panicked, hiding the agent's log.
func TestDeployAgentExplainsAPodNeverReady(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "hpmount-system", Name: "hpmount-agent"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "agent", RestartCount: 3,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Error", ExitCode: 1, Message: "exec /hpmount: no such file or directory"}},
		}}},
	}
	kube := kubefake.NewClientset(pod)
	a := &DeployedAgent{node: &Node{Kube: kube}, Pod: pod.DeepCopy()}
	// The pod never becomes Ready: a short wait stands for the two minutes.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := a.waitReady(ctx)
	if err == nil {
		t.Fatal("waitReady succeeded for a pod that is never Ready")
	}
	for _, want := range []string{"not ready", "CrashLoopBackOff", "exec /hpmount: no such file or directory", "agent log:\nfake logs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not hold %q:\n%v", want, err)
		}
	}
	if a.Pod == nil || a.Pod.Name != pod.Name {
		t.Fatalf("after the failed wait the agent names pod %v, want %s", a.Pod, pod.Name)
	}
	t.Log(err)
}

// TestTimedStartLogsReadyOnlyOnSuccess: the shared node's start says it is
// ready only when it is.
func TestTimedStartLogsReadyOnlyOnSuccess(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		ready bool
	}{
		{"start failed", errors.New("ip link add: File exists"), false},
		{"started", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logged []string
			logf := func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
			e, err := timedStart(logf, func() (*env, error) {
				if tt.err != nil {
					return nil, tt.err
				}
				return &env{}, nil
			})
			if (err == nil) != tt.ready || (e != nil) != tt.ready {
				t.Fatalf("timedStart = %v, %v", e, err)
			}
			said := slices.ContainsFunc(logged, func(l string) bool { return strings.Contains(l, "ready") })
			if said != tt.ready {
				t.Fatalf("logged %q; want a ready line: %t", logged, tt.ready)
			}
		})
	}
}
