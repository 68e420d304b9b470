// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"strings"
)

// writeStorage prints one compact line per volume whose storage side is
// known, and the one line saying what could not be read.
func writeStorage(b *strings.Builder, r *Report, wide bool) {
	if r.Storage.Note != "" {
		writeLine(b, "storage: "+r.Storage.Note, wide)
	}
	for _, v := range r.Volumes {
		if v.Storage == nil {
			continue
		}
		writeLine(b, fmt.Sprintf("storage %s/%s %s: %s", v.Namespace, v.VMI, v.Volume, v.Storage.Summary()), wide)
	}
}
