package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/hpmount/hpmount/kubevirt"
)

// Why a VMI missing from the caches is confirmed before anything is
// detached.
//
// The agent reads a VMI from two informers (the node's own and the
// migration target's, migration.go), and KubeVirt ends a migration in
// separate updates: kubevirt.io/nodeName moves to the target, later
// kubevirt.io/migrationTargetNodeName goes. The two informers deliver
// those in either order, so on the target node a VMI can be in neither
// cache for a moment while its VM runs in the launcher the agent just
// filled. The same holds for any informer that lags its peer. Absence from
// a cache is therefore never a reason to detach on its own: the agent asks
// the API server once (a GET without resourceVersion, a quorum read) and
// detaches only on a confirmed end.

// goneRecheck is how soon a VMI whose absence was not confirmed is looked
// at again, if no informer event brings it back first.
const goneRecheck = 2 * time.Second

// Results of confirming that a VMI left this node, reported to
// Observer.GoneCheck.
const (
	// GoneConfirmed: the API server has no such VMI.
	GoneConfirmed = "gone"
	// GoneReplaced: the name now holds another VMI (another UID).
	GoneReplaced = "replaced"
	// GoneElsewhere: the VMI names neither this node nor this node as its
	// migration target, and its status does not put its VM here.
	GoneElsewhere = "elsewhere"
	// GoneStillHere: the VMI still names this node, by a label, by
	// status.nodeName, or as the target of a completed migration; a cache
	// lags.
	GoneStillHere = "still-here"
	// GoneUnknown: the API server could not be asked.
	GoneUnknown = "unknown"
)

// GoneChecks lists every result of a confirmation.
var GoneChecks = []string{GoneConfirmed, GoneReplaced, GoneElsewhere, GoneStillHere, GoneUnknown}

// confirmGone asks the API server whether the VMI of key, remembered with
// uid, really left this node. Only the first three results allow a
// detach; err says why the answer is unknown.
func (a *Agent) confirmGone(ctx context.Context, key string, uid types.UID) (string, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return GoneUnknown, fmt.Errorf("split vmi key %q: %w", key, err)
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	u, err := a.dyn.Resource(kubevirt.VMIResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return GoneConfirmed, nil
	case err != nil:
		return GoneUnknown, fmt.Errorf("get vmi %s: %w", key, err)
	case uid != "" && u.GetUID() != uid:
		return GoneReplaced, nil
	}
	l := u.GetLabels()
	if l[kubevirt.LabelNodeName] == a.cfg.NodeName || l[kubevirt.LabelMigrationTargetNode] == a.cfg.NodeName {
		return GoneStillHere, nil
	}
	if vmi, err := kubevirt.DecodeVMI(u); err == nil && runsHere(vmi, a.cfg.NodeName) {
		return GoneStillHere, nil
	}
	return GoneElsewhere, nil
}

// runsHere reports whether the VMI's status puts its VM on node although
// no label does: the target label can go before kubevirt.io/nodeName moves
// to the target of a completed migration, and the VM already runs there.
func runsHere(vmi *kubevirt.VMI, node string) bool {
	if vmi.Status.NodeName == node {
		return true
	}
	m := kubevirt.MigrationOf(vmi, node)
	return m.Role == kubevirt.RoleTarget && m.Phase == kubevirt.MigrationSucceeded
}

// goneAllowsDetach reports whether a confirmation's result lets the
// launchers of a VMI that left the caches be emptied.
func goneAllowsDetach(result string) bool {
	return result == GoneConfirmed || result == GoneReplaced || result == GoneElsewhere
}

// goneLog says why nothing of a VMI missing from the caches was detached.
func goneLog(result string, err error) logLine {
	if result == GoneStillHere {
		return logLine{slog.LevelInfo, "vmi is missing from the caches but still names this node; waiting for them before detaching anything", nil}
	}
	return logLine{slog.LevelWarn, "vmi is missing from the caches and the API server cannot confirm it left; nothing is detached", []any{"error", err.Error()}}
}
