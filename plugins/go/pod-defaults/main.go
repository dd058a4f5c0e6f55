// Command pod-defaults is a mutating admission webhook: a created Pod without the team label
// gets its namespace's (read from the host's cache), and containers without resource requests
// get the configured ones. The Go twin of plugins/pod-defaults, passing its test file.
// Configuration: {"label": "team", "requests": {"cpu": "50m", "memory": "64Mi"}}.
package main

import (
	"encoding/json"
	"fmt"
	"strings"

	kw "example.invalid/kubewasm/sdk"
	kwconfig "example.invalid/kubewasm/sdk/config"
)

type config struct {
	Label    string            `json:"label"`
	Requests map[string]string `json:"requests"`
}

type podDefaults struct {
	kw.Plugin
	config *config
}

func (p podDefaults) Init(text string) error {
	c := config{Label: "team", Requests: map[string]string{"cpu": "50m", "memory": "64Mi"}}
	if err := kwconfig.Parse(text, &c); err != nil {
		return err
	}
	*p.config = c
	return nil
}

func (podDefaults) Describe() kw.Manifest {
	return kw.NewManifest().Query(kw.Namespace).WithAdmission(
		kw.Mutating(kw.Rule(kw.Pod, kw.OperationCreate)).IgnoreFailures())
}

func (podDefaults) Handle(kw.Event) error { return nil }

func (p podDefaults) review(request kw.AdmissionRequest) (kw.AdmissionResponse, error) {
	c := p.config
	if request.Object == nil {
		return kw.Allow(), nil
	}
	object := *request.Object
	text, err := object.Json()
	if err != nil {
		return kw.AdmissionResponse{}, err
	}
	var pod map[string]any
	if err := json.Unmarshal([]byte(text), &pod); err != nil {
		return kw.AdmissionResponse{}, err
	}
	var changed []string
	if object.Label(c.Label) == nil && request.Namespace != nil {
		namespace, err := kw.Cache.Get(kw.Namespace, nil, *request.Namespace)
		if err != nil {
			return kw.AdmissionResponse{}, err
		}
		if namespace != nil {
			team := namespace.Label(c.Label)
			namespace.Drop()
			if team != nil {
				metadata, ok := pod["metadata"].(map[string]any)
				if !ok {
					return kw.AdmissionResponse{}, fmt.Errorf("no metadata")
				}
				labels, ok := metadata["labels"].(map[string]any)
				if !ok {
					labels = map[string]any{}
					metadata["labels"] = labels
				}
				labels[c.Label] = *team
				changed = append(changed, "label "+c.Label)
			}
		}
	}
	spec, _ := pod["spec"].(map[string]any)
	containers, _ := spec["containers"].([]any)
	for _, item := range containers {
		container, ok := item.(map[string]any)
		if !ok {
			continue
		}
		resources, ok := container["resources"].(map[string]any)
		if !ok {
			if container["resources"] != nil {
				continue
			}
			resources = map[string]any{}
			container["resources"] = resources
		}
		if resources["requests"] == nil {
			requests := map[string]any{}
			for k, v := range c.Requests {
				requests[k] = v
			}
			resources["requests"] = requests
			if len(changed) == 0 || changed[len(changed)-1] != "requests" {
				changed = append(changed, "requests")
			}
		}
	}
	if len(changed) == 0 {
		return kw.Allow(), nil
	}
	patched, err := json.Marshal(pod)
	if err != nil {
		return kw.AdmissionResponse{}, err
	}
	return kw.PatchTo(string(patched)).Warn("kubewasm pod-defaults set: " + strings.Join(changed, ", ")), nil
}

func (p podDefaults) Admit(request kw.AdmissionRequest) kw.AdmissionResponse {
	response, err := p.review(request)
	if err != nil {
		return kw.Allow().Warn("kubewasm pod-defaults skipped: " + err.Error())
	}
	return response
}

func init() { kw.ExportHandler(podDefaults{config: &config{}}) }

func main() {}
