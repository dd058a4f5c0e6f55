// Command image-policy is a validating admission webhook: Pods and Deployments may only use
// images whose name starts with a prefix in an allow list kept in a ConfigMap (`data.prefixes`,
// comma or newline separated), read from the host's cache. The Go twin of
// plugins/image-policy, passing its test file. Configuration: {"allowList": "namespace/name"}.
package main

import (
	"encoding/json"
	"fmt"
	"strings"

	kw "example.invalid/kubewasm/sdk"
	kwconfig "example.invalid/kubewasm/sdk/config"
)

type imagePolicy struct {
	kw.Plugin
	namespace, name *string
}

func (p imagePolicy) Init(config string) error {
	c := struct {
		AllowList string `json:"allowList"`
	}{AllowList: "kubewasm/image-allow-list"}
	if err := kwconfig.Parse(config, &c); err != nil {
		return err
	}
	ns, name, ok := strings.Cut(c.AllowList, "/")
	if !ok {
		return fmt.Errorf("allowList %q is not namespace/name", c.AllowList)
	}
	*p.namespace, *p.name = ns, name
	return nil
}

func (imagePolicy) Describe() kw.Manifest {
	writes := []kw.Operation{kw.OperationCreate, kw.OperationUpdate}
	return kw.NewManifest().Query(kw.ConfigMap).WithAdmission(kw.Validating(
		kw.Rule(kw.Pod, writes...),
		kw.Rule(kw.Deployment, writes...),
	))
}

func (imagePolicy) Handle(kw.Event) error { return nil }

func containersOf(kind string) []string {
	if kind == "Pod" {
		return []string{"/spec/containers", "/spec/initContainers"}
	}
	return []string{"/spec/template/spec/containers", "/spec/template/spec/initContainers"}
}

func (p imagePolicy) review(request kw.AdmissionRequest) (kw.AdmissionResponse, error) {
	if request.Object == nil {
		return kw.Allow(), nil
	}
	ns, name := *p.namespace, *p.name
	list, err := kw.Cache.Get(kw.ConfigMap, &ns, name)
	if err != nil {
		return kw.AdmissionResponse{}, err
	}
	if list == nil {
		return kw.Deny(fmt.Sprintf("no image allow list: ConfigMap %s/%s does not exist", ns, name)), nil
	}
	defer list.Drop()
	text, _, err := list.Text("/data/prefixes")
	if err != nil {
		return kw.AdmissionResponse{}, err
	}
	var prefixes []string
	for _, p := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == '\n' }) {
		if p = strings.TrimSpace(p); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	for _, pointer := range containersOf(request.Gvk.Kind) {
		value, err := request.Object.Field(pointer)
		if err != nil {
			return kw.AdmissionResponse{}, err
		}
		if value == nil {
			continue
		}
		var containers []struct {
			Name  string `json:"name"`
			Image string `json:"image"`
		}
		if err := json.Unmarshal([]byte(value.Json), &containers); err != nil {
			return kw.AdmissionResponse{}, fmt.Errorf("%s: %w", pointer, err)
		}
		for _, c := range containers {
			allowed := false
			for _, p := range prefixes {
				allowed = allowed || strings.HasPrefix(c.Image, p)
			}
			if !allowed {
				shown := "empty"
				if len(prefixes) > 0 {
					shown = strings.Join(prefixes, ", ")
				}
				return kw.Deny(fmt.Sprintf("container %s uses image %q, which is not in the allow list %s/%s (%s)",
					c.Name, c.Image, ns, name, shown)), nil
			}
		}
	}
	return kw.Allow(), nil
}

func (p imagePolicy) Admit(request kw.AdmissionRequest) kw.AdmissionResponse {
	response, err := p.review(request)
	if err != nil {
		return kw.Deny("cannot review: " + err.Error())
	}
	return response
}

func init() { kw.ExportHandler(imagePolicy{namespace: new(string), name: new(string)}) }

func main() {}
