// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package docs holds the project's Markdown to its own shape: the README
// stays a guide (no table cell over 300 characters, no list item over 10
// lines; long reference lives in docs/), CHANGELOG.md keeps Keep a
// Changelog's headings, and every relative link between the documents
// names a file and heading that exist.
//
// What the documents say about the code is held elsewhere, next to the
// code they describe (metrics/vocabulary_test.go, diag/vocabulary_test.go,
// test/manifests).
package docs
