// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command hpmount-test-csi runs the test CSI node plugin (package
// test/csiplugin) as its own process, as the real node of the tests
// starts it:
//
//	hpmount-test-csi --endpoint unix://<kubelet root>/plugins/csi.hpmount.test/csi.sock \
//	  --registration-dir <kubelet root>/plugins_registry --node-id <node> \
//	  --state-dir <dir> --call-log <file>
//
// It serves until SIGTERM or SIGINT and leaves staged volumes in place.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/hpmount/hpmount/test/csiplugin"
)

func main() {
	var cfg csiplugin.Config
	flag.StringVar(&cfg.Endpoint, "endpoint", "", "CSI socket, unix:///absolute/path (default <kubelet-plugin-dir>/"+csiplugin.CSISocketName+")")
	flag.StringVar(&cfg.KubeletPluginDir, "kubelet-plugin-dir", "", "directory of the CSI socket when --endpoint is not given: <kubelet root>/plugins/"+csiplugin.DriverName)
	flag.StringVar(&cfg.RegistrationDir, "registration-dir", "", "the kubelet's plugins_registry directory; empty serves no registration socket")
	flag.StringVar(&cfg.NodeID, "node-id", "", "node name NodeGetInfo answers")
	flag.StringVar(&cfg.StateDir, "state-dir", "", "directory of the staged volumes' records")
	flag.StringVar(&cfg.CallLog, "call-log", "", "file every gRPC call is appended to as a JSON line")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "hpmount-test-csi: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	log.SetPrefix("hpmount-test-csi: ")
	p, err := csiplugin.Start(cfg)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving %s on %s (registration socket %q)", csiplugin.DriverName, p.Socket, p.RegistrationSocket)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	log.Printf("stopping on %v", <-sig)
	p.Stop()
}
