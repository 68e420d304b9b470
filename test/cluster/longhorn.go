// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"

	"github.com/hpmount/hpmount/test/crds"
)

// LonghornGroupVersion is the API of the Longhorn CRDs in package crds.
var LonghornGroupVersion = schema.GroupVersion{Group: "longhorn.io", Version: "v1beta2"}

// InstallLonghornCRDs applies Longhorn's Volume and VolumeAttachment CRDs
// from package crds and waits until discovery lists both: clients that
// check discovery before reading them (diag does) see them at once.
func (c *Cluster) InstallLonghornCRDs(ctx context.Context) error {
	cfg := c.AdminConfig()
	if _, err := ApplyManifests(ctx, cfg, crds.Longhorn, false); err != nil {
		return fmt.Errorf("install Longhorn CRDs: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(LonghornGroupVersion.String())
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		served := map[string]bool{}
		for _, r := range list.APIResources {
			served[r.Name] = true
		}
		return served["volumes"] && served["volumeattachments"], nil
	})
	if err != nil {
		return fmt.Errorf("wait for %s volumes and volumeattachments to be served: %w", LonghornGroupVersion, err)
	}
	return nil
}
