// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"github.com/hpmount/hpmount/cli"
)

// TestLogFlags: the format and the level follow the flags, and klog's
// lines (client-go's) land in the same stream, in the same format, gated
// by the same -v.
func TestLogFlags(t *testing.T) {
	tests := []struct {
		name          string
		flags         cli.LogFlags
		debug, klogV4 bool
	}{
		{"json, info", cli.LogFlags{Format: cli.LogFormatJSON}, false, false},
		{"text, debug", cli.LogFlags{Format: cli.LogFormatText, Verbosity: 4}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger, err := tt.flags.Logger(&buf)
			if err != nil {
				t.Fatal(err)
			}
			logger.Info("own info")
			logger.Debug("own debug")
			klog.Info("klog info")
			klog.V(4).Info("klog v4")
			klog.Flush()
			out := buf.String()
			for line, want := range map[string]bool{"own info": true, "own debug": tt.debug, "klog info": true, "klog v4": tt.klogV4} {
				if got := strings.Contains(out, line); got != want {
					t.Errorf("%q logged: %v, want %v\n%s", line, got, want, out)
				}
			}
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if isJSON := json.Valid([]byte(l)); isJSON != (tt.flags.Format == cli.LogFormatJSON) {
					t.Errorf("line %q: JSON %v, want format %s", l, isJSON, tt.flags.Format)
				}
			}
		})
	}
	for _, bad := range []cli.LogFlags{{Format: "xml"}, {Format: cli.LogFormatJSON, Verbosity: -1}} {
		if _, err := bad.Logger(&bytes.Buffer{}); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
