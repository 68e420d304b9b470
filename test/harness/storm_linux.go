// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// KillStorm SIGKILLs the agent at random moments and starts it again at
// once with the same options, as a crash loop or the OOM killer would: each
// agent runs for a random time in [MinRun, MaxRun) from its start, so kills
// land during startup, the sweep, reconciles and growth alike.
type KillStorm struct {
	Options        AgentOptions
	MinRun, MaxRun time.Duration
	// Rand draws the run times; seed it and log the seed so that a failure
	// can be replayed.
	Rand *rand.Rand
	// Started, when set, is called with every agent the storm starts, e.g.
	// to kill it when the test ends.
	Started func(*Agent)
}

// StormStats counts what a storm did.
type StormStats struct {
	Kills int
	// KilledReady counts the kills of an agent that already answered
	// /readyz: past its startup, in the middle of its work.
	KilledReady int
	// Exited counts agents that exited on their own before their kill.
	Exited int
}

// Run kills and restarts, starting from a, until ctx ends. It returns the
// agent left running, started after the last kill, and the counts; an error
// means an agent could not be started and the storm stopped early.
func (s *KillStorm) Run(ctx context.Context, a *Agent) (*Agent, StormStats, error) {
	var st StormStats
	for {
		run := s.MinRun
		if span := s.MaxRun - s.MinRun; span > 0 {
			run += time.Duration(s.Rand.Int64N(int64(span)))
		}
		wait := time.Until(a.Started.Add(run))
		select {
		case <-ctx.Done():
			return a, st, nil
		case <-a.Done():
			// A crash of its own is a finding, not a kill: count it.
			st.Exited++
		case <-time.After(wait):
			if a.Ready() == nil {
				st.KilledReady++
			}
			a.Kill()
			st.Kills++
		}
		next, err := StartAgent(s.Options)
		if err != nil {
			return a, st, fmt.Errorf("restart after %d kills: %w", st.Kills, err)
		}
		if s.Started != nil {
			s.Started(next)
		}
		a = next
	}
}
