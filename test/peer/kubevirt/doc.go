// Package peer runs KubeVirt v1.7.0's own code against hpmount's (issue 20):
// its API types against hpmount's VMI model, and its hotplug mounter
// (kubevirt.io/kubevirt/pkg/virt-handler/hotplug-disk) against hpmount's
// node engine on the same simulated node.
//
// It is a Go module of its own so that KubeVirt's dependency pins (its go.mod
// replaces k8s.io/* by v0.33.5) never reach the product's go.mod; the root
// module's go list, go vet and go test do not see it. make peer-test runs it.
package peer
