//go:build wasip1

package status

import (
	"encoding/json"
	"fmt"
	"time"

	kubewasm "example.invalid/kubewasm/sdk"
)

// Apply stages a server-side apply of this status to `obj`'s `status` subresource unless the
// object, as cached, already has it; whether a write was staged. The object must be read whole
// or with `/status` among its declared fields.
func (s *Status) Apply(obj kubewasm.Object) (bool, error) {
	value, err := obj.Field("/status")
	if err != nil {
		return false, err
	}
	var current map[string]any
	if value != nil && value.Tag == kubewasm.ValueJson {
		if err := json.Unmarshal([]byte(value.Json), &current); err != nil {
			return false, fmt.Errorf("%s: status is not a JSON object: %w", obj.Key(), err)
		}
	}
	status := s.Changes(current, time.Now().UTC().Format(time.RFC3339))
	if status == nil {
		return false, nil
	}
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return false, err
	}
	sub := "status"
	target := kubewasm.Target{Gvk: obj.Gvk(), Namespace: obj.Namespace(), Name: obj.Name(), Subresource: &sub}
	if err := kubewasm.Cluster.Apply(target, string(body)); err != nil {
		return false, err
	}
	return true, nil
}
