// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package outcome is hpmount's one vocabulary for what a node operation
// did: the operations (Op) the agent plans and the results (Result) they
// end in. mount and blockdev return a Result, the agent reports Op and
// Result together, and metrics pre-registers every pair, so that a label
// value means the same thing everywhere and no layer maps one enum onto
// another by hand.
//
// It owns only names. It refuses behaviour: nothing here mounts, decides
// or counts.
package outcome
