// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command license holds every source file of the repository to the
// Apache-2.0 notice (LICENSE; KubeVirt and Harvester use the same license),
// in the short form Kubernetes-style projects use:
//
//	// Copyright The hpmount Authors.
//	// SPDX-License-Identifier: Apache-2.0
//
// Go files get it first, "#" files (Makefile, Dockerfiles, shell scripts)
// after a "#!" line or Dockerfile parser directives, which must stay first.
//
//	go run ./test/license            # list the files without it; exit 1 if any
//	go run ./test/license -fix       # add it to every file without it
//	go run ./test/license -fix FILE… # add it to these files only
//
// The files are git's tracked and untracked-but-not-ignored files, less
// testdata/ folders. TestRepositoryNotices fails while any lacks the
// notice. It checks the form only; it never rewrites an existing header
// and knows nothing of other licenses.
package main
