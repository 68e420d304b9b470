// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// FieldManager is the server-side apply field manager of ApplyManifests.
const FieldManager = "hpmount-test"

// ApplyManifests server-side applies (forcing conflicts, as FieldManager)
// every object of a multi-document YAML stream with cfg's credentials, and
// returns the objects as the server answered. Namespaces and CRDs go first;
// otherwise document order is kept. Namespaced objects without a namespace
// go to "default". With dryRun the server validates, admits and defaults
// everything but persists nothing (DryRun: All); note that admission then
// still rejects objects in a namespace that does not exist yet.
func ApplyManifests(ctx context.Context, cfg *rest.Config, yamlDocs []byte, dryRun bool) ([]*unstructured.Unstructured, error) {
	objs, err := DecodeManifests(yamlDocs)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var applied []*unstructured.Unstructured
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		desc := fmt.Sprintf("%s %q", gvk.Kind, obj.GetName())
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			// A CRD applied earlier in this stream is not in the cached
			// discovery yet.
			mapper.Reset()
			mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return applied, fmt.Errorf("map %s (%s): %w", desc, gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace("default")
			}
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		} else {
			obj.SetNamespace("")
		}
		out, err := ri.Apply(ctx, obj.GetName(), obj, opts)
		if err != nil {
			return applied, fmt.Errorf("apply %s in %q (dry run %t): %w", desc, obj.GetNamespace(), dryRun, err)
		}
		applied = append(applied, out)
	}
	return applied, nil
}

// DecodeManifests splits a YAML stream into objects, skipping empty
// documents and flattening kind: List.
func DecodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read YAML document %d: %w", i, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("parse YAML document %d: %w", i, err)
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) || len(bytes.TrimSpace(js)) == 0 {
			continue // only comments or separators
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("decode YAML document %d: %w", i, err)
		}
		if !obj.IsList() {
			objs = append(objs, obj)
			continue
		}
		err = obj.EachListItem(func(item runtime.Object) error {
			objs = append(objs, item.(*unstructured.Unstructured))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("decode list in YAML document %d: %w", i, err)
		}
	}
	for _, obj := range objs {
		if obj.GetName() == "" {
			return nil, fmt.Errorf("%s object without metadata.name", obj.GetKind())
		}
	}
	sort.SliceStable(objs, func(i, j int) bool { return applyRank(objs[i]) < applyRank(objs[j]) })
	return objs, nil
}

// applyRank orders kinds other objects depend on first.
func applyRank(obj *unstructured.Unstructured) int {
	switch obj.GroupVersionKind().GroupKind().String() {
	case "Namespace":
		return 0
	case "CustomResourceDefinition.apiextensions.k8s.io":
		return 1
	default:
		return 2
	}
}
