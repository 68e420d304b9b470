// Package agent is the control loop of hpmount: it watches the
// VirtualMachineInstances scheduled to this node and the pods on this node,
// computes for every VMI the hotplug volumes its virt-launcher pod should
// see, compares that with what the node Engine observes, and applies the
// difference through the Engine. It reports through Events on the VMI,
// optionally the VMI's status.volumeStatus, structured logs and an Observer
// hook for metrics.
//
// The agent owns the Kubernetes side only: it never builds kubelet paths,
// never touches the mount table, device nodes or cgroups itself; all of that
// is the Engine's (see engine.go; the real one is package node). Its import
// graph says so: no mount, blockdev or node (test/deps). Which pods and
// volumes belong to a VMI, and the refusal reasons, are package kubevirt's.
//
// One reconcile of one VMI reads as its phases, each in its own file:
// desired (desired.go: the VMI's volumes judged by kubevirt, PVs resolved),
// observed (Engine.Observe on one mount-table snapshot), plan (plan.go),
// apply (apply.go: engine calls, recorded, never changing the intents),
// summarize (summarize.go: a pure function from what was decided and done
// to volume states, Events, metrics and status updates) and report
// (report.go: sending them).
//
// Its informers wait out an unreachable API server through one gate
// (gate.go) instead of client-go's backoff, and are released over a
// spread that grows with the outage, so that the nodes of a cluster do
// not all list at once when the server comes back.
//
// Rules it enforces:
//   - a volume is attached only from an attachment pod that is verified to
//     belong to this VMI's launcher on this node; any mismatch is refused
//     with a Warning Event, and existing healthy mounts are kept;
//   - a volume is detached only on a confirmed fact from a synced informer
//     cache: the VMI is gone, the volume left spec.volumes, or the launcher
//     pod is gone from this node. A failed or slow API call never detaches;
//   - on shutdown every mount stays where it is.
package agent
