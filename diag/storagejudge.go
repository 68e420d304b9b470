// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"github.com/hpmount/hpmount/diag/storage"
)

// storageExplains are the verdicts a storage-side problem can cause: the
// volume is not published or mounted here, or its device went away.
var storageExplains = map[Verdict]bool{
	NotMounted: true, DeadSource: true, StaleSource: true, StaleOpen: true, WrongDevice: true, Error: true,
}

// explainStorage records the storage side on v and, when it explains v's
// verdict, puts it first in the hint: it is the cause to fix first.
func explainStorage(v *Volume, st *storage.Side) {
	v.Storage = st
	if st == nil || st.Problem == "" || !storageExplains[v.Verdict] {
		return
	}
	v.Hint = "the storage side explains it: " + st.Problem + " (" + st.Advice() + "); " + v.Hint
}
