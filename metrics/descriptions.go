// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package metrics

import "slices"

// Metric types as Prometheus names them in # TYPE lines.
const (
	TypeCounter   = "counter"
	TypeGauge     = "gauge"
	TypeHistogram = "histogram"
)

// Description is one metric family hpmount exposes: the data behind the
// README table. The collectors are built from these values, so the table
// cannot drift from the exposition.
type Description struct {
	Name   string
	Type   string // TypeCounter, TypeGauge or TypeHistogram
	Labels []string
	Help   string
}

var (
	descBuildInfo = Description{
		Name: "hpmount_build_info", Type: TypeGauge,
		Labels: []string{"version", "revision", "goversion"},
		Help:   "Always 1; the labels identify the running hpmount build (version, VCS revision, Go version).",
	}
	descVolumes = Description{
		Name: "hpmount_volumes", Type: TypeGauge,
		Labels: []string{"mode", "state"},
		Help:   "Hotplug volumes of the VMIs on this node by volume mode (Filesystem, Block, Directory, unknown) and the state the last reconcile left them in (mounted, pending, refused, failed, unmounted); a VMI's volumes stop counting when it leaves the node.",
	}
	descOps = Description{
		Name: "hpmount_mount_operations_total", Type: TypeCounter,
		Labels: []string{"op", "result"},
		Help:   "Engine calls made while reconciling, by operation (detach, attach, verify, grow) and result (the change made: unchanged, mounted, created, replaced, removed, grown; or not-published, refused, abandoned, error); counted when the call returns.",
	}
	descOpDuration = Description{
		Name: "hpmount_mount_operation_duration_seconds", Type: TypeHistogram,
		Labels: []string{"op"},
		Help:   "Wall time of one engine call (attach, detach, verify, grow), observed when the call returns whatever its result.",
	}
	descReconcileDuration = Description{
		Name: "hpmount_reconcile_duration_seconds", Type: TypeHistogram,
		Help: "Wall time of one complete reconcile of one VMI (read desired and observed state, plan, apply, report), observed when it finishes.",
	}
	descScanDuration = Description{
		Name: "hpmount_mountinfo_scan_duration_seconds", Type: TypeHistogram,
		Help: "Wall time of one read and parse of the host mount table (one per reconcile batch), observed after each scan. Only where the whole table is read: a kernel without statmount(2) (before 6.8); otherwise each launcher's own mounts are read and nothing is observed.",
	}
	descMountinfoEntries = Description{
		Name: "hpmount_mountinfo_entries", Type: TypeGauge,
		Help: "Mounts in the host mount table at the last whole-table scan (0 where statmount(2) reads each launcher's mounts and no scan was made).",
	}
	descMountinfoUnparsed = Description{
		Name: "hpmount_mountinfo_unparsed_lines", Type: TypeGauge,
		Help: "Lines of the host mount table at the last scan that could not be parsed and were left out (logged once); the rest of the table is used.",
	}
	descDeviceSize = Description{
		Name: "hpmount_volume_device_size_bytes", Type: TypeGauge,
		Labels: []string{"namespace", "persistentvolumeclaim", "vmi", "volume"},
		Help:   "Size in bytes of the hotplug volume's block device, as found by the last growth check of the volume.",
	}
	descFilesystemSize = Description{
		Name: "hpmount_volume_filesystem_size_bytes", Type: TypeGauge,
		Labels: []string{"namespace", "persistentvolumeclaim", "vmi", "volume"},
		Help:   "Size in bytes of the filesystem holding the volume's disk.img, after the last growth check of the volume.",
	}
	descDiskImageSize = Description{
		Name: "hpmount_volume_disk_image_size_bytes", Type: TypeGauge,
		Labels: []string{"namespace", "persistentvolumeclaim", "vmi", "volume"},
		Help:   "Size in bytes of the volume's disk.img, after the last growth check of the volume.",
	}
	descStaleOpen = Description{
		Name: "hpmount_volume_stale_open", Type: TypeGauge,
		Labels: []string{"namespace", "persistentvolumeclaim", "vmi", "volume"},
		Help:   "1 while the launcher's QEMU holds, under the volume's name, a device or file that is no longer the volume's (a storage re-attach published it anew after QEMU opened it; hpmount diag says stale-open), else 0; only an unplug and plug or a VM restart clears it.",
	}
	descExpansions = Description{
		Name: "hpmount_filesystem_expansions_total", Type: TypeCounter,
		Labels: []string{"result"},
		Help:   "Online filesystem growth checks by outcome (grown, unchanged, failed, shrink-ignored when the claim asks for less than the current size); counted when a check finishes.",
	}
	descAttachLatency = Description{
		Name: "hpmount_attach_latency_seconds", Type: TypeHistogram,
		Labels: []string{"mode"},
		Help:   "Time from the VMI change that made a hotplug volume desired (its arrival at the agent) to the volume being usable in the launcher, by volume mode; includes waiting for the attachment pod and the kubelet's publish.",
	}
	descAttachPhase = Description{
		Name: "hpmount_attach_phase_seconds", Type: TypeHistogram,
		Labels: []string{"phase"},
		Help:   "Phases of one hotplug volume's attach, each from the end of the one before: pod-created (from the VMI change's arrival at the agent to the attachment pod's creationTimestamp), pod-ready (to its Ready condition), publish-seen (to the agent's first attach that found the kubelet's publish), mounted (to the volume usable in the launcher), launcher-ready (to the agent seeing virt-handler's volumeStatus phase Ready); a phase with an unknown or out-of-order end is not observed.",
	}
	// The work queues' and the REST client's families keep client-go's
	// names and labels (as component-base registers them in Kubernetes
	// components), so the dashboards and alerts written for those apply.
	descQueueDepth = Description{
		Name: "workqueue_depth", Type: TypeGauge,
		Labels: []string{"name"},
		Help:   "Current depth of the work queue: keys waiting in one of the agent's queues (hpmount: VMIs to reconcile; hpmount-status: VMIs whose volumeStatus is to be written).",
	}
	descQueueAdds = Description{
		Name: "workqueue_adds_total", Type: TypeCounter,
		Labels: []string{"name"},
		Help:   "Total number of adds handled by the work queue.",
	}
	descQueueRetries = Description{
		Name: "workqueue_retries_total", Type: TypeCounter,
		Labels: []string{"name"},
		Help:   "Total number of retries handled by the work queue: keys put back after a failed pass, with backoff.",
	}
	descQueueWait = Description{
		Name: "workqueue_queue_duration_seconds", Type: TypeHistogram,
		Labels: []string{"name"},
		Help:   "How long in seconds a key stays in the work queue before a worker takes it.",
	}
	descQueueWork = Description{
		Name: "workqueue_work_duration_seconds", Type: TypeHistogram,
		Labels: []string{"name"},
		Help:   "How long in seconds processing a key from the work queue takes (for the hpmount queue, one reconcile of a VMI).",
	}
	descQueueUnfinished = Description{
		Name: "workqueue_unfinished_work_seconds", Type: TypeGauge,
		Labels: []string{"name"},
		Help:   "How many seconds of work are in progress and not yet observed by workqueue_work_duration_seconds; a value that keeps growing is a stuck worker.",
	}
	descQueueLongest = Description{
		Name: "workqueue_longest_running_processor_seconds", Type: TypeGauge,
		Labels: []string{"name"},
		Help:   "How many seconds the longest running worker of the work queue has been running.",
	}
	descRESTRequests = Description{
		Name: "rest_client_requests_total", Type: TypeCounter,
		Labels: []string{"code", "host", "method"},
		Help:   "Number of the agent's requests to the API server, by status code, host and method.",
	}
	descRESTLatency = Description{
		Name: "rest_client_request_duration_seconds", Type: TypeHistogram,
		Labels: []string{"host", "verb"},
		Help:   "Latency in seconds of the agent's requests to the API server, by host and verb.",
	}
	descRESTRateLimiter = Description{
		Name: "rest_client_rate_limiter_duration_seconds", Type: TypeHistogram,
		Labels: []string{"host", "verb"},
		Help:   "Time in seconds the agent's requests waited for client-go's rate limiter before they were sent, by host and verb.",
	}
	descMigrations = Description{
		Name: "hpmount_migration_events_total", Type: TypeCounter,
		Labels: []string{"event"},
		Help:   "Steps of live migrations seen from this node, by event (handoff: a migration to this node was handed off; target-ready: every hotplug volume is usable in the target launcher; target-cleaned: the target launcher of a failed or aborted migration holds nothing; target-left: all it still holds is virt-handler's to remove (kubevirt#17882); source-cleaned: the source launcher of a migrated VMI is gone and holds nothing).",
	}
	descGoneChecks = Description{
		Name: "hpmount_vmi_gone_checks_total", Type: TypeCounter,
		Labels: []string{"result"},
		Help:   "Live reads confirming that a VMI missing from the agent's caches left this node, made before anything of it is detached, by result (gone, replaced, elsewhere: detaching goes ahead; still-here: a cache lags, nothing is detached; unknown: the API server could not be asked, nothing is detached).",
	}
	descMigrationReady = Description{
		Name: "hpmount_migration_target_ready_seconds", Type: TypeHistogram,
		Help: "Time from a migration's handoff being seen on its target node to every hotplug volume being usable in the target launcher.",
	}
	descStuckThreads = Description{
		Name: "hpmount_stuck_threads", Type: TypeGauge,
		Help: "Threads held now by node calls the agent gave up on at their deadline and that have not returned: attaches, detaches and growths waiting on a volume's storage (at most one per volume and kind of call, and at most 64 of each kind at once), storage probes, and reads. They return when the storage answers; a value that stays above 0 is hung storage, and the HotplugStuck Events name its volumes.",
	}
	descRefusals = Description{
		Name: "hpmount_refusals_total", Type: TypeCounter,
		Labels: []string{"reason"},
		Help:   "Volumes or launchers the agent refused to touch because they are unsafe or do not belong to their VMI, by reason; counted on every refusal.",
	}
)

// descriptions is the exposition order of the README table.
var descriptions = []Description{
	descBuildInfo,
	descVolumes,
	descOps,
	descOpDuration,
	descReconcileDuration,
	descScanDuration,
	descMountinfoEntries,
	descMountinfoUnparsed,
	descDeviceSize,
	descFilesystemSize,
	descDiskImageSize,
	descStaleOpen,
	descExpansions,
	descRefusals,
	descAttachLatency,
	descAttachPhase,
	descMigrations,
	descGoneChecks,
	descMigrationReady,
	descQueueDepth,
	descQueueAdds,
	descQueueRetries,
	descQueueWait,
	descQueueWork,
	descQueueUnfinished,
	descQueueLongest,
	descRESTRequests,
	descRESTLatency,
	descRESTRateLimiter,
	descStuckThreads,
}

// Descriptions returns every metric family the agent registers besides the
// Go runtime's and the process's, in README order. The
// result is a copy the caller may modify.
func Descriptions() []Description {
	out := make([]Description, len(descriptions))
	for i, d := range descriptions {
		d.Labels = slices.Clone(d.Labels)
		out[i] = d
	}
	return out
}
