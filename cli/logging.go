// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// Logging formats of --logging-format, as the Kubernetes components name
// them.
const (
	LogFormatJSON = "json"
	LogFormatText = "text"
)

// debugVerbosity is the -v from which debug lines print: klog's V(4), the
// level Kubernetes components keep for debugging.
const debugVerbosity = 4

// LogFlags are the Kubernetes components' logging flags: -v and
// --logging-format.
type LogFlags struct {
	Verbosity int
	Format    string
}

// DefaultLogFlags logs info lines as JSON.
func DefaultLogFlags() LogFlags { return LogFlags{Format: LogFormatJSON} }

// Bind adds -v/--v and --logging-format.
func (l *LogFlags) Bind(f *pflag.FlagSet) {
	f.IntVarP(&l.Verbosity, "v", "v", l.Verbosity, "log verbosity: 4 and up also prints debug lines, and client-go's own lines of that verbosity")
	f.StringVar(&l.Format, "logging-format", l.Format, "log format: json or text")
}

// Logger is the process's logger on w, in the chosen format and level.
// client-go logs through klog; klog is routed into the same logger, with
// the same verbosity, so that one stream carries both in one format.
func (l LogFlags) Logger(w io.Writer) (*slog.Logger, error) {
	if l.Verbosity < 0 {
		return nil, fmt.Errorf("-v %d: want 0 or more", l.Verbosity)
	}
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if l.Verbosity >= debugVerbosity {
		opts.Level = slog.LevelDebug
	}
	var h slog.Handler
	switch l.Format {
	case LogFormatJSON:
		h = slog.NewJSONHandler(w, opts)
	case LogFormatText:
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("--logging-format %q: want json or text", l.Format)
	}
	logger := slog.New(h)
	if err := routeKlog(logger, l.Verbosity); err != nil {
		return nil, err
	}
	return logger, nil
}

// routeKlog sends klog's lines to logger and sets klog's verbosity.
func routeKlog(logger *slog.Logger, verbosity int) error {
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	if err := fs.Set("v", strconv.Itoa(verbosity)); err != nil {
		return fmt.Errorf("klog verbosity: %w", err)
	}
	klog.SetSlogLogger(logger)
	return nil
}
