// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeAddrsOutsideTheEphemeralRange: the ports handed out are free,
// distinct across calls, and below the range the kernel gives outgoing
// connections, which could otherwise take one before the agent binds it.
func TestFreeAddrsOutsideTheEphemeralRange(t *testing.T) {
	seen := map[string]bool{}
	for range 3 {
		addrs, err := FreeAddrs(2)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			_, p, err := net.SplitHostPort(a)
			if err != nil {
				t.Fatal(err)
			}
			port, _ := strconv.Atoi(p)
			if port < portFloor || port >= ephemeralLow() || seen[a] {
				t.Fatalf("address %s: want a port in [%d, %d) not handed out before", a, portFloor, ephemeralLow())
			}
			seen[a] = true
			l, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("address %s is not free: %v", a, err)
			}
			l.Close()
		}
	}
}
