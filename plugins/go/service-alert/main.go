// Command service-alert warns when a Service loses its last ready pod, once per change: the
// Go twin of plugins/service-alert, passing its test file.
//
// "No ready pod now" is not an edge: every pod update that leaves the Service empty would look
// like the one that emptied it. So the plugin keeps the Services it alerted on in its state,
// which the host keeps across instances, versions and replicas: a Warning Event `NoReadyPods`
// when the last ready pod goes, a Normal Event `ReadyPodsBack` when one is back, each once.
package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	kw "example.invalid/kubewasm/sdk"
)

type serviceAlert struct{ kw.Plugin }

func alerted(service kw.Object) string { return "empty/" + service.Key() }

func ready(pod kw.Object) (bool, error) {
	deleting, err := pod.Field("/metadata/deletionTimestamp")
	if err != nil || deleting != nil {
		return false, err
	}
	conditions, err := pod.Field("/status/conditions")
	if err != nil || conditions == nil {
		return false, err
	}
	var list []struct {
		Type   string `json:"type"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(conditions.Json), &list); err != nil {
		return false, err
	}
	for _, c := range list {
		if c.Type == "Ready" && c.Status == "True" {
			return true, nil
		}
	}
	return false, nil
}

// check alerts or clears `service` when its readiness changed since the last alert.
func check(service kw.Object) error {
	selector, err := service.Field("/spec/selector")
	if err != nil || selector == nil {
		return err // Endpoints managed by hand: nothing to count.
	}
	var labels map[string]string
	if err := json.Unmarshal([]byte(selector.Json), &labels); err != nil || len(labels) == 0 {
		return err
	}
	pairs := make([]string, 0, len(labels))
	for k, v := range labels {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	text := strings.Join(pairs, ",")
	pods, err := kw.Cache.ListObjects(kw.Pod, service.Namespace(), &text)
	if err != nil {
		return err
	}
	readyPods := 0
	for _, pod := range pods {
		ok, err := ready(pod)
		pod.Drop()
		if err != nil {
			return err
		}
		if ok {
			readyPods++
		}
	}
	key := alerted(service)
	wasEmpty := kw.State.Get(key) != nil
	switch {
	case readyPods == 0 && !wasEmpty:
		note := fmt.Sprintf("no ready pod among the %d it selects", len(pods))
		if err := kw.Cluster.RecordEvent(service, kw.EventTypeWarning, "NoReadyPods", note); err != nil {
			return err
		}
		kw.Log.Warn("service has no ready pods", "service", service.Key(), "pods", strconv.Itoa(len(pods)))
		return kw.State.Set(key, "1")
	case readyPods > 0 && wasEmpty:
		note := fmt.Sprintf("%d ready pods again", readyPods)
		if err := kw.Cluster.RecordEvent(service, kw.EventTypeNormal, "ReadyPodsBack", note); err != nil {
			return err
		}
		kw.Log.Info("service has ready pods again", "service", service.Key(), "ready", strconv.Itoa(readyPods))
		return kw.State.Remove(key)
	}
	return nil
}

func (serviceAlert) Describe() kw.Manifest {
	return kw.NewManifest(
		kw.Subscribe(kw.Service),
		// Readiness, membership and deletion: other pod updates cost nothing.
		kw.Subscribe(kw.Pod).OnChanges("/status/conditions", "/metadata/labels", "/metadata/deletionTimestamp"),
	).WithState()
}

// each runs `check` on every Service of `namespace` (nil: all of them).
func each(namespace *string) error {
	services, err := kw.Cache.ListObjects(kw.Service, namespace, nil)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range services {
			s.Drop()
		}
	}()
	for _, s := range services {
		if err := check(s); err != nil {
			return err
		}
	}
	return nil
}

func (serviceAlert) Handle(event kw.Event) error {
	obj := event.Object()
	if obj.Gvk().Kind == "Service" {
		if event.Tag == kw.EventDeleted {
			return kw.State.Remove(alerted(obj))
		}
		return check(obj)
	}
	// A pod changed: every Service of its namespace.
	return each(obj.Namespace())
}

func (serviceAlert) Synced() error { return each(nil) }

func init() { kw.ExportHandler(serviceAlert{}) }

func main() {}
