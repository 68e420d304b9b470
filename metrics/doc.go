// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package metrics owns hpmount's Prometheus collectors and the /metrics
// handler. Metrics implements agent.Observer: the agent reports what it does
// (engine calls, reconciles, mount-table scans, volume states, sizes found by
// growth checks, refusals) and Metrics turns that into series on a private
// prometheus.Registry, never the global one, so that nothing a dependency
// registers leaks into hpmount's exposition and tests can build as many
// independent instances as they like.
//
// It refuses to do anything slow on the agent's path: every Observer method
// updates in-memory values under at most one short mutex and never does I/O.
// It also refuses unbounded label values from tenants: per-volume series are
// labelled only with namespace, VMI and volume names (which the apiserver
// bounds and the agent validates), the volume mode label is folded to
// Filesystem, Block, Directory (memory-dump and utility volumes) or
// unknown, and operation latency is a histogram per operation, not per
// volume. The per-volume series are plain values in each volume's record,
// written out only when scraped (volumes.go): a node's thousands of volumes
// cost no series objects between scrapes.
//
// # Metrics (README section)
//
// The agent serves these at http://<pod>:9090/metrics (flag
// --metrics-address), together with the standard go_* and process_* series of
// the agent process. Names follow the Prometheus conventions: prefix
// hpmount_, base units (seconds, bytes), _total on counters; the work
// queues' and the REST client's families keep client-go's names and labels
// (workqueue_*{name}, rest_client_*), as Kubernetes components export them.
//
//	hpmount_build_info{version,revision,goversion}                gauge      always 1; the labels identify the running build
//	hpmount_volumes{mode,state}                                   gauge      hotplug volumes on this node by volume mode (Filesystem, Block, Directory, unknown) and state (mounted, pending, refused, failed, unmounted, not-propagated)
//	hpmount_mount_operations_total{op,result}                     counter    engine calls (op detach, attach, verify, grow) by result (unchanged, mounted, created, replaced, removed, grown, not-published, refused, abandoned, left-to-virt-handler, error)
//	hpmount_mount_operation_duration_seconds{op}                  histogram  wall time of those engine calls, 10us..10s buckets
//	hpmount_reconcile_duration_seconds                            histogram  wall time of one complete reconcile of one VMI
//	hpmount_mountinfo_scan_duration_seconds                       histogram  wall time of one read and parse of the host mount table (kernels without statmount)
//	hpmount_mountinfo_entries                                     gauge      mounts in the host mount table at the last whole-table scan
//	hpmount_mountinfo_unparsed_lines                              gauge      lines of the host mount table at the last scan that could not be parsed and were left out
//	hpmount_volume_device_size_bytes{namespace,persistentvolumeclaim,vmi,volume} gauge      size of the volume's block device at the last growth check
//	hpmount_volume_filesystem_size_bytes{namespace,persistentvolumeclaim,vmi,volume} gauge      size of the volume's filesystem at the last growth check
//	hpmount_volume_disk_image_size_bytes{namespace,persistentvolumeclaim,vmi,volume} gauge      size of the volume's disk.img at the last growth check
//	hpmount_volume_stale_open{namespace,persistentvolumeclaim,vmi,volume} gauge      1 while the launcher's QEMU holds a device or file that is no longer the volume's (diag: stale-open), else 0
//	hpmount_filesystem_expansions_total{result}                   counter    growth checks by outcome (grown, unchanged, failed, shrink-ignored)
//	hpmount_refusals_total{reason}                                counter    volumes or launchers refused as unsafe or not belonging to their VMI, by reason
//	hpmount_attach_latency_seconds{mode}                          histogram  from the VMI change that made a volume desired to the volume usable in the launcher, 50ms..10min buckets
//	hpmount_attach_phase_seconds{phase}                           histogram  phases of one attach, each from the end of the one before (pod-created, pod-ready, publish-seen, mounted, launcher-ready), 1ms..10min buckets
//	hpmount_migration_events_total{event}                         counter    steps of live migrations seen from this node (handoff, target-ready, target-cleaned, target-left, source-cleaned)
//	hpmount_vmi_gone_checks_total{result}                         counter    live reads confirming a VMI missing from the caches left this node before anything is detached (gone, replaced, elsewhere, still-here, unknown)
//	hpmount_migration_target_ready_seconds                        histogram  from a migration's handoff seen on the target node to every hotplug volume usable in the target launcher, 50ms..10min buckets
//	workqueue_depth{name}                                         gauge      keys waiting in the work queue (hpmount: VMIs to reconcile; hpmount-status: volumeStatus writes)
//	workqueue_adds_total{name}                                    counter    keys added to the work queue
//	workqueue_retries_total{name}                                 counter    keys put back after a failed pass, with backoff
//	workqueue_queue_duration_seconds{name}                        histogram  time a key waited before a worker took it, 10ns..1000s buckets
//	workqueue_work_duration_seconds{name}                         histogram  time a worker took on a key (hpmount: one reconcile), 10ns..1000s buckets
//	workqueue_unfinished_work_seconds{name}                       gauge      seconds of work in progress not yet observed; growing without end is a stuck worker
//	workqueue_longest_running_processor_seconds{name}             gauge      how long the longest running worker has been running
//	rest_client_requests_total{code,host,method}                  counter    the agent's requests to the API server by status code, host and method
//	rest_client_request_duration_seconds{host,verb}               histogram  latency of those requests, 5ms..60s buckets
//	rest_client_rate_limiter_duration_seconds{host,verb}          histogram  time those requests waited for client-go's rate limiter
//	hpmount_stuck_threads                                         gauge      threads held by node calls given up on at their deadline that have not returned (hung storage)
//
// When a VMI leaves the node every series labelled with it is deleted, and
// its volumes stop counting in hpmount_volumes. When a volume is reported
// unmounted its size and stale-open series are deleted. Descriptions returns this table as
// data; a test keeps it, this comment and the registry in agreement.
//
// Useful queries:
//
//	sum by (state) (hpmount_volumes)                        # volumes per state, cluster-wide
//	hpmount_volumes{state=~"failed|refused"} > 0            # alert: something cannot be mounted
//	histogram_quantile(0.99, sum by (le, op) (rate(hpmount_mount_operation_duration_seconds_bucket[5m])))
//	increase(hpmount_filesystem_expansions_total{result="failed"}[1h]) > 0
//	histogram_quantile(0.99, sum by (le, mode) (rate(hpmount_attach_latency_seconds_bucket[15m])))
//	histogram_quantile(0.9, sum by (le, phase) (rate(hpmount_attach_phase_seconds_bucket[15m])))  # where attaches wait
package metrics
