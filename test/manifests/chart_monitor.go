// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"errors"
	"fmt"
)

// A Component's PodMonitor (deploy/monitoring) becomes the chart's monitor:
// its endpoint's interval, scrapeTimeout and honorLabels are values with the
// PodMonitor's settings as defaults, relabelings and metricRelabelings are
// appended, and <value>.kind chooses between the PodMonitor and a
// ServiceMonitor made from it (with the headless Service it needs), for a
// Prometheus that selects only ServiceMonitors.

// The kinds <value>.kind takes, the first the default: the PodMonitor is
// what the kustomize Component renders.
var monitorKinds = []string{"PodMonitor", "ServiceMonitor"}

// monitorKindIs is the condition of a template rendered for one kind.
func monitorKindIs(value, kind string) string {
	return fmt.Sprintf("eq .Values.%s.kind %q", value, kind)
}

// podMonitor returns the PodMonitor the component adds, nil if none; a
// second one is refused, since one kind value could not choose for both.
func (c component) podMonitor() (object, error) {
	var pm object
	for _, o := range c.objects {
		if kindOf(o) != "PodMonitor" {
			continue
		}
		if pm != nil {
			return nil, errors.New("adds two PodMonitors; the chart generator handles one")
		}
		pm = o
	}
	return pm, nil
}

// endpointsKey is where each monitor kind lists its endpoints.
var endpointsKey = map[string]string{"PodMonitor": "podMetricsEndpoints", "ServiceMonitor": "endpoints"}

// monitorEndpoint returns the monitor's one endpoint.
func monitorEndpoint(obj object) (map[string]any, error) {
	eps, _ := nested(obj, "spec")[endpointsKey[kindOf(obj)]].([]any)
	if len(eps) != 1 {
		return nil, fmt.Errorf("%d endpoints, the chart generator expects 1", len(eps))
	}
	ep, _ := eps[0].(map[string]any)
	return ep, nil
}

// monitorSettings are the endpoint's settings that become values, which
// the endpoint must set: the defaults are the Component's own.
var monitorSettings = []string{"interval", "scrapeTimeout", "honorLabels"}

// monitorDefaults returns the values of the monitor's settings, from the
// PodMonitor as the Component renders it.
func monitorDefaults(pm object) (map[string]any, error) {
	ep, err := monitorEndpoint(pm)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"kind": monitorKinds[0], "relabelings": []any{}, "metricRelabelings": []any{}}
	for _, k := range monitorSettings {
		v, ok := ep[k]
		if !ok {
			return nil, fmt.Errorf("the PodMonitor's endpoint sets no %s, which the chart's default would be", k)
		}
		out[k] = v
	}
	return out, nil
}

// templateMonitor replaces the endpoint's settings by the values of the
// Component (value): the base's relabelings (node, which the alerts read)
// stay first, the operator's follow.
func templateMonitor(obj object, t *template, value string) error {
	ep, err := monitorEndpoint(obj)
	if err != nil {
		return err
	}
	v := ".Values." + value + "."
	for _, k := range monitorSettings {
		if _, ok := ep[k]; !ok {
			return fmt.Errorf("the endpoint sets no %s", k)
		}
	}
	ep["interval"] = t.value(v + "interval | quote")
	ep["scrapeTimeout"] = t.value(v + "scrapeTimeout | quote")
	ep["honorLabels"] = t.value(v + "honorLabels")
	relabelings, _ := ep["relabelings"].([]any)
	ep["relabelings"] = t.block(listBlock(relabelings, v+"relabelings"))
	if _, ok := ep["metricRelabelings"]; ok {
		return errors.New("the endpoint has metricRelabelings, which the value would replace")
	}
	ep[t.optionalKey("metricRelabelings", v+"metricRelabelings", optBlock)] = ""
	return nil
}

// serviceMonitorOf makes, from the PodMonitor, a ServiceMonitor scraping
// the same pods through a headless Service of the same name: the Service
// selects the PodMonitor's pods and names the DaemonSet's port the
// endpoint scrapes. The endpoint, its relabelings included, is the
// PodMonitor's: Prometheus's endpoints role gives a pod's node too.
func serviceMonitorOf(pm, ds object) (sm, svc object, err error) {
	ep, err := monitorEndpoint(pm)
	if err != nil {
		return nil, nil, err
	}
	portName, _ := ep["port"].(string)
	port, err := containerPort(ds, portName)
	if err != nil {
		return nil, nil, err
	}
	selector, _ := nested(pm, "spec", "selector")["matchLabels"].(map[string]any)
	if len(selector) == 0 {
		return nil, nil, errors.New("the PodMonitor selects no pods by matchLabels")
	}
	meta := deepCopy(object{"m": pm["metadata"]})["m"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		meta["labels"] = labels
	}
	// The Service carries the pods' selector labels, so that the
	// ServiceMonitor selects it by the same labels.
	for k, v := range selector {
		labels[k] = v
	}
	svc = object{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata":   meta,
		"spec": map[string]any{
			"clusterIP": "None",
			"selector":  selector,
			"ports": []any{map[string]any{
				"name": portName, "port": port, "targetPort": portName, "protocol": "TCP",
			}},
		},
	}
	sm = object{
		"apiVersion": pm["apiVersion"],
		"kind":       "ServiceMonitor",
		"metadata":   deepCopy(object{"m": pm["metadata"]})["m"],
		"spec": map[string]any{
			"selector":  map[string]any{"matchLabels": selector},
			"endpoints": []any{ep},
		},
	}
	return deepCopy(sm), deepCopy(svc), nil
}

// containerPort is the agent container's port of that name.
func containerPort(ds object, name string) (any, error) {
	c, err := agentContainer(ds)
	if err != nil {
		return nil, err
	}
	ports, _ := c["ports"].([]any)
	for _, p := range ports {
		if p, _ := p.(map[string]any); p["name"] == name {
			return p["containerPort"], nil
		}
	}
	return nil, fmt.Errorf("the agent has no port %q, which the PodMonitor scrapes", name)
}
