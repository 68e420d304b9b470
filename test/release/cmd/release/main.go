// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command release builds a release of hpmount into a folder (make release;
// package test/release says what it holds):
//
//	go run ./test/release/cmd/release --version v0.1.0 [--out dist] [--commit HASH]
//
// The commit defaults to HEAD's hash (with -dirty when tracked files
// differ), the date to $SOURCE_DATE_EPOCH or HEAD's commit time. Run it
// from the repository root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/hpmount/hpmount/test/release"
)

func main() {
	var opts release.Options
	flag.StringVar(&opts.Version, "version", "", "release version, vMAJOR.MINOR.PATCH[-PRERELEASE]")
	flag.StringVar(&opts.OutDir, "out", "dist", "output folder; must be empty or absent")
	flag.StringVar(&opts.Commit, "commit", "", "revision the release reports (default: HEAD, -dirty if modified)")
	flag.StringVar(&opts.RepoDir, "repo", ".", "repository root")
	flag.Parse()
	if err := run(context.Background(), opts); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts release.Options) error {
	var err error
	if opts.Commit == "" {
		if opts.Commit, err = release.Revision(ctx, opts.RepoDir); err != nil {
			return err
		}
	}
	if opts.Date, err = release.SourceDate(ctx, opts.RepoDir); err != nil {
		return err
	}
	files, err := release.Build(ctx, opts)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Println(f)
	}
	fmt.Printf("release %s (%s, %s) in %s\n", opts.Version, opts.Commit, opts.Date.Format("2006-01-02T15:04:05Z"), opts.OutDir)
	return nil
}
