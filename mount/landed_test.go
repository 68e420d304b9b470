// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"testing"

	"github.com/hpmount/hpmount/outcome"
)

func TestSettleTwice(t *testing.T) {
	type run struct {
		res outcome.Result
		err error
	}
	other := errors.New("bind failed")
	for _, tc := range []struct {
		name    string
		runs    []run
		want    outcome.Result
		wantErr error
		calls   int
	}{
		{"no race", []run{{outcome.Mounted, nil}}, outcome.Mounted, nil, 1},
		{"another error is not retried", []run{{outcome.Mounted, other}}, outcome.Mounted, other, 1},
		{"a mount appeared: adopted", []run{{outcome.Mounted, ErrTargetChanged}, {outcome.Unchanged, nil}}, outcome.Unchanged, nil, 2},
		{"landed on another: adopted", []run{{outcome.Mounted, ErrLandedOnAnother}, {outcome.Unchanged, nil}}, outcome.Unchanged, nil, 2},
		{"a peeled mount stays reported", []run{{outcome.Replaced, ErrLandedOnAnother}, {outcome.Unchanged, nil}}, outcome.Replaced, nil, 2},
		{"the second look replaces", []run{{outcome.Mounted, ErrTargetChanged}, {outcome.Replaced, nil}}, outcome.Replaced, nil, 2},
		{"a race that repeats is left", []run{{outcome.Mounted, ErrTargetChanged}, {outcome.Mounted, ErrLandedOnAnother}}, outcome.Mounted, ErrLandedOnAnother, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			res, err := settleTwice(func() (outcome.Result, error) {
				r := tc.runs[calls]
				calls++
				return r.res, r.err
			})
			// errors.Is(err, nil) holds only for a nil err.
			if res != tc.want || !errors.Is(err, tc.wantErr) || calls != tc.calls {
				t.Errorf("settleTwice = %s, %v after %d runs; want %s, %v after %d", res, err, calls, tc.want, tc.wantErr, tc.calls)
			}
		})
	}
}
