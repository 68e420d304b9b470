// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package simnode

import apierrors "k8s.io/apimachinery/pkg/api/errors"

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
