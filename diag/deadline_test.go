// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBounded: an answer within the deadline comes back as it is; a call
// that does not answer is abandoned with an error naming what and the
// deadline, and what it returns later reaches no one.
func TestBounded(t *testing.T) {
	v, err := bounded(time.Minute, "answer", func() (int, error) { return 7, errString("seven") })
	if v != 7 || err == nil || err.Error() != "seven" {
		t.Errorf("answered call: %d, %v", v, err)
	}
	release, returned := make(chan struct{}), make(chan struct{})
	v, err = bounded(10*time.Millisecond, "read what QEMU holds", func() (int, error) {
		defer close(returned)
		<-release
		return 8, nil
	})
	if v != 0 || !errors.Is(err, errStuck) || !stuck(err) || !strings.Contains(err.Error(), "read what QEMU holds") || !strings.Contains(err.Error(), "10ms") {
		t.Errorf("hung call: %d, %v; want 0 and an error wrapping errStuck naming the look and the deadline", v, err)
	}
	close(release)
	<-returned
}
