// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command etcd builds the upstream etcd server for the end-to-end harness.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
