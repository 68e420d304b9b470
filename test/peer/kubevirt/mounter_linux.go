// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	// The mounter under comparison, Linux-only like virt-handler; imported
	// here so that building the module compiles it even where no test
	// names it.
	_ "kubevirt.io/kubevirt/pkg/virt-handler/hotplug-disk"
)
