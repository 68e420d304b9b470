// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"fmt"
	"net/http"
)

// Alive is nil while the agent runs and /healthz answers 200; a Stop error
// once the agent exited, since waiting longer cannot help.
func (a *Agent) Alive() error {
	select {
	case <-a.done:
		return Stop(fmt.Errorf("agent exited: %v", a.Cmd.ProcessState))
	default:
	}
	body, code, err := get("http://" + a.HealthAddr + "/healthz")
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("healthz %d: %s", code, body)
	}
	return nil
}
