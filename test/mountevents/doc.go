// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package mountevents tests the event path of a repair end to end in one
// process: the agent with the real node engine, on a kubelet tree in the
// test's private mount namespace, with fake API clients and a resync of an
// hour, so that only the kernel's mount events (package mountwatch) can
// make it repair a target someone else unmounted or stacked a mount on. It
// logs the time from the foreign change to the repair; the figure is
// reported, never held to a budget in a unit test.
package mountevents
