// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// BusyboxPod is a pod on node whose container "main" runs busybox's sleep;
// the image is local, so the pull policy is Never.
func BusyboxPod(namespace, name, node string) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
}

// WaitRunning waits until every container of the pod is running and
// returns the pod.
func WaitRunning(ctx context.Context, kube kubernetes.Interface, namespace, name string) (*corev1.Pod, error) {
	return waitPod(ctx, kube, namespace, name, "running", running)
}

// WaitReady waits for the pod's Ready condition (its readiness probes
// passed) and returns the pod.
func WaitReady(ctx context.Context, kube kubernetes.Interface, namespace, name string) (*corev1.Pod, error) {
	return waitPod(ctx, kube, namespace, name, "ready", func(pod *corev1.Pod) bool {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}

// waitPod polls the pod for up to two minutes until ok says yes.
func waitPod(ctx context.Context, kube kubernetes.Interface, namespace, name, what string, ok func(*corev1.Pod) bool) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	last := "not found"
	for {
		pod, err := kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if ok(pod) {
				return pod, nil
			}
			last = podState(pod)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pod %s/%s not %s: %w (%s)", namespace, name, what, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func running(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) != len(pod.Spec.Containers) {
		return false
	}
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

// podState says why a pod is not running, for errors.
func podState(pod *corev1.Pod) string {
	s := string(pod.Status.Phase)
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += "; " + string(c.Type) + ": " + c.Message
		}
	}
	for _, c := range pod.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			s += "; " + c.Name + " waiting: " + w.Reason + " " + w.Message
		}
		if t := c.State.Terminated; t != nil {
			s += fmt.Sprintf("; %s terminated: %s %d %s", c.Name, t.Reason, t.ExitCode, t.Message)
		}
		// A container in CrashLoopBackOff says why only here.
		if t := c.LastTerminationState.Terminated; t != nil {
			s += fmt.Sprintf("; %s last terminated (%d restarts): %s %d %s", c.Name, c.RestartCount, t.Reason, t.ExitCode, t.Message)
		}
	}
	return s
}

func nsObject(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
